"""Reading `.lanpool/` (or `.dstack/`) workflow and variable files, with line numbers for errors."""

import difflib
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from app.workflows.model import ArtifactSpec, Dependency, Project, Workflow, WorkflowError
from app.workflows.substitute import variable_names_used

PROJECT_DIRS = (".lanpool", ".dstack")  # .lanpool wins; .dstack is the 2022 dstack layout
WORKFLOW_KEYS = (
    "name",
    "help",
    "image",
    "commands",
    "provider",
    "version",
    "requirements",
    "script",
    "args",
    "env",
    "environment",
    "artifacts",
    "working_dir",
    "resources",
    "nodes",
    "executor",
    "pull",
    "depends-on",
    "resume-from",
)
RESOURCE_KEYS = ("gpu", "cpu", "memory", "shm_size", "interruptible")
GPU_KEYS = ("count", "name", "memory")
BUILTINS = ("run_name", "job_id", "variables_as_args")
MAX_NODES = 1024  # a gang larger than any LAN: a typo, not a plan


class _Map(dict[Any, Any]):
    """A YAML mapping that remembers where it and each of its keys were written."""

    line: int = 1
    key_lines: dict[Any, int]
    scalar_text: dict[Any, Any]  # each scalar value as written: `3.10` would otherwise read as the float 3.1

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class _LineLoader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        mapping = _Map(super().construct_mapping(node, deep=deep))
        mapping.line = node.start_mark.line + 1
        mapping.key_lines = {k.value: k.start_mark.line + 1 for k, _ in node.value if hasattr(k, "value")}
        mapping.scalar_text = {
            k.value: v.value for k, v in node.value if hasattr(k, "value") and isinstance(v, yaml.ScalarNode)
        }
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
        raise WorkflowError(
            f"no .lanpool/workflows.yaml (or .dstack/workflows.yaml) in {root}: create one, see README 'Workflows'"
        )
    data = _read_yaml(path)
    if data is None:
        data = _Map()
        data.key_lines = {}
    if not isinstance(data, _Map) or not isinstance(data.get("workflows"), list):
        raise WorkflowError("expected a top-level 'workflows:' list", path, getattr(data, "line", 1))
    workflows: dict[str, Workflow] = {}
    for item in data["workflows"]:
        wf = _parse_workflow(item, path, data.line_of("workflows"))
        if wf.name in workflows:
            raise WorkflowError(
                f"duplicate workflow name {wf.name!r} (first at line {workflows[wf.name].line})", path, wf.line
            )
        workflows[wf.name] = wf
    variables_file = path.parent / "variables.yaml"
    variables = _load_variables(variables_file, workflows) if variables_file.is_file() else {}
    project = Project(
        root=root,
        workflows_file=path,
        workflows=workflows,
        variables=variables,
        variables_file=variables_file if variables_file.is_file() else None,
    )
    _check_dependencies(project)
    _check_variables_defined(project)
    return project


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


def _unknown_key(key, known: tuple[str, ...], what: str, path: Path, line: int) -> WorkflowError:
    close = difflib.get_close_matches(str(key), known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
    return WorkflowError(f"unknown key {key!r} in {what}{hint}", path, line)


def _scalar_text(value) -> str:
    # YAML reads `true` as a bool; a shell line or env value wants the text back.
    return str(value).lower() if isinstance(value, bool) else str(value)


def _parse_workflow(item, path: Path, parent_line: int) -> Workflow:
    if not isinstance(item, _Map):  # every YAML mapping loads as a _Map
        raise WorkflowError("each entry of 'workflows' must be a mapping with a 'name'", path, parent_line)
    for key in item:
        if key not in WORKFLOW_KEYS:
            raise _unknown_key(key, WORKFLOW_KEYS, "a workflow", path, item.line_of(key))
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise WorkflowError("a workflow needs a 'name' (a string)", path, item.line)

    def err(message: str, key: str) -> WorkflowError:
        return WorkflowError(f"workflow {name!r}: {message}", path, item.line_of(key))

    provider = item.get("provider", "")
    if provider not in ("", "python", "bash", "docker"):
        raise err(f"unknown provider {provider!r}: use 'python' (script), or 'image' + 'commands'", "provider")
    commands = item.get("commands")
    if provider == "python":
        if not isinstance(item.get("script"), str) or not item["script"].strip():
            raise err("'provider: python' needs a 'script' to run", "provider")
        if commands is not None:
            raise err("'provider: python' runs 'script'; drop 'commands' or the provider", "commands")
        commands = []
    else:
        if (
            not isinstance(commands, list)
            or not commands
            or not all(isinstance(c, (str, int, float)) for c in commands)
        ):
            raise err("needs 'commands' (a list of shell lines), or 'provider: python' with a 'script'", "commands")
    for key in ("image", "version", "requirements", "script", "working_dir", "executor", "help"):
        if key in item and not isinstance(item[key], (str, int, float)):
            raise err(f"'{key}' must be a string", key)
    args = item.get("args", [])
    if not isinstance(args, (list, str)) or (
        isinstance(args, list) and not all(isinstance(a, (str, int, float)) for a in args)
    ):
        raise err("'args' must be a string or a list of strings", "args")
    executor = str(item.get("executor", "") or "")
    if executor not in ("", "docker", "process"):
        raise err(f"'executor' must be 'docker' or 'process', not {executor!r}", "executor")
    pull = str(item.get("pull", "missing"))
    if pull not in ("never", "missing", "always"):
        raise err(f"'pull' must be never, missing or always, not {pull!r}", "pull")
    working_dir = str(item.get("working_dir", "") or "")
    if PurePosixPath(working_dir).is_absolute() or ".." in PurePosixPath(working_dir).parts:
        raise err("'working_dir' must be a relative path in the workspace", "working_dir")
    deps, include = _parse_depends_on(item, err)
    resume_from = _parse_resume_from(item, err)
    version = item.get("version", "")
    if isinstance(version, float):  # a Python version: `3.10` means 3.10, not 3.1
        version = item.scalar_text.get("version", version)
    return Workflow(
        name=name,
        commands=[_scalar_text(c) for c in commands],
        help=str(item.get("help", "") or ""),
        image=str(item.get("image", "") or ""),
        provider=provider,
        version=_scalar_text(version),
        requirements=str(item.get("requirements", "") or ""),
        script=str(item.get("script", "") or ""),
        args=[_scalar_text(a) for a in args] if isinstance(args, list) else args,
        env=_parse_env(item, err),
        artifacts=_parse_artifacts(item, err),
        working_dir=working_dir,
        resources=_parse_resources(item, err),
        nodes=_parse_nodes(item, err),
        executor=executor,
        pull=pull,
        depends_on=deps,
        repo_include=include,
        resume_from=resume_from,
        file=path,
        line=item.line,
        key_lines=dict(item.key_lines),
    )


def _parse_env(item: _Map, err) -> dict[str, str]:
    if "environment" in item and "env" in item:
        raise err("has both 'env' and 'environment': keep one", "env")
    key = "environment" if "environment" in item else "env"
    raw = item.get(key, {}) or {}
    # dstack accepted both a mapping and a list of KEY=VALUE strings.
    if isinstance(raw, list):
        pairs = {}
        for entry in raw:
            if not isinstance(entry, str) or "=" not in entry:
                raise err(f"'{key}' entries must be KEY=VALUE", key)
            k, _, v = entry.partition("=")
            pairs[k] = v
        raw = pairs
    if not isinstance(raw, dict):
        raise err(f"'{key}' must be a mapping of names to values", key)
    env = {}
    for k, v in raw.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise err(f"{k!r} is not a valid environment variable name", key)
        if isinstance(v, (dict, list)):
            raise err(f"env {k!r} must be a string or number", key)
        env[k] = "" if v is None else _scalar_text(v)
    return env


def _parse_artifacts(item: _Map, err) -> list[ArtifactSpec]:
    raw = item.get("artifacts", []) or []
    if not isinstance(raw, list):
        raise err("'artifacts' must be a list of paths", "artifacts")
    out = []
    for entry in raw:
        nodes = "0"
        if isinstance(entry, dict):
            unknown = set(entry) - {"path", "nodes"}
            if unknown:
                raise err(f"artifact entries take 'path' and 'nodes', not {sorted(unknown)}", "artifacts")
            nodes = _scalar_text(entry.get("nodes", "0"))
            if nodes not in ("0", "all"):
                raise err(f"artifact 'nodes' must be 0 or all, not {nodes!r}", "artifacts")
            entry = entry.get("path")
        if not isinstance(entry, str):
            raise err("'artifacts' must be a list of paths", "artifacts")
        check_artifact_path(entry, err)
        out.append(ArtifactSpec(entry, nodes))
    return out


def check_artifact_path(path: str, err) -> None:
    if not path.strip():
        raise err("artifact path '' is empty: name a file or dir in the workspace", "artifacts")
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts:
        raise err(f"artifact path {path!r} must stay inside the workspace (relative, no '..')", "artifacts")


def _parse_resources(item: _Map, err) -> dict:
    raw = item.get("resources") or _Map()
    if not isinstance(raw, _Map):
        raise err("'resources' must be a mapping (gpu, cpu, memory, shm_size)", "resources")
    for key in raw:
        if key not in RESOURCE_KEYS:
            close = difflib.get_close_matches(str(key), RESOURCE_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(RESOURCE_KEYS)}"
            raise WorkflowError(
                f"workflow {item['name']!r}: unknown resource {key!r}{hint}",
                err("", "resources").file,
                raw.line_of(key) if isinstance(raw, _Map) else None,
            )
    gpu = raw.get("gpu")
    if isinstance(gpu, dict):
        for key in gpu:
            if key not in GPU_KEYS:
                raise err(f"unknown key {key!r} in resources.gpu; known: {', '.join(GPU_KEYS)}", "resources")
    # Values are checked now when they hold no variable, else after substitution.
    from app.workflows.resources import check_resources

    for key, value in raw.items():
        if "$" not in str(value):  # point at the resource's own line, not at `resources:`

            def at_key(msg: str, key: Any = key) -> WorkflowError:
                return WorkflowError(f"workflow {item['name']!r}: {msg}", err("", "resources").file, raw.line_of(key))

            check_resources({key: value}, at_key)
    return dict(raw)


def _parse_nodes(item: _Map, err) -> int | str:
    nodes = item.get("nodes", 1)
    if isinstance(nodes, str) and "$" in nodes:
        return nodes
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        raise err(f"'nodes' must be a whole number from 1 to {MAX_NODES}, not {repr(nodes)[:40]}", "nodes")
    return nodes


def _parse_resume_from(item: _Map, err) -> str:
    """`resume-from: RUN|JOB|WORKFLOW:TAG` (variables allowed): what `run --resume` takes."""
    if "resume-from" not in item or item["resume-from"] is None:
        return ""
    raw = item["resume-from"]
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise err("'resume-from' must be a run name, a job id or WORKFLOW:TAG (a string)", "resume-from")
    # A job id of digits only reads as a number in YAML: keep it as written.
    text = str(item.scalar_text.get("resume-from", raw)).strip()
    if not text:
        raise err("'resume-from' is empty: name a run, a job id or WORKFLOW:TAG (or drop the key)", "resume-from")
    if "$" not in text and any(c.isspace() for c in text):
        raise err(f"'resume-from' must be one run name, job id or WORKFLOW:TAG, not {text!r}", "resume-from")
    return text


def _parse_depends_on(item: _Map, err) -> tuple[list[Dependency], list[str] | None]:
    raw = item.get("depends-on")
    if raw is None:
        return [], None
    include = None
    if isinstance(raw, dict):
        unknown = set(raw) - {"workflows", "repo"}
        if unknown:
            raise err(f"'depends-on' takes 'workflows' and 'repo', not {sorted(unknown)}", "depends-on")
        repo = raw.get("repo") or {}
        if repo:
            if not isinstance(repo, dict) or set(repo) - {"include"}:
                raise err("'depends-on.repo' takes 'include: [globs]'", "depends-on")
            include = repo.get("include") or []
            if not isinstance(include, list) or not all(isinstance(g, str) for g in include):
                raise err("'depends-on.repo.include' must be a list of globs", "depends-on")
        raw = raw.get("workflows") or []
    if not isinstance(raw, list) or not all(isinstance(d, str) and d.strip() for d in raw):
        raise err("'depends-on' must be a list of workflow names (or a mapping with 'workflows')", "depends-on")
    deps = []
    for entry in raw:
        name, _, tag = entry.partition(":")
        deps.append(Dependency(name.strip(), tag.strip() or None))
    return deps, include


def _load_variables(path: Path, workflows: dict[str, Workflow]) -> dict[str, dict]:
    data = _read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, _Map) or set(data) - {"variables"}:
        raise WorkflowError("expected a top-level 'variables:' mapping", path, getattr(data, "line", 1))
    sections = data.get("variables") or _Map()
    if not isinstance(sections, _Map):
        raise WorkflowError(
            "'variables' must map 'global' and workflow names to variables", path, data.line_of("variables")
        )
    out: dict[str, dict] = {}
    for section, values in sections.items():
        line = sections.line_of(section)
        if section != "global" and section not in workflows:
            close = difflib.get_close_matches(str(section), [*workflows, "global"], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise WorkflowError(f"variables for unknown workflow {section!r}{hint}", path, line)
        if not isinstance(values, _Map):
            raise WorkflowError(f"variables of {section!r} must be a mapping of names to values", path, line)
        for name, value in values.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise WorkflowError(
                    f"{name!r} is not a valid variable name (letters, digits, _)", path, values.line_of(name)
                )
            if name in BUILTINS:
                raise WorkflowError(f"{name!r} is built in; pick another variable name", path, values.line_of(name))
            if value is None or isinstance(value, (dict, list)):
                raise WorkflowError(
                    f"variable {name!r} must be a string, number or boolean", path, values.line_of(name)
                )
        out[section] = dict(values)
    return out


def _check_dependencies(project: Project) -> None:
    for wf in project.workflows.values():
        for dep in wf.depends_on:
            if dep.workflow not in project.workflows:
                close = difflib.get_close_matches(dep.workflow, list(project.workflows), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise WorkflowError(
                    f"workflow {wf.name!r} depends on unknown workflow {dep.workflow!r}{hint}",
                    wf.file,
                    wf.line_of("depends-on"),
                )
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in project.workflows[name].depends_on:
            if dep.tag:
                continue  # a tagged run is fixed: no edge in the plan
            if state.get(dep.workflow) == 1:
                cycle = path[path.index(dep.workflow) :] + [dep.workflow]
                wf = project.workflows[cycle[0]]
                raise WorkflowError(f"dependency cycle: {' -> '.join(cycle)}", wf.file, wf.line_of("depends-on"))
            if dep.workflow not in state:
                visit(dep.workflow, [*path, dep.workflow])
        state[name] = 2

    for name in project.workflows:
        if name not in state:
            visit(name, [name])


def _check_variables_defined(project: Project) -> None:
    for wf in project.workflows.values():
        defined = set(project.variables_of(wf.name)) | set(BUILTINS)
        fields = {
            "commands": wf.commands,
            "env": list(wf.env.values()),
            "artifacts": [a.path for a in wf.artifacts],
            "args": wf.args if isinstance(wf.args, list) else [wf.args],
            "resources": [str(wf.resources)],
            "image": [wf.image],
            "script": [wf.script],
            "nodes": [str(wf.nodes)],
            "resume-from": [wf.resume_from],
        }
        for key, texts in fields.items():
            for text in texts:
                missing = sorted(variable_names_used(text) - defined)
                if missing:
                    where = project.variables_file or (project.workflows_file.parent / "variables.yaml")
                    raise WorkflowError(
                        f"workflow {wf.name!r} uses variable {missing[0]!r}, which is never defined: "
                        f"add it to {where.name} under 'global' or {wf.name!r}",
                        wf.file,
                        wf.line_of(key),
                    )
