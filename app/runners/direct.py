"""A runner's direct connection for artifacts, the controller's side: the TLS handshake and
the artifact stream read on it, frame by bounded frame (see agent/direct.py for why, and what
the runner does).

The runner's DirectOffer came over the SSH connection, whose host key is pinned, so it is
the runner's word: the controller connects to the port it names on the runner's address,
checks that the TLS certificate there is the one named (anything else, such as a LAN peer
that took the port, is sent nothing), then sends the token and reads the same frames it
would have read on the channel, each through the same checks (app/transfer/pull.py
Writer). Until the token is sent nothing has been taken, so a connection that cannot be
made (a firewall lets only the SSH port through) or a certificate that does not match
falls back to the channel (DirectUnavailable); a drop after that is a lost connection
like any other, resumed from the bytes written.
"""

import hashlib
import hmac
import os
import socket
import ssl
import struct
from collections.abc import Callable, Sequence

from lanpool.app.errors import ArtifactsRefused, LanpoolError, RunnerError, RunnerProtocolError
from lanpool.protocol import (
    ArtifactData,
    ArtifactEnd,
    ArtifactsSent,
    DirectOffer,
    Error,
    ProtocolError,
    decode_agent_message,
)
from lanpool.protocol.errors import clip
from lanpool.protocol.framing import MAX_FRAME_BYTES, unpack_body
from lanpool.protocol.messages import AgentMessage
from lanpool.protocol.transfer_messages import ARTIFACT_DIRECT

DIRECT_ENV = "LANPOOL_DIRECT_TRANSFERS"
CONNECT_TIMEOUT_S = 5.0
IDLE_TIMEOUT_S = 60.0  # a runner that sends nothing for this long is lost (as on the channel)
_HEADER = struct.Struct(">I")


class DirectUnavailable(LanpoolError):
    """No direct connection to the runner (nothing sent or taken yet): use the channel."""


def direct_wanted(features: Sequence[str]) -> bool:
    """Whether to ask this runner for a direct transfer: it offers them, and
    LANPOOL_DIRECT_TRANSFERS is not 0."""
    return ARTIFACT_DIRECT in features and os.environ.get(DIRECT_ENV, "1").strip() != "0"


def fetch(
    host: str, offer: DirectOffer, take: Callable[[Sequence[AgentMessage]], None], where: str, idle_s: float
) -> None:
    """Read the offered stream into `take` until ArtifactsSent (blocking: run it in a thread).
    ArtifactsRefused for an Error from the runner; RunnerProtocolError for a frame that is
    not an artifact message; RunnerError when the stream stops or idles `idle_s`."""
    try:
        raw = socket.create_connection((host, offer.port), timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        raise DirectUnavailable(f"cannot connect to port {offer.port}: {exc.strerror or exc}") from None
    with raw:
        conn = _handshake(raw, offer)
        with conn:
            conn.settimeout(idle_s)
            try:
                _read(conn, take, where)
            except TimeoutError:
                raise RunnerError(f"{where} stopped sending artifacts of job {offer.job_id}") from None
            except (OSError, ssl.SSLError) as exc:
                raise RunnerError(f"lost {where} while pulling artifacts: {exc}") from None


def _handshake(raw: socket.socket, offer: DirectOffer) -> ssl.SSLSocket:
    """The TLS connection, once its certificate is the offered one and the token is sent."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # self-signed: its digest, which came over SSH, is the check
    try:
        conn = context.wrap_socket(raw)
        cert = conn.getpeercert(binary_form=True) or b""
    except (OSError, ssl.SSLError) as exc:
        raise DirectUnavailable(f"no TLS on port {offer.port}: {exc}") from None
    if not hmac.compare_digest(hashlib.sha256(cert).hexdigest(), offer.cert_sha256):
        conn.close()
        raise DirectUnavailable(f"port {offer.port} answered with a certificate that is not the runner's")
    try:
        conn.sendall(offer.token)
    except OSError as exc:
        conn.close()
        raise DirectUnavailable(f"port {offer.port} closed: {exc}") from None
    return conn


def _read(conn: ssl.SSLSocket, take: Callable[[Sequence[AgentMessage]], None], where: str) -> None:
    head = bytearray(_HEADER.size)
    while True:
        if not _fill(conn, memoryview(head)):
            raise RunnerError(f"{where} closed the artifact connection before all files were sent")
        (size,) = _HEADER.unpack(head)
        msg = _read_message(conn, size, where)
        if isinstance(msg, Error):
            raise ArtifactsRefused(f"{where}: {clip(msg.message, 300)}")
        if not isinstance(msg, (ArtifactData, ArtifactEnd, ArtifactsSent)):
            raise RunnerProtocolError(f"{where} sent {type(msg).__name__} among artifact data")
        take([msg])
        if isinstance(msg, ArtifactsSent):
            return


def _read_message(conn: ssl.SSLSocket, size: int, where: str) -> AgentMessage:
    """The message of a frame whose header said `size` bytes: bounded, read whole and decoded
    (a direct connection's frames get the checks a channel's get)."""
    if size > MAX_FRAME_BYTES:
        raise RunnerProtocolError(f"{where} sent a frame of {size} bytes (at most {MAX_FRAME_BYTES})")
    body = bytearray(size)
    if not _fill(conn, memoryview(body)):
        raise RunnerError(f"{where} closed the artifact connection in the middle of a frame")
    try:
        return decode_agent_message(unpack_body(body))
    except ProtocolError as exc:
        raise RunnerProtocolError(
            f"{where} sent a message this controller cannot read: {clip(exc.message, 300)}"
        ) from None


def _fill(conn: ssl.SSLSocket, view: memoryview) -> bool:
    """Fill `view` from the connection; False when the stream ends first."""
    done = 0
    while done < len(view):
        got = conn.recv_into(view[done:])
        if not got:
            return False
        done += got
    return True
