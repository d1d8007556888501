"""protocol/runtime/tls_relay.py: a terminal's bytes both ways over one TLS socket, on one thread.

Two relays face each other across a real TLS connection on loopback, each with pipes as
its local side. Several MiB are pushed both ways at once, far past every buffer, so the
partial writes and the wait for a full TLS record are all taken; the bytes must arrive
whole and in order, and neither side may wedge on the other."""

import hashlib
import os
import socket
import ssl
import threading

from lanpool.agent.direct import _write_identity
from lanpool.protocol.runtime import tls_relay

SIZE = 6 * 1024 * 1024


def _tls_pair(tmp_path) -> tuple[ssl.SSLSocket, ssl.SSLSocket]:
    pem = tmp_path / "id.pem"
    _write_identity(pem)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(pem)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[ssl.SSLSocket] = []
    server = threading.Thread(
        target=lambda: accepted.append(server_ctx.wrap_socket(listener.accept()[0], server_side=True))
    )
    server.start()
    client = client_ctx.wrap_socket(socket.create_connection(listener.getsockname()))
    server.join(10)
    listener.close()
    return client, accepted[0]


def _feed(fd: int, data: bytes, close: bool = True) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view[: 256 * 1024]) :]
    if close:
        os.close(fd)


def _drain(fd: int, size: int, into: list[bytes]) -> None:
    got = 0
    while got < size and (chunk := os.read(fd, 1024 * 1024)):
        into.append(chunk)
        got += len(chunk)


def test_both_ways_at_once_arrive_whole_and_the_end_goes_through(tmp_path):
    a_conn, b_conn = _tls_pair(tmp_path)
    a_in_r, a_in_w = os.pipe()
    a_out_r, a_out_w = os.pipe()
    b_in_r, b_in_w = os.pipe()
    b_out_r, b_out_w = os.pipe()
    from_a, from_b = os.urandom(SIZE), os.urandom(SIZE)
    at_b: list[bytes] = []
    at_a: list[bytes] = []
    # a: the job's side (ends when its output ends); b: the controller's (ends with the connection).
    relays = [
        threading.Thread(target=tls_relay.relay, args=(a_conn, a_in_r, a_out_w), kwargs={"end_with_local": True}),
        threading.Thread(target=tls_relay.relay, args=(b_conn, b_in_r, b_out_w), kwargs={"end_with_local": False}),
    ]
    readers = [
        threading.Thread(target=_drain, args=(b_out_r, SIZE, at_b)),
        threading.Thread(target=_drain, args=(a_out_r, SIZE, at_a)),
    ]
    for t in relays + readers:
        t.start()
    writer_b = threading.Thread(target=_feed, args=(b_in_w, from_b))
    writer_b.start()
    _feed(a_in_w, from_a, close=False)
    writer_b.join(60)
    for t in readers:
        t.join(60)
    os.close(a_in_w)  # the job's side ends (its output done): a's relay ends, having sent it all
    a_conn.close()  # what the agent does once its relay returned: b sees the end
    for t in relays:
        t.join(30)
    assert not any(t.is_alive() for t in relays + readers), "a relay wedged"
    assert hashlib.sha256(b"".join(at_b)).digest() == hashlib.sha256(from_a).digest()
    assert hashlib.sha256(b"".join(at_a)).digest() == hashlib.sha256(from_b).digest()


def test_the_stop_fd_ends_a_relay_waiting_on_a_quiet_connection(tmp_path):
    a_conn, b_conn = _tls_pair(tmp_path)
    local_r, local_w = os.pipe()
    out_r, out_w = os.pipe()
    stop_r, stop_w = os.pipe()
    relay = threading.Thread(
        target=tls_relay.relay, args=(b_conn, local_r, out_w), kwargs={"stop_fd": stop_r, "end_with_local": False}
    )
    relay.start()
    relay.join(0.5)
    assert relay.is_alive(), "a quiet connection is no end"
    os.write(stop_w, b"x")
    relay.join(10)
    assert not relay.is_alive()
    a_conn.close()
