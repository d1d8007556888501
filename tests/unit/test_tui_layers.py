"""The TUI is a front end: it reaches the store, planning and runners only through
the controller. Read from the source, so that it holds for code paths
no other test drives."""

import ast

from tests.harness import REPO

FRONT_END = sorted((REPO / "app" / "tui").rglob("*.py"))  # live.py (its background feeds) among them
# The controller's insides: a front end asks the Controller (and its pool, runs) instead.
FORBIDDEN_MODULES = (
    "lanpool.app.store",
    "lanpool.app.runs.planning",
    "lanpool.app.runners.adverts",
    "lanpool.app.cli",
    "lanpool.app.jobs.remote",
    "lanpool.app.runners.client",
)


def imported_modules(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def store_uses(tree: ast.AST) -> list[int]:
    """Lines that read a `.store` attribute (ctl.store, self.ctl.store, pool.store...)."""
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "store"]


def test_front_end_files_are_found():
    assert len(FRONT_END) > 5 and all(p.is_file() for p in FRONT_END)


def test_the_tui_never_imports_the_controllers_insides():
    found = {
        str(path.relative_to(REPO)): sorted(
            m for m in imported_modules(ast.parse(path.read_text())) if m.startswith(FORBIDDEN_MODULES)
        )
        for path in FRONT_END
    }
    assert {path: mods for path, mods in found.items() if mods} == {}


def test_the_tui_never_touches_the_store():
    found = {str(path.relative_to(REPO)): store_uses(ast.parse(path.read_text())) for path in FRONT_END}
    assert {path: lines for path, lines in found.items() if lines} == {}


def test_the_checks_can_fail():
    """What the checks above would report for a front end that reached past the controller."""
    bad = ast.parse(
        "from lanpool.app.store import Store\nimport lanpool.app.runs.planning\nrows = self.ctl.store.runners()\n"
    )
    assert imported_modules(bad) >= {"lanpool.app.store", "lanpool.app.runs.planning"}
    assert store_uses(bad) == [3]
