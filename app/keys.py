"""The controller's own SSH key, created on first use."""

import os
from pathlib import Path

import asyncssh

from lanpool.app.errors import LanpoolError


def load_or_create_client_key(path: Path) -> asyncssh.SSHKey:
    if path.exists():
        try:
            return asyncssh.read_private_key(str(path))
        except (OSError, asyncssh.KeyImportError) as exc:
            raise LanpoolError(f"cannot read the controller key {path}: {exc}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    key = asyncssh.generate_private_key("ssh-ed25519", comment="lanpool-controller")
    key.write_private_key(str(path))
    os.chmod(path, 0o600)
    key.write_public_key(str(path) + ".pub")
    return key
