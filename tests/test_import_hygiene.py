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


# Front ends (and the TUI's background feeds) use the Controller; nothing it is made of uses it back.
FRONT_ENDS = ("app/cli/", "app/tui/", "app/tui/live.py")


def test_the_controller_is_imported_only_by_front_ends():
    bad = []
    for path in sorted((REPO / "app").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(FRONT_ENDS) or rel == "app/controller.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):  # function-level imports too
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(
                n == "lanpool.app.controller" or n.startswith(("lanpool.app.cli", "lanpool.app.tui")) for n in names
            ):
                bad.append(f"{rel} imports {names}")
    assert not bad, bad


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at module level or inside functions ("from app import store" counts as app.store)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


# The Controller (and the services it owns: ctl.runs, ctl.pool) is the front ends' one door:
# they never reach the store or planning past it, and the TUI shares app/views/formatting.py, not the CLI's code.
FORBIDDEN = {
    "app/cli/": ("lanpool.app.store", "lanpool.app.runs.planning"),
    "app/tui/": ("lanpool.app.store", "lanpool.app.runs.planning", "lanpool.app.cli"),
}


def test_front_ends_go_through_the_controller():
    bad = []
    for folder, forbidden in FORBIDDEN.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for name in _imported_modules(path):
                if any(name == f or name.startswith(f + ".") for f in forbidden):
                    bad.append(f"{rel} imports {name}")
    assert not bad, bad


def test_only_app_tui_imports_textual():
    bad = [
        path.relative_to(REPO).as_posix()
        for package in ALLOWED
        for path in sorted((REPO / package).rglob("*.py"))
        if "textual" in _third_party(path) and not path.relative_to(REPO).as_posix().startswith("app/tui/")
    ]
    assert not bad, bad


def _third_party(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0].split("_")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0].split("_")[0])
    return found


@pytest.mark.parametrize(
    ("modules", "heavy"),
    [
        # Short CLI calls: no UI, no ML, no Docker SDK, and zeroconf only once a command browses.
        (
            "app.cli.headless, app.controller, app.runners.client",
            ("textual", "torch", "lightning", "docker", "zeroconf"),
        ),
        # The TUI's core (read models, background feeds) is plain controller code: textual stays in app/tui/.
        ("app.views.overview, app.tui.live", ("textual", "torch", "lightning", "docker")),
        # The agent announces itself (zeroconf) but loads the Docker SDK only when an engine may exist.
        ("lanpool.agent.daemon", ("textual", "torch", "lightning")),
    ],
)
def test_short_paths_do_not_load_heavy_packages(modules, heavy):
    code = f"import sys, {modules}; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
