"""The TUI's start-up: what its first frame imports, what loads after it, and the
pinned host keys read as text (without the SSH stack) as strictly as asyncssh reads them.
The in-process part (unit); the rest: tests/integration/test_tui_startup.py."""

import base64
import os

import pytest

pytest.importorskip("textual")


from lanpool.app.runners.host_keys import UnreadableHostKey, host_key_or_none, pinned_key  # noqa: E402


def _ed25519_text() -> str:
    blob = b"".join(len(p).to_bytes(4, "big") + p for p in (b"ssh-ed25519", os.urandom(32)))
    return "ssh-ed25519 " + base64.b64encode(blob).decode()


def test_a_host_key_read_as_text_agrees_with_asyncssh():
    asyncssh = pytest.importorskip("asyncssh")
    key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    assert host_key_or_none(key) == key
    assert host_key_or_none(key + " me@laptop") == key  # a comment is dropped
    assert host_key_or_none(_ed25519_text()) is not None  # any 32 bytes are an ed25519 key (as to asyncssh)
    assert pinned_key({"name": "gpu1", "host_key": key}) == key


def _blob(key: str) -> bytes:
    return base64.b64decode(key.split()[1])


def _text(blob: bytes, name: str = "ssh-ed25519") -> str:
    return f"{name} {base64.b64encode(blob).decode()}"


def test_a_host_key_that_is_not_a_plain_ed25519_key_is_refused():
    asyncssh = pytest.importorskip("asyncssh")
    good = _ed25519_text()
    raw = _blob(good)
    ca = asyncssh.generate_private_key("ssh-ed25519")
    cert = ca.generate_user_certificate(asyncssh.generate_private_key("ssh-ed25519"), "u").export_certificate()
    rsa = asyncssh.generate_private_key("ssh-rsa", key_size=1024).export_public_key().decode()
    bad = [
        _text(raw[:-1]),  # a byte short
        _text(raw + b"\0"),  # a byte over
        _text(raw[:4] + b"ssh-ed448" + raw[15:]),  # another type inside
        _text(b"\0\0\0\x0bssh-ed25519\0\0\0\x21" + raw[-32:] + b"\0"),  # a 33-byte key
        "ssh-ed25519 " + cert.decode().split()[1],  # a certificate under the plain name
        "ssh-ed25519 " + rsa.split()[1],  # an RSA key under it
        rsa,
        good + "=",  # another spelling of the same bytes: not what an agent announces
        good.replace(good.split()[1][:3], "!!!"),
        "ssh-ed25519",
        "",
        "x" * 100_000,
        None,
        42,
    ]
    for text in bad:
        assert host_key_or_none(text) is None, text
    with pytest.raises(UnreadableHostKey, match="runner gpu1 has an unreadable pinned key"):
        pinned_key({"name": "gpu1", "host_key": bad[0]})
