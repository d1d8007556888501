"""Optional parts of dependencies that lanpool never uses, left out of every `app` start.

asyncssh's X.509 certificate support imports cryptography.x509: ~25 ms of each SSH
start on a 2-core machine (scripts/bench), paid by `run`, `runners` with a live runner,
the TUI's first connection and the agent. lanpool pins plain keys and never uses X.509
in SSH (the direct connections' TLS certificate is built with cryptography.x509 itself,
agent/direct_transfer.py, which still imports as usual), and asyncssh takes a failed
import of its x509 module as "not available" (asyncssh/crypto/__init__.py). A finder
answers that import with ModuleNotFoundError, so nothing is put in sys.modules.
"""

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

_LEFT_OUT = frozenset({"asyncssh.crypto.x509"})


class _Finder:
    """A meta path finder that refuses the modules in _LEFT_OUT and passes on the rest."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name in _LEFT_OUT:
            raise ModuleNotFoundError(f"{name} is left out by lanpool (app/left_out.py)", name=name)
        return None


def install() -> None:
    """Idempotent. A module already imported stays."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
