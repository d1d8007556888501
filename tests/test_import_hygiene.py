"""Imports point one way (DESIGN.md): protocol <- agent, protocol <- app; training stands alone."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = {"app", "agent", "protocol", "training"}

# package -> the packages of ours it may import
ALLOWED = {
    "protocol": {"protocol"},
    "agent": {"agent", "protocol"},
    "app": {"app", "protocol"},
    "training": {"training"},
}
# The one sanctioned exception: the CLI entry that starts the runner daemon.
EXCEPTIONS = {("app/cli/main.py", "agent")}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & OURS


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_point_one_way(package):
    bad = []
    for path in sorted((REPO / package).rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        for imported in _imports(path) - ALLOWED[package]:
            if (rel, imported) not in EXCEPTIONS:
                bad.append(f"{rel} imports {imported}")
    assert not bad, bad


def test_headless_path_does_not_load_textual_or_torch():
    code = (
        "import sys, app.cli.headless, app.controller, app.runner_client, agent.server; "
        "heavy = sorted(m for m in ('textual', 'torch', 'lightning', 'docker', 'zeroconf') if m in sys.modules); "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
