"""Start-up stays cheap: what each headless verb imports, and no child process at import.

Most of a short `app headless` command's time is Python importing modules, so each
verb has a budget: the heavy packages it may load (names, not times: times vary
with the machine's load, a module set does not). A verb that starts importing
a new package, or many more of lanpool's modules, fails here, and so does an
import that starts a child process (ctypes.util.find_library runs ldconfig and
gcc: app/startup/library_lookup.py answers asyncssh's and ifaddr's lookups without).
The in-process part (unit); the rest: tests/integration/test_import_budget.py."""

import subprocess
import sys
from pathlib import Path

import pytest


def test_the_lookup_finds_a_library_where_the_loader_would(tmp_path, monkeypatch):
    """liboqs installed outside the loader cache (LD_LIBRARY_PATH) is still found; absent names are None."""
    from lanpool.app.startup.library_lookup import find_library

    if not sys.platform.startswith("linux"):
        pytest.skip("Linux lookup")

    def fail(name: str) -> str | None:
        raise AssertionError(f"fell back for {name}")

    libc = find_library("c", fail)
    assert libc and libc.startswith("libc.so")
    assert find_library("lanpool-no-such-lib", fail) is None
    real = Path(
        subprocess.run(["sh", "-c", "ldconfig -p | grep -m1 'libz.so.1 '"], capture_output=True, text=True)
        .stdout.split("=>")[-1]
        .strip()
        or "/nonexistent"
    )
    if not real.exists():
        pytest.skip("no libz to stand in for liboqs")
    (tmp_path / "liboqs.so.9").write_bytes(real.read_bytes())
    (tmp_path / "liboqs.so.1").write_bytes(b"not a library")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    assert find_library("oqs", fail) == str(tmp_path / "liboqs.so.9")


def test_the_parser_s_copy_of_the_prune_default_agrees():
    from lanpool.app.cli import parser
    from lanpool.app.controller import DEFAULT_PRUNE_AGE

    assert parser.DEFAULT_PRUNE_AGE == DEFAULT_PRUNE_AGE
    args = parser.parse_args(["prune"])
    assert args.older_than == parser.age_seconds(DEFAULT_PRUNE_AGE)
