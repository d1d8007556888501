"""Optional parts of dependencies that lanpool never uses, left out of every `app` start.

asyncssh's X.509 certificate support imports cryptography.x509: ~25 ms of each SSH
start on a 2-core machine (scripts/bench), paid by `run`, `runners` with a live runner,
the TUI's first connection and the agent. lanpool pins plain keys and never uses X.509
in SSH (the direct connections' TLS certificate is built with cryptography.x509 itself,
agent/direct.py, which still imports as usual), and asyncssh takes a failed
import of its x509 module as "not available" (asyncssh/crypto/__init__.py). A finder
answers that import with ModuleNotFoundError, so nothing is put in sys.modules.
"""

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import FrameType, ModuleType

_LEFT_OUT = frozenset({"asyncssh.crypto.x509"})
# Left out only where the importer is the one named: ifaddr (~5 ms with the `platform` module it
# loads) serves asyncssh's config files alone ("Match localnetwork"), and lanpool passes asyncssh
# no config file (config=[]); zeroconf's discovery and the agent's adverts import it as usual.
_LEFT_OUT_FOR = {"ifaddr": "asyncssh.config"}
_IMPORT_MACHINERY = ("importlib", "_frozen_importlib")


class _Finder:
    """A meta path finder that refuses the modules in _LEFT_OUT and passes on the rest."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name in _LEFT_OUT or (name in _LEFT_OUT_FOR and _importer() == _LEFT_OUT_FOR[name]):
            raise ModuleNotFoundError(f"{name} is left out by lanpool (app/startup/left_out.py)", name=name)
        return None


def _importer() -> str:
    """The module whose code runs the import statement: the first frame out of the import machinery."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if not name.startswith(_IMPORT_MACHINERY):
            return name
        frame = frame.f_back
    return ""


def install() -> None:
    """Idempotent. A module already imported stays."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
