"""Reading `.lanpool/workflows.yaml` (or `.dstack/workflows.yaml`) with line numbers for errors."""

import difflib
from pathlib import Path, PurePosixPath

import yaml

from app.workflows.model import Project, Workflow, WorkflowError

PROJECT_DIRS = (".lanpool", ".dstack")  # .lanpool wins; .dstack is the 2022 dstack layout
WORKFLOW_KEYS = ("name", "commands", "env", "environment", "artifacts", "working_dir", "help")


class _Map(dict):
    """A YAML mapping that remembers where it and each of its keys were written."""

    line: int = 0
    key_lines: dict

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class _LineLoader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        mapping = _Map(super().construct_mapping(node, deep=deep))
        mapping.line = node.start_mark.line + 1
        mapping.key_lines = {k.value: k.start_mark.line + 1 for k, _ in node.value if hasattr(k, "value")}
        return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _LineLoader.construct_mapping)


def find_project(start: Path) -> Path | None:
    """The nearest directory, from `start` up, that holds workflow files."""
    start = start.resolve()
    for d in (start, *start.parents):
        if any((d / p / "workflows.yaml").is_file() for p in PROJECT_DIRS):
            return d
    return None


def load_workflows(root: Path) -> Project:
    for sub in PROJECT_DIRS:
        path = root / sub / "workflows.yaml"
        if path.is_file():
            break
    else:
        raise WorkflowError(f"no .lanpool/workflows.yaml (or .dstack/workflows.yaml) in {root}: create one, see README 'Workflows'")
    data = _read_yaml(path)
    if data is None:
        data = _Map()
        data.line, data.key_lines = 1, {}
    if not isinstance(data, dict) or not isinstance(data.get("workflows"), list):
        raise WorkflowError("expected a top-level 'workflows:' list", path, getattr(data, "line", 1))
    workflows: dict[str, Workflow] = {}
    for item in data["workflows"]:
        wf = _parse_workflow(item, path, data.line_of("workflows"))
        if wf.name in workflows:
            raise WorkflowError(f"duplicate workflow name {wf.name!r} (first at line {workflows[wf.name].line})", path, wf.line)
        workflows[wf.name] = wf
    return Project(root=root, workflows_file=path, workflows=workflows)


def _read_yaml(path: Path):
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkflowError(f"cannot read the file: {exc}", path) from None
    try:
        return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise WorkflowError(f"malformed YAML: {problem}", path, mark.line + 1 if mark else None) from None


def _parse_workflow(item, path: Path, parent_line: int) -> Workflow:
    if not isinstance(item, dict):
        raise WorkflowError("each entry of 'workflows' must be a mapping with a 'name'", path, parent_line)
    line = item.line
    for key in item:
        if key not in WORKFLOW_KEYS:
            close = difflib.get_close_matches(str(key), WORKFLOW_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(WORKFLOW_KEYS)}"
            raise WorkflowError(f"unknown key {key!r}{hint}", path, item.line_of(key))
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise WorkflowError("a workflow needs a 'name' (a string)", path, line)
    commands = item.get("commands")
    if not isinstance(commands, list) or not commands or not all(isinstance(c, (str, int, float)) for c in commands):
        raise WorkflowError(f"workflow {name!r} needs 'commands': a list of shell lines", path, item.line_of("commands"))
    env = _parse_env(item, name, path)
    artifacts = item.get("artifacts", [])
    if not isinstance(artifacts, list) or not all(isinstance(a, str) for a in artifacts):
        raise WorkflowError(f"workflow {name!r}: 'artifacts' must be a list of paths", path, item.line_of("artifacts"))
    for a in artifacts:
        p = PurePosixPath(a)
        if p.is_absolute() or ".." in p.parts or not a.strip():
            raise WorkflowError(
                f"workflow {name!r}: artifact path {a!r} must stay inside the workspace (relative, no '..')",
                path, item.line_of("artifacts"))
    working_dir = item.get("working_dir", "") or ""
    if not isinstance(working_dir, str) or PurePosixPath(working_dir).is_absolute() or ".." in PurePosixPath(working_dir).parts:
        raise WorkflowError(f"workflow {name!r}: 'working_dir' must be a relative path in the workspace", path, item.line_of("working_dir"))
    # YAML reads a bare `- true` as a bool; str() would make it the command "True".
    commands = [str(c).lower() if isinstance(c, bool) else str(c) for c in commands]
    return Workflow(name=name, commands=commands, env=env, artifacts=list(artifacts),
                    working_dir=working_dir, file=path, line=line)


def _parse_env(item: dict, name: str, path: Path) -> dict[str, str]:
    if "environment" in item and "env" in item:
        raise WorkflowError(f"workflow {name!r} has both 'env' and 'environment': keep one", path, item.line_of("env"))
    key = "environment" if "environment" in item else "env"
    raw = item.get(key, {}) or {}
    # dstack accepted both a mapping and a list of KEY=VALUE strings.
    if isinstance(raw, list):
        pairs = {}
        for entry in raw:
            if not isinstance(entry, str) or "=" not in entry:
                raise WorkflowError(f"workflow {name!r}: '{key}' entries must be KEY=VALUE", path, item.line_of(key))
            k, _, v = entry.partition("=")
            pairs[k] = v
        raw = pairs
    if not isinstance(raw, dict):
        raise WorkflowError(f"workflow {name!r}: '{key}' must be a mapping of names to values", path, item.line_of(key))
    env = {}
    for k, v in raw.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise WorkflowError(f"workflow {name!r}: {k!r} is not a valid environment variable name", path, item.line_of(key))
        if isinstance(v, (dict, list)):
            raise WorkflowError(f"workflow {name!r}: env {k!r} must be a string or number", path, item.line_of(key))
        env[k] = "" if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
    return env
