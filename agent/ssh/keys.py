"""Host key and authorized controller keys of an agent, and which controller a proven key is."""

import logging
import os
from pathlib import Path

import asyncssh

from lanpool.agent.errors import AgentError
from lanpool.agent.jobs.owner import Owner
from lanpool.protocol import key_text
from lanpool.protocol.pairing import sanitize_label

log = logging.getLogger(__name__)

MAX_LABEL = 64  # characters of a controller's label kept with its jobs


def load_or_create_host_key(path: Path) -> asyncssh.SSHKey:
    """The agent's ed25519 host key, generated on first start."""
    if path.exists():
        try:
            return asyncssh.read_private_key(str(path))
        except (OSError, asyncssh.KeyImportError) as exc:
            raise AgentError(f"cannot read host key {path}: {exc}; move it away to generate a new one") from None
    key = asyncssh.generate_private_key("ssh-ed25519", comment="lanpool-agent")
    key.write_private_key(str(path))
    os.chmod(path, 0o600)
    key.write_public_key(str(path) + ".pub")
    return key


def authorize_key(authorized_keys: Path, pubkey_file: Path, label: str = "") -> str:
    """Add the public key in `pubkey_file` with `label` (else its own comment) as the name its
    jobs are shown under to other controllers and in `app agent status`/`usage`: "authorized",
    "relabelled" (it was there, now with `label`) or "already authorized"."""
    try:
        text = pubkey_file.read_text()
    except OSError as exc:
        raise AgentError(f"cannot read {pubkey_file}: {exc.strerror}") from None
    shown = sanitize_label(label)
    if label and not shown:
        raise AgentError(f"--label {label[:40]!r}: give a name of letters, digits, spaces or -_.@ (e.g. alice)")
    try:
        if add_authorized_key(authorized_keys, text, shown):
            return "authorized"
        return "relabelled" if shown and relabel_key(authorized_keys, text, shown) else "already authorized"
    except ValueError as exc:
        raise AgentError(f"{pubkey_file} is not an SSH public key ({exc}); pass the .pub file") from None


def relabel_key(authorized_keys: Path, text: str, label: str) -> bool:
    """Give an authorized key a new label (its line's comment); False if it had that one already.
    The file is replaced whole (a reader never sees half of it); the agent reads it again on change."""
    key = asyncssh.import_public_key(text.strip())
    key.set_comment(label)
    new_line = key.export_public_key().decode().strip()
    lines = authorized_keys.read_text().splitlines()
    wanted = key_text(new_line)
    changed = [
        new_line if line.strip() and key_text(line) == wanted and line.strip() != new_line else line for line in lines
    ]
    if changed == lines:
        return False
    tmp = authorized_keys.with_name(authorized_keys.name + ".new")
    tmp.write_text("".join(line + "\n" for line in changed))
    os.chmod(tmp, 0o600)
    os.replace(tmp, authorized_keys)
    return True


def add_authorized_key(authorized_keys: Path, text: str, comment: str = "") -> bool:
    """Add one OpenSSH public key line; ValueError if it is not one."""
    try:
        key = asyncssh.import_public_key(text.strip())
    except (asyncssh.KeyImportError, ValueError) as exc:
        raise ValueError(f"not an SSH public key: {exc}") from None
    if comment:
        key.set_comment(" ".join(comment.split()))  # one line, whatever the caller passed
    line = key.export_public_key().decode().strip()
    if "\n" in line or "\r" in line:
        raise ValueError("a public key with a line break in it")
    existing = authorized_keys.read_text().splitlines() if authorized_keys.exists() else []
    known = {key_text(entry) for entry in existing if entry.strip()}
    if key_text(line) in known:
        return False
    with open(authorized_keys, "a") as fh:
        fh.write(line + "\n")
    os.chmod(authorized_keys, 0o600)
    return True


class ControllerKeys:
    """authorized_keys as read when a connection begins authenticating (so `app agent
    authorize` needs no restart): which controller a proven key is, and its label (the
    key's comment there: the name it paired with)."""

    def __init__(self, allowed: asyncssh.SSHAuthorizedKeys | None, labels: dict[str, str]) -> None:
        self._allowed = allowed
        self._labels = labels

    @classmethod
    def read(cls, authorized_keys: Path) -> "ControllerKeys":
        try:
            text = authorized_keys.read_text()
            allowed = asyncssh.import_authorized_keys(text)
        except (OSError, ValueError) as exc:  # no file yet, or no key in it
            log.debug("no authorized controller keys: %s", exc)
            return cls(None, {})
        labels: dict[str, str] = {}
        for line in text.splitlines():
            words = line.split()
            for i in range(len(words) - 1):  # the key may follow options (`from="...",restrict ssh-ed25519 AAAA...`)
                if words[i].startswith(("ssh-", "ecdsa-", "sk-")):
                    labels.setdefault(f"{words[i]} {words[i + 1]}", " ".join(words[i + 2 :])[:MAX_LABEL])
                    break
        return cls(allowed, labels)

    def owner(self, key: asyncssh.SSHKey, peer_addr: str) -> Owner | None:
        """The controller `key` is, when authorized_keys lets it in from `peer_addr` (its
        `from=` options honoured); None otherwise."""
        if self._allowed is None or self._allowed.validate(key, peer_addr, peer_addr) is None:
            return None
        label = self._labels.get(key_text(key.export_public_key().decode()), "")
        return Owner(key.get_fingerprint("sha256"), label)
