"""Artifacts on a connection of their own beside SSH: TLS from a C library instead of SSH
packets handled in Python.

Over the SSH channel a 1 GiB pull was held to ~0.6x `scp` by asyncssh's per-packet work on
both sides; the same frames over a TLS socket, written and read by a thread each, move at
what the link and AES-GCM allow. The SSH channel stays the only way in: a controller asks
for a direct transfer there (GetArtifacts(direct=True)), and gets a DirectOffer back, with
a port this runner listens on once, the SHA-256 of its TLS certificate, and a one-time
token. Both secrets travel inside the authenticated SSH connection, so
- a LAN peer that connects to the port first is sent nothing: it has no token (it is
  closed, and the runner keeps waiting for the real controller until the offer's time is over;
  a silent connection holds no other up);
- the controller sends the token to no one else: it checks the certificate first
  (see app/runners/direct.py).
The certificate is self-signed and made anew at each agent start (an EC key in the agent's
data dir, 0600); nothing else about it is checked, since its digest came over SSH.

A listener lives at most OFFER_TTL_S and serves one transfer; MAX_TRANSFERS bounds those at
once per agent (past it, the request is streamed on its channel as before). A job's one-time
sshd (agent/shell/sshd.py) listens in the same ports (listen_plain).
"""

import contextlib
import datetime
import hashlib
import hmac
import logging
import os
import random
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path

from lanpool.protocol import DirectOffer
from lanpool.protocol.transfer_messages import DIRECT_TOKEN_BYTES

log = logging.getLogger(__name__)

OFFER_TTL_S = 15.0  # a controller that has not connected by then has fallen back to the channel
HANDSHAKE_S = 5.0  # TLS handshake and token, per connection
SEND_TIMEOUT_S = 60.0  # a controller that stops reading is dropped (it resumes from its offset)
# Connections checked at once (TLS handshake and token, each on a thread of its own, so that a
# silent one holds no other up); more are closed unread, until one brings the token or the
# offer's time is over: connections without the token no longer use the offer up.
MAX_PENDING = 8
MAX_TRANSFERS = 8  # direct transfers at once

Frames = Callable[[], Generator[bytes | bytearray, None, None]]


class DirectSender:
    """This agent's TLS identity and its direct transfers under way."""

    def __init__(self, data_dir: Path, ports: range | None = None) -> None:
        """`ports`: where to listen (a firewall's open range); None: any free port."""
        self._pem = data_dir / "direct-tls.pem"
        self._ports = ports
        self._context: ssl.SSLContext | None = None
        self._fingerprint = ""
        self._lock = threading.Lock()
        self._live: set[_Transfer] = set()

    def _ensure_identity(self) -> None:
        if self._context is None:  # on first use: the cryptography import and a key cost ~0.1 s
            self._fingerprint = _write_identity(self._pem)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_3
            context.load_cert_chain(self._pem)
            context.num_tickets = 0  # no resumption is ever used
            self._context = context

    def offer(self, host: str, job_id: str, frames: Frames) -> DirectOffer | None:
        """Listen on `host` (the address the controller reached over SSH) for one transfer of
        `frames`; None when at the limit, or no listener can be had (then stream on the channel)."""
        what = f"direct transfer of job {job_id}"
        with self._lock:
            if len(self._live) >= MAX_TRANSFERS:
                log.info("%s: %d under way already; staying on the channel", what, MAX_TRANSFERS)
                return None
            try:
                self._ensure_identity()
                listener = self._listen(host)
            except (OSError, ssl.SSLError, ValueError) as exc:
                log.warning("%s: cannot listen on %s (%s); staying on the channel", what, host, exc)
                return None
            assert self._context is not None
            token = secrets.token_bytes(DIRECT_TOKEN_BYTES)
            offer = DirectOffer(job_id, listener.getsockname()[1], self._fingerprint, token)
            transfer = _Transfer(self, OneConnection(listener, self._context, token, what), job_id, frames)
            self._live.add(transfer)
        threading.Thread(target=transfer.serve, name=f"direct-{job_id}", daemon=True).start()
        return offer

    def listen_plain(self, host: str) -> socket.socket:
        """A plain listener on `host`, in the same ports as the TLS ones (a firewall's open range):
        a job's one-time sshd takes its connection (agent/shell/sshd.py). OSError when none."""
        return self._listen(host)

    def _listen(self, host: str) -> socket.socket:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        if self._ports is None:
            return socket.create_server((host, 0), family=family, backlog=MAX_PENDING)
        error: OSError | None = None
        for port in random.sample(self._ports, len(self._ports)):
            try:
                return socket.create_server((host, port), family=family, backlog=MAX_PENDING)
            except OSError as exc:  # taken (another transfer, another program): the next
                error = exc
        raise OSError(f"no free port in {self._ports.start}-{self._ports.stop - 1}: {error}")

    def _ended(self, transfer: "_Transfer") -> None:
        with self._lock:
            self._live.discard(transfer)

    def close(self) -> None:
        """Stop every transfer (the agent is shutting down): their controllers resume later."""
        with self._lock:
            live = list(self._live)
        for transfer in live:
            transfer.close()


class OneConnection:
    """A listener for one TLS connection that sends the offer's token first."""

    def __init__(self, listener: socket.socket, context: ssl.SSLContext, token: bytes, what: str) -> None:
        self._listener = listener
        self._context = context
        self._token = token
        self._what = what

    def accept(self, ttl_s: float = OFFER_TTL_S) -> ssl.SSLSocket | None:
        """The connection that brought the token, or None when none came within `ttl_s`, or
        close() was called. The listener is closed either way: one connection per offer."""
        try:
            return self._accept(ttl_s)
        finally:
            self._listener.close()

    def _accept(self, ttl_s: float) -> ssl.SSLSocket | None:
        deadline = time.monotonic() + ttl_s
        lock = threading.Lock()
        taken: ssl.SSLSocket | None = None
        over = False  # the offer's time is over, or it was taken or withdrawn: later connections are closed
        pending = 0

        def check(raw: socket.socket, peer: str) -> None:
            nonlocal taken, pending
            try:
                conn = self._handshake(raw, peer)
                with lock:
                    if conn is not None and taken is None and not over:
                        taken = conn
                        # Wakes the accept() below: the offer is taken.
                        with contextlib.suppress(OSError):
                            self._listener.shutdown(socket.SHUT_RDWR)
                    elif conn is not None:  # came after the winner, or after the offer's time
                        conn.close()
            finally:
                with lock:
                    pending -= 1

        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                self._listener.settimeout(left)
                raw, addr = self._listener.accept()
            except OSError:  # timed out, taken (shut above), or closed by close()
                break
            with lock:
                full = pending >= MAX_PENDING
                if not full:
                    pending += 1
            if full:
                log.warning("%s: a connection from %s closed unread: %d being checked", self._what, addr[0], pending)
                raw.close()
                continue
            threading.Thread(target=check, args=(raw, addr[0]), name="direct-accept", daemon=True).start()
        with lock:
            over = True  # a check that ends later finds the offer gone and closes its connection
            if taken is not None:
                return taken
        log.info("%s: no controller came; withdrawn", self._what)
        return None

    def _handshake(self, raw: socket.socket, peer: str) -> ssl.SSLSocket | None:
        """The TLS connection, once it brought the token; None (closed) otherwise."""
        raw.settimeout(HANDSHAKE_S)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            conn = self._context.wrap_socket(raw, server_side=True)
            got = _recv_exact(conn, DIRECT_TOKEN_BYTES)
        except (OSError, ssl.SSLError) as exc:
            log.warning("%s: a connection from %s failed: %s", self._what, peer, exc)
            raw.close()
            return None
        if got is None or not hmac.compare_digest(got, self._token):
            log.warning("%s: a connection from %s without its token; closed", self._what, peer)
            conn.close()
            return None
        return conn

    def close(self) -> None:
        """Withdraw the offer (an accept() under way returns None)."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes an accept() blocked in another thread
        self._listener.close()


class _Transfer:
    def __init__(self, owner: DirectSender, once: OneConnection, job_id: str, frames: Frames) -> None:
        self._owner = owner
        self._once = once
        self._job_id = job_id
        self._frames = frames
        self._conn: socket.socket | None = None
        self._closed = False

    def serve(self) -> None:
        try:
            conn = self._once.accept()
            if conn is not None and not self._closed:
                self._send(conn)
            elif conn is not None:
                conn.close()
        finally:
            self.close()
            self._owner._ended(self)

    def _send(self, conn: ssl.SSLSocket) -> None:
        self._conn = conn
        conn.settimeout(SEND_TIMEOUT_S)
        started, sent = time.monotonic(), 0
        frames = self._frames()
        try:
            for buf in frames:
                conn.sendall(buf)
                sent += len(buf)
        except OSError as exc:  # the controller went, or stopped reading: it resumes from its offset
            log.info("direct transfer of job %s cut after %d bytes: %s", self._job_id, sent, exc)
            return
        finally:
            frames.close()  # its file is closed now
        log.info("direct transfer of job %s: %d bytes in %.2f s", self._job_id, sent, time.monotonic() - started)
        try:
            conn.unwrap()  # a clean TLS close: the controller reads to the end
        except (OSError, ssl.SSLError, ValueError):  # ValueError: close() ended it meanwhile
            pass

    def close(self) -> None:
        self._closed = True
        self._once.close()
        if self._conn is not None:
            try:
                self._conn.shutdown(socket.SHUT_RDWR)  # wakes a sendall blocked in the other thread
            except OSError:
                pass
            self._conn.close()


def _recv_exact(conn: ssl.SSLSocket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        part = conn.recv(n - len(buf))
        if not part:
            return None
        buf += part
    return buf


def _write_identity(pem: Path) -> str:
    """A new self-signed certificate and its key in `pem` (0600); returns the certificate's
    SHA-256 (hex), which is all a controller checks."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lanpool runner")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
    body = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ) + cert.public_bytes(serialization.Encoding.PEM)
    tmp = pem.with_name(pem.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(body)
    os.replace(tmp, pem)
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()
