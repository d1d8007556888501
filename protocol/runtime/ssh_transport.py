"""asyncssh's transport as lanpool's connections use it: one change, installed once per process
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
"""

import logging
from typing import Any

log = logging.getLogger(__name__)

_EMPTY_STRING = b"\0\0\0\0"  # SSH string b"": what asyncssh's countermeasure sends
_MARK = "_lanpool_no_aead_ignore"


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
    return True
