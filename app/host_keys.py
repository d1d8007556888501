"""What this controller takes as a runner's host key, in adverts and in its own store.

lanpool agents have ed25519 host keys (agent/keys.py) and announce them whole in
their TXT record, as "ssh-ed25519 BASE64". Anything else there (garbage, another
key type, a huge blob) is not a lanpool agent's key and is dropped. A stored key
that no longer reads (a damaged database) makes only its own runner unusable,
with one line saying how to fix it.
"""

from typing import Any

from app.errors import LanpoolError

KEY_TYPE = "ssh-ed25519"
# "ssh-ed25519 " and 68 base64 characters, with room for a comment: a bound checked
# before anything parses the text.
MAX_KEY_TEXT = 256


class UnreadableHostKey(LanpoolError):
    """The host key pinned for a runner in the store cannot be read (exit code FAILED: a local problem)."""


def host_key_or_none(text: object) -> str | None:
    """The key as "ssh-ed25519 BASE64" if `text` is a valid ed25519 public key, else None."""
    if not isinstance(text, str) or not text or len(text) > MAX_KEY_TEXT:
        return None
    parts = text.split()
    if len(parts) < 2 or parts[0] != KEY_TYPE:
        return None
    import asyncssh  # here, not at the top: `status` lists stored runners without the SSH stack (issue #17)

    try:
        key = asyncssh.import_public_key(f"{parts[0]} {parts[1]}")
    except (asyncssh.KeyImportError, ValueError, TypeError):
        return None
    if key.get_algorithm() != KEY_TYPE:  # e.g. a certificate, or a blob of another type under this name
        return None
    return f"{parts[0]} {parts[1]}"


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
