"""asyncssh's transport as lanpool's connections use it: two changes, installed once per process
by the modules every SSH connection of a controller or an agent goes through (app/runners/client.py,
agent/ssh/server.py). asyncssh is imported only by install(): protocol/ stays importable without it.

asyncssh sends an empty SSH_MSG_IGNORE packet before every packet it encrypts
(asyncssh/connection.py send_packet): the old countermeasure to the chosen-plaintext attack on
CBC mode's IVs chained across packets. An AEAD cipher (AES-GCM, chacha20-poly1305: what
every lanpool connection negotiates first, protocol/wire.py ENCRYPTION_ALGS) has no chained IV
and OpenSSH sends no such packets with it; asyncssh's double the packets each side encrypts,
decrypts and parses in Python. In a log flood on the controller that was half of its ~9,600
packets for 1M lines (cProfile: ~25% of its CPU in asyncssh's per-packet code).
install() leaves those packets out when the connection's send encryption is AEAD; with any other
cipher (CTR, CBC) asyncssh sends them as before.

An OpenSSH client (the `ssh` of an `ssh-config` entry's ProxyCommand, app/shell/ssh_hop.py) leaves
Nagle's algorithm on for a session without a terminal: a small packet it sends while its last one
is not yet acknowledged waits for our ACK, which Linux delays up to 40 ms when we have nothing to
send back. The handshake hit it twice (KEX_ECDH_INIT after KEXINIT, SERVICE_REQUEST after
NEWKEYS): ~80 ms of a ~100 ms connection to the agent, ~17 ms without. install() asks the kernel
for an immediate ACK (TCP_QUICKACK, Linux; it lasts for a few segments only) each time data
arrives: one setsockopt per read.
"""

import logging
import socket
from typing import Any

log = logging.getLogger(__name__)

_EMPTY_STRING = b"\0\0\0\0"  # SSH string b"": what asyncssh's countermeasure sends
_MARK = "_lanpool_no_aead_ignore"
_QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only


def install() -> bool:
    """Idempotent; False (asyncssh as it is) when its internals are not the ones this was written for."""
    try:
        from asyncssh.connection import SSHConnection
        from asyncssh.constants import MSG_IGNORE
        from asyncssh.encryption import ChachaEncryption, GCMEncryption
    except ImportError as exc:  # another asyncssh layout: keep its behaviour
        log.debug("asyncssh's ignore packets kept: %s", exc)
        return False
    original = SSHConnection.send_packet
    if getattr(original, _MARK, False):
        return True
    aead = (GCMEncryption, ChachaEncryption)

    def send_packet(self: Any, pkttype: int, *args: bytes, handler: Any = None) -> None:
        if (
            pkttype == MSG_IGNORE
            and args == (_EMPTY_STRING,)
            and isinstance(getattr(self, "_send_encryption", None), aead)
        ):
            return
        original(self, pkttype, *args, handler=handler)

    setattr(send_packet, _MARK, True)
    send_packet.__doc__ = original.__doc__
    SSHConnection.send_packet = send_packet  # type: ignore[method-assign]
    if _QUICKACK is not None:
        received = SSHConnection.data_received

        def data_received(self: Any, data: bytes, datatype: Any = None) -> None:
            quick_ack(self)
            received(self, data, datatype)

        data_received.__doc__ = received.__doc__
        SSHConnection.data_received = data_received  # type: ignore[method-assign]
    return True


def quick_ack(conn: Any) -> None:
    """The ACK of what just arrived now, not in up to 40 ms (see above); nothing on a socket that
    is not TCP (a socket pair in tests) or already closed."""
    transport = getattr(conn, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
    except OSError:
        pass
