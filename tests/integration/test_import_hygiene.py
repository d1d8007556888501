"""Imports point one way (docs/layout.md): the contracts of lanpool's packages and
their sub-packages, read from the source (module level, inside functions, under TYPE_CHECKING).

- One import name: every import of ours is `lanpool.…`; the recipes in training/ import each
  other relatively, so that `python -m training.X` also runs in a job's workspace.
- Packages: protocol imports nothing of ours; agent and app import protocol; training stands alone.
- Layers inside app/ and agent/: a module imports its own sub-package and the layers below
  it. Imports under TYPE_CHECKING name types only and are exempt; the few deliberate
  exceptions are listed with why.
- No import cycle between modules, counting imports inside functions and for types.
- No private name (`_x`) imported from another module.
The part with real agents and the CLI (integration); the rest: tests/unit/test_import_hygiene.py."""

import json
import os
import subprocess
import sys

import pytest

from tests.unit.test_import_hygiene import BARE, MODULES, REPO


def test_every_module_imports_under_the_one_name(tmp_path):
    """What the source check cannot see (importlib's strings): importing every module of lanpool
    loads nothing under a folder's bare name."""
    names = sorted(m for m in MODULES if not m.startswith("lanpool.training"))  # the recipes: torch, below
    code = (
        "import importlib, json, sys\n"
        f"for name in {names!r}: importlib.import_module(name)\n"
        "import lanpool.training.chargpt, lanpool.training.autoencoder, lanpool.training.gpt2_finetune\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(BARE)!r})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=240,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []


@pytest.mark.parametrize(
    ("modules", "heavy"),
    [
        # Short CLI calls: no UI, no ML, no Docker SDK, and zeroconf only once a command browses.
        (
            "lanpool.app.cli.headless, lanpool.app.controller, lanpool.app.runners.client",
            ("textual", "torch", "lightning", "docker", "zeroconf"),
        ),
        # The TUI's core (read models, background feeds) is plain controller code: textual stays in its widgets.
        ("lanpool.app.views.overview, lanpool.app.tui.live", ("textual", "torch", "lightning", "docker")),
        # The agent announces itself (zeroconf) but loads the Docker SDK only when an engine may exist.
        ("lanpool.agent.daemon", ("textual", "torch", "lightning")),
    ],
)
def test_short_paths_do_not_load_heavy_packages(modules, heavy):
    code = f"import sys, {modules}; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
