"""Reading `.lanpool/` (or `.dstack/`) workflow and variable files, and the checks that span workflows."""

import re
from pathlib import Path

from lanpool.app.workflows.dialects import log_notes
from lanpool.app.workflows.entry import MAX_NODES, close_matches, parse_workflow
from lanpool.app.workflows.line_map import LineMap
from lanpool.app.workflows.model import Project, Scalar, Workflow, WorkflowError
from lanpool.app.workflows.substitute import variable_names_used
from lanpool.app.workflows.yaml_lines import read_yaml

__all__ = ["MAX_NODES", "find_project", "load_workflows"]  # MAX_NODES: the CLI's --nodes check reads it here

PROJECT_DIRS = (".lanpool", ".dstack")  # .lanpool wins; .dstack is the 2022 dstack layout
BUILTINS = ("run_name", "job_id", "variables_as_args")
# dstack's variable names: `batch-size`, `test.batch_size`. Each is also an environment
# variable (BATCH_SIZE), so a name starts with a letter or _ and ends with neither - nor `.`.
VARIABLE_NAME = re.compile(r"[A-Za-z_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")


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
            f"no .lanpool/workflows.yaml (or .dstack/workflows.yaml) in {root}: create one, see docs/workflows.md"
        )
    data = read_yaml(path)
    if data is None:
        data = LineMap()
        data.key_lines = {}
    if not isinstance(data, LineMap) or not isinstance(data.get("workflows"), list):
        raise WorkflowError("expected a top-level 'workflows:' list", path, getattr(data, "line", 1))
    workflows: dict[str, Workflow] = {}
    notes: list[str] = []
    for item in data["workflows"]:
        wf = parse_workflow(item, path, data.line_of("workflows"), notes)
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
        notes=notes,
    )
    _check_dependencies(project)
    _check_variables_defined(project)
    log_notes(notes)
    return project


def _load_variables(path: Path, workflows: dict[str, Workflow]) -> dict[str, dict[str, Scalar]]:
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, LineMap) or set(data) - {"variables"}:
        raise WorkflowError("expected a top-level 'variables:' mapping", path, getattr(data, "line", 1))
    sections = data.get("variables") or LineMap()
    if not isinstance(sections, LineMap):
        raise WorkflowError(
            "'variables' must map 'global' and workflow names to variables", path, data.line_of("variables")
        )
    out: dict[str, dict[str, Scalar]] = {}
    for section, values in sections.items():
        line = sections.line_of(section)
        if section != "global" and section not in workflows:
            close = close_matches(str(section), [*workflows, "global"], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise WorkflowError(f"variables for unknown workflow {section!r}{hint}", path, line)
        if not isinstance(values, LineMap):
            raise WorkflowError(f"variables of {section!r} must be a mapping of names to values", path, line)
        for name, value in values.items():
            if not isinstance(name, str) or not VARIABLE_NAME.fullmatch(name):
                raise WorkflowError(
                    f"{name!r} is not a valid variable name (letters, digits, _, - and ., starting with a letter)",
                    path,
                    values.line_of(name),
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
            if not dep.workflow and dep.tag:
                continue  # `- tag: NAME`: a run, whatever its workflows
            if dep.workflow not in project.workflows:
                close = close_matches(dep.workflow, list(project.workflows), n=1)
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
                used = variable_names_used(text)
                secrets = sorted(n for n in used if n.startswith("secrets."))
                if secrets and key != "env":
                    raise WorkflowError(
                        f"workflow {wf.name!r}: ${{{{ {secrets[0]} }}}} in {key!r}: secrets are read only in 'env' "
                        f"(set e.g. TOKEN: ${{{{ {secrets[0]} }}}} there and use $TOKEN in the commands)",
                        wf.file,
                        wf.line_of(key),
                    )
                bad = [n for n in secrets if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n[len("secrets.") :])]
                if bad:
                    raise WorkflowError(
                        f"workflow {wf.name!r}: ${{{{ {bad[0]} }}}} is not a secret's name: "
                        "use letters, digits and '_' (e.g. ${{ secrets.HF_TOKEN }})",
                        wf.file,
                        wf.line_of(key),
                    )
                missing = sorted(used - defined - set(secrets))
                if missing:
                    raise WorkflowError(
                        f"workflow {wf.name!r} uses variable {missing[0]!r}, which is never defined: "
                        f"add it to {project.variables_path} under 'global' or {wf.name!r}",
                        wf.file,
                        wf.line_of(key),
                    )
