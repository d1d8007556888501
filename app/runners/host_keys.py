"""What this controller takes as a runner's host key, in adverts and in its own store.

lanpool agents have ed25519 host keys (agent/ssh/keys.py) and announce them whole in
their TXT record, as "ssh-ed25519 BASE64". Anything else there (garbage, another
key type, a huge blob) is not a lanpool agent's key and is dropped. A stored key
that no longer reads (a damaged database) makes only its own runner unusable,
with one line saying how to fix it.
"""

import base64
import binascii
from typing import Any

from lanpool.app.errors import LanpoolError

KEY_TYPE = "ssh-ed25519"
# "ssh-ed25519 " and 68 base64 characters, with room for a comment: a bound checked
# before anything parses the text.
MAX_KEY_TEXT = 256


class UnreadableHostKey(LanpoolError):
    """The host key pinned for a runner in the store cannot be read (exit code FAILED: a local problem)."""


def host_key_or_none(text: object) -> str | None:
    """The key as "ssh-ed25519 BASE64" if `text` is a valid ed25519 public key, else None.

    Read as RFC 8709 lays it out (string "ssh-ed25519", string of 32 key bytes, nothing
    else), with base64 in its one canonical spelling. That is all asyncssh's import checks
    for this type (any 32 bytes are an ed25519 public key to it and to OpenSSL), and it
    needs no SSH stack: the TUI checks every stored runner's key before its first frame,
    and importing asyncssh for it took ~0.25 s of a 1 s start. asyncssh reads
    the key again when a connection is made."""
    if not isinstance(text, str) or not text or len(text) > MAX_KEY_TEXT:
        return None
    parts = text.split()
    if len(parts) < 2 or parts[0] != KEY_TYPE:
        return None
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        return None
    if base64.b64encode(blob).decode() != parts[1]:
        return None  # another spelling of some bytes: not what an agent announces
    if blob != _wire_string(KEY_TYPE.encode()) + _wire_string(blob[-32:]) or len(blob) != _ED25519_BLOB:
        return None  # a certificate, a blob of another type under this name, or bytes around the key
    return f"{parts[0]} {parts[1]}"


_ED25519_BLOB = 4 + len(KEY_TYPE) + 4 + 32


def _wire_string(data: bytes) -> bytes:
    """SSH's wire form of a string: its length (4 bytes, big-endian), then its bytes."""
    return len(data).to_bytes(4, "big") + data


def unreadable_key_message(name: str) -> str:
    return (
        f"runner {name} has an unreadable pinned key: `app headless runners remove {name}`, then add or pair it again"
    )


def pinned_key(row: dict[str, Any]) -> str:
    """The host key pinned for a stored runner; one clear error when the store's copy is damaged."""
    key = host_key_or_none(row.get("host_key"))
    if key is None:
        raise UnreadableHostKey(unreadable_key_message(row["name"]))
    return key
