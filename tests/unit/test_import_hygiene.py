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
The in-process part (unit); the rest: tests/integration/test_import_hygiene.py."""

import ast
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


PACKAGES = ("protocol", "agent", "app", "training")


BARE = set(PACKAGES)  # the folders' own names: never an import name of ours


# package -> the packages of ours it may import
ALLOWED = {
    "protocol": {"protocol"},
    "agent": {"agent", "protocol"},
    "app": {"app", "protocol"},
    "training": {"training"},
}


# The one sanctioned exception: the CLI entry that starts the runner daemon.
EXCEPTIONS = {("lanpool.app.cli.main", "agent")}


# Inside app/ and agent/, top to bottom: a module may import its own sub-package (or top-level
# module) and anything in a lower layer, never a sibling of its layer or anything above it.
LAYERS = {
    "app": [
        ("cli", "tui", "api"),  # the front ends (api: lanpool.run and friends, docs/api.md)
        ("controller",),  # their one door
        ("runs", "shell", "views"),  # a run from plan to result; into running jobs; what front ends show
        ("jobs",),  # one job (a gang of 1..N nodes) on its runners
        ("transfer",),  # code up by content, artifacts back
        ("runners",),  # trust, sessions, the direct connection, placement by free resources
        ("store", "workflows", "startup"),  # the SQLite file; workflow files; start-up time
        ("keys", "secret_store", "notify"),  # notify: a job's end on the desktop or a user's command
        ("home",),
        ("errors",),
    ],
    "agent": [
        ("cli",),
        ("daemon", "retention"),  # the agent's life; `app agent gc`
        ("ssh",),  # who may connect and what a connection may open
        ("shell", "gang"),  # into running jobs; detached gangs
        ("jobs",),  # submit to end: manager, queue, journal, supervision
        ("executors",),  # process, docker, slurm behind one interface
        ("python",),  # interpreters and each process job's environment
        ("workspace", "host"),  # a job's files; this machine's GPUs and resources
        ("direct", "home", "errors"),
    ],
}


# Deliberate imports against the layers: (importer, imported) -> why.
LAYER_EXCEPTIONS = {
    ("lanpool.app.cli.main", "lanpool.app.tui"): "`app` with no verb opens the TUI (imported only then)",
    ("lanpool.agent.jobs.manager", "lanpool.agent.gang.line"): "the queue puts gang members in the gangs' order",
    ("lanpool.agent.jobs.manager", "lanpool.agent.gang.token"): "a member's token is kept in its job's dir",
    ("lanpool.agent.python.job_envs", "lanpool.agent.executors.base"): "it reports in the process executor's terms",
    (
        "lanpool.agent.python.job_envs",
        "lanpool.agent.executors.sandbox",
    ): "a requirements build runs in the job's sandbox",
}


@dataclass
class Module:
    name: str  # lanpool.app.runs.loop
    path: Path
    imports: list[tuple[str, int, str]] = field(default_factory=list)  # (module, line, "top" | "lazy" | "types")
    private: list[tuple[str, int]] = field(default_factory=list)  # ("module._name", line)
    bare: list[tuple[str, int]] = field(default_factory=list)  # imports of app/agent/protocol/training
    relative: list[int] = field(default_factory=list)


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["lanpool", *parts])


def read(path: Path, name: str, source: str | None = None) -> Module:
    """The imports of one file, resolved to module names (a name imported from a package
    counts as that module when it is one: `from lanpool.app import store`)."""
    tree = ast.parse(source if source is not None else path.read_text(), str(path))
    mod = Module(name, path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def walk(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for stmt in child.body:
                    walk_one(stmt, "types")
                for stmt in child.orelse:
                    walk_one(stmt, kind)
                continue
            walk_one(child, kind)

    def walk_one(node: ast.AST, kind: str) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                record(alias.name, node.lineno, kind)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                mod.relative.append(node.lineno)
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                record(f"{target}.{alias.name}", node.lineno, kind, from_module=target)
                if alias.name.startswith("_") and not alias.name.startswith("__") and target.startswith("lanpool"):
                    mod.private.append((f"{target}.{alias.name}", node.lineno))
        inner = "lazy" if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and kind == "top" else kind
        walk(node, inner)

    def record(target: str, line: int, kind: str, from_module: str | None = None) -> None:
        top = (from_module or target).split(".")[0]
        if top in BARE:
            mod.bare.append((from_module or target, line))
        elif top == "lanpool":
            mod.imports.append((target, line, kind))

    walk(tree, "top")
    return mod


def resolve(target: str, known: set[str]) -> str | None:
    """The longest known module that `target` (a module, or a name in one) names."""
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def our_modules() -> dict[str, Module]:
    return {
        module_name(path): read(path, module_name(path))
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
    }


def edges(modules: dict[str, Module]) -> list[tuple[str, str, int, str]]:
    known = set(modules) | {"lanpool"}
    out = []
    for mod in modules.values():
        for target, line, kind in mod.imports:
            found = resolve(target, known)
            if found and found != mod.name:
                out.append((mod.name, found, line, kind))
    return out


def unit(module: str) -> tuple[str, str] | None:
    """(package, the sub-package or top-level module it lies in) for a module of app or agent."""
    parts = module.split(".")
    if len(parts) < 3 or parts[1] not in LAYERS:
        return None
    return parts[1], parts[2]


def layer_violations(modules: dict[str, Module]) -> list[str]:
    rank = {(pkg, name): i for pkg, layers in LAYERS.items() for i, layer in enumerate(layers) for name in layer}
    bad = []
    for src, dst, line, kind in edges(modules):
        a, b = unit(src), unit(dst)
        if kind == "types" or a is None or b is None or a[0] != b[0] or a == b:
            continue
        if (src, dst) in LAYER_EXCEPTIONS or any(dst.startswith(d + ".") for s, d in LAYER_EXCEPTIONS if s == src):
            continue
        if a not in rank or b not in rank:
            bad.append(f"{src} or {dst} is in no layer: add its sub-package to LAYERS (and docs/layout.md)")
        elif rank[b] <= rank[a]:
            bad.append(f"{src}:{line} imports {dst} ({b[1]} is not below {a[1]})")
    return bad


def cycles(modules: dict[str, Module]) -> list[list[str]]:
    """Strongly connected sets of modules (Tarjan), each a cycle of imports."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for src, dst, _line, _kind in edges(modules):
        if dst in graph:
            graph[src].add(dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


MODULES = our_modules()


def test_every_import_of_ours_names_lanpool():
    """A bare `app`/`training` import would load the repository's folder under a second name
    (twice the module objects), and fail where only the wheel is installed."""
    bad = []
    for folder in (*PACKAGES, "tests", "scripts"):
        for path in sorted((REPO / folder).rglob("*.py")):
            mod = read(path, module_name(path))
            rel = path.relative_to(REPO).as_posix()
            bad += [f"{rel}:{line} imports {name}" for name, line in mod.bare]
            if folder != "training":  # relative imports are the recipes' alone (see the module docstring)
                bad += [f"{rel}:{line} imports relatively" for line in mod.relative]
    assert not bad, bad


def code_in_strings(path: Path) -> list[tuple[int, str]]:
    """Bare imports in the code a file holds as text (a `python -c` script, a probe): each string
    that parses as Python, an f-string's fields read as names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "_" for v in node.values)
        else:
            continue
        if "import" not in text:
            continue
        try:
            inner = read(path, "lanpool.scratch", textwrap.dedent(text))
        except (SyntaxError, ValueError):
            continue  # prose
        found += [(node.lineno, name) for name, _line in inner.bare]
    return found


# Files whose text holds bare imports on purpose: a project's own `app`, a checker's bad example.
BARE_ON_PURPOSE = {"tests/system/test_wheel.py", "tests/unit/test_import_hygiene.py"}


def test_code_run_from_strings_names_lanpool_too():
    bad = [
        f"{path.relative_to(REPO).as_posix()}:{line} runs `import {name}`"
        for folder in (*PACKAGES, "tests", "scripts")
        for path in sorted((REPO / folder).rglob("*.py"))
        if path.relative_to(REPO).as_posix() not in BARE_ON_PURPOSE
        for line, name in code_in_strings(path)
    ]
    assert not bad, bad


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_import_only_what_they_may(package):
    bad = [
        f"{src}:{line} imports {dst}"
        for src, dst, line, _kind in edges(MODULES)
        if src.split(".")[1] == package
        and dst != "lanpool"
        and dst.split(".")[1] not in ALLOWED[package]
        and (src, dst.split(".")[1]) not in EXCEPTIONS
    ]
    assert not bad, bad


def test_sub_packages_import_down_their_layers():
    assert layer_violations(MODULES) == []


def test_every_sub_package_has_a_layer():
    units = {unit(m) for m in MODULES} - {None}
    placed = {(pkg, name) for pkg, layers in LAYERS.items() for layer in layers for name in layer}
    assert units - placed == set()
    assert placed - units == set()  # a layer naming what no longer exists is stale


def test_no_import_cycles():
    assert cycles(MODULES) == []


def test_no_private_names_across_modules():
    assert [
        f"{m.path.relative_to(REPO)}:{line} imports {name}" for m in MODULES.values() for name, line in m.private
    ] == []


def test_the_contracts_can_fail(tmp_path):
    """Each check above, shown a module that breaks it."""
    fake = {
        "lanpool.app.runners.pool": read(
            tmp_path / "pool.py",
            "lanpool.app.runners.pool",
            "from lanpool.app.runs import loop\nfrom lanpool.app.store import _rows\nimport app.home\n",
        ),
        "lanpool.app.runs.loop": read(
            tmp_path / "loop.py",
            "lanpool.app.runs.loop",
            "def f():\n    from lanpool.app.runners.pool import Pool\n",
        ),
        "lanpool.app.views.overview": read(
            tmp_path / "overview.py",
            "lanpool.app.views.overview",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from lanpool.app.runs.loop import RunLoop\n",
        ),
        "lanpool.app.store": read(tmp_path / "store.py", "lanpool.app.store", ""),
    }
    assert layer_violations(fake) == [
        "lanpool.app.runners.pool:1 imports lanpool.app.runs.loop (runs is not below runners)"
    ]
    assert cycles(fake) == [["lanpool.app.runners.pool", "lanpool.app.runs.loop"]]  # a function-level import counts
    assert fake["lanpool.app.runners.pool"].private == [("lanpool.app.store._rows", 2)]
    assert fake["lanpool.app.runners.pool"].bare == [("app.home", 3)]
    assert [k for _s, _d, _l, k in edges(fake) if _s == "lanpool.app.views.overview"] == ["types"]
    script = tmp_path / "probe.py"
    script.write_text('CODE = "import json, app.shell.sshd as sd"\nPROSE = "agent and app import protocol"\n')
    assert code_in_strings(script) == [(1, "app.shell.sshd")]


# Front ends (and the TUI's background feeds) use the Controller; nothing it is made of uses it back.
FRONT_ENDS = ("lanpool.app.cli", "lanpool.app.tui", "lanpool.app.api")


def test_the_controller_is_imported_only_by_front_ends():
    bad = [
        f"{src}:{line} imports {dst}"
        for src, dst, line, _kind in edges(MODULES)
        if (dst == "lanpool.app.controller" or dst.startswith(FRONT_ENDS))
        and not src.startswith(FRONT_ENDS)
        and src != "lanpool.app.controller"
    ]
    assert not bad, bad


# The Controller (and the services it owns: ctl.runs, ctl.pool) is the front ends' one door:
# they never reach the store or planning past it, and the TUI shares app/views/formatting.py, not the CLI's code.
FORBIDDEN = {
    "lanpool.app.cli": ("lanpool.app.store", "lanpool.app.runs.planning"),
    "lanpool.app.tui": ("lanpool.app.store", "lanpool.app.runs.planning", "lanpool.app.cli"),
    "lanpool.app.api": ("lanpool.app.store", "lanpool.app.runs.planning", "lanpool.app.cli", "lanpool.app.tui"),
}


def test_front_ends_go_through_the_controller():
    bad = [
        f"{src}:{line} imports {dst}"
        for src, dst, line, _kind in edges(MODULES)
        for front, forbidden in FORBIDDEN.items()
        if src.startswith(front) and any(dst == f or dst.startswith(f + ".") for f in forbidden)
    ]
    assert not bad, bad


def test_only_app_tui_imports_textual():
    bad = [
        path.relative_to(REPO).as_posix()
        for package in PACKAGES
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
