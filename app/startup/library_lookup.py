"""Shared-library lookups at import without child processes (start-up time of every `app` command).

At import, asyncssh/crypto/pq.py asks `ctypes.util.find_library("oqs")` whether
liboqs (post-quantum key exchange: sntrup761) is installed, asyncssh/crypto/umac.py
asks for nettle (umac MACs) and ifaddr (zeroconf's) for libc. On Linux each call
runs `ldconfig -p`, then gcc and ld for a library that is absent: ~20-80 ms of
every controller start, spent in child processes. `install()` puts a hook on the
import system that, only while one of those modules is executed, answers from the
places the dynamic loader itself looks (its cache file, LD_LIBRARY_PATH and the
default directories), loading each candidate to be sure this process can use it.
Other platforms, or a Linux without /etc/ld.so.cache, get the standard lookup.
Where liboqs or nettle is installed it is found, and PQ kex and umac work as before.
"""

import os
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

_MODULES = frozenset({"asyncssh.crypto.pq", "asyncssh.crypto.umac", "ifaddr._posix"})
_LD_CACHE = "/etc/ld.so.cache"
# Where `cmake --install` puts liboqs by default (often without an ldconfig run), and the loader's defaults.
_DIRS = ("/usr/local/lib", "/usr/local/lib64", "/lib", "/usr/lib", "/lib64", "/usr/lib64")


def find_library(name: str, fallback: Callable[[str], str | None]) -> str | None:
    """A loadable library `name` (a soname the loader resolves, or a path), else None: what
    ctypes.util.find_library answers, less the libraries only gcc's own search path would find."""
    if not sys.platform.startswith("linux"):
        return fallback(name)
    import re

    try:
        with open(_LD_CACHE, "rb") as fh:
            cache = fh.read()
    except OSError:  # no loader cache (another libc): ask the standard way
        return fallback(name)
    pattern = re.compile(rb"lib" + re.escape(name.encode()) + rb"\.so[0-9.]*(?=\0)")
    # A versioned soname first, as `ldconfig -p` lists them (libnettle.so.8 before libnettle.so).
    found = dict.fromkeys(m.group().decode() for m in pattern.finditer(cache))
    for soname in sorted(found, key=lambda n: (n.endswith(".so"), n), reverse=False):
        if _loads(soname):
            return soname
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d] + list(_DIRS)
    file_pattern = re.compile(r"lib" + re.escape(name) + r"\.so[0-9.]*$")
    for directory in dirs:
        try:
            entries = sorted(os.listdir(directory))
        except OSError:
            continue
        for entry in entries:
            if file_pattern.match(entry) and _loads(path := os.path.join(directory, entry)):
                return path
    return None


def _loads(name: str) -> bool:
    """Whether this process can load the library (a 32-bit copy in the cache cannot)."""
    import ctypes

    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


class _Loader:
    """Runs the module's own loader with ctypes.util.find_library answered by find_library above."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def __getattr__(self, attr: str) -> Any:  # get_source and the rest, for tracebacks
        return getattr(self._loader, attr)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        import ctypes.util

        standard = ctypes.util.find_library
        ctypes.util.find_library = lambda name: find_library(name, standard)
        try:
            self._loader.exec_module(module)
        finally:
            ctypes.util.find_library = standard


class _Hook:
    """A meta path finder that steps in for the modules in _MODULES only."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in _MODULES:
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)  # type: ignore[assignment]
        return spec


def install() -> None:
    """Idempotent. A module already imported keeps what its lookup found."""
    if not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())
