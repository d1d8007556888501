"""Reading `.lanpool/` (or `.dstack/`) workflow and variable files, and the checks that span workflows.

A project's workflows are `workflows.yaml` and every `workflows/*.yaml` (dstack's Dec 2022
layout: one file per group) of `.lanpool/`, else of `.dstack/`. A fault in one workflow (a
key lanpool refuses, a dependency on a workflow that is not there, a variable never defined)
refuses that workflow and those that depend on it, each with its one line (Project.refused):
the others list, plan and run as if it were not there. Only a file that cannot be read as a
list of workflows (its YAML, its top-level shape) takes its workflows with it, and only a
project with no readable file is an error as a whole.
"""

import re
from pathlib import Path

from lanpool.app.workflows.dialects import CROSS_REPO_FIX, log_notes
from lanpool.app.workflows.entry import MAX_NODES, close_matches, parse_workflow
from lanpool.app.workflows.line_map import LineMap
from lanpool.app.workflows.model import Project, Scalar, Workflow, WorkflowError
from lanpool.app.workflows.substitute import variable_names_used
from lanpool.app.workflows.yaml_lines import read_yaml

__all__ = ["MAX_NODES", "find_project", "load_workflows"]  # MAX_NODES: the CLI's --nodes check reads it here

PROJECT_DIRS = (".lanpool", ".dstack")  # .lanpool wins; .dstack is the 2022 dstack layout
BUILTINS = ("run_name", "job_id", "variables_as_args", "run.args")  # run.args: the words after the name (resolve.py)
# dstack's variable names: `batch-size`, `test.batch_size`. Each is also an environment
# variable (BATCH_SIZE), so a name starts with a letter or _ and ends with neither - nor `.`.
VARIABLE_NAME = re.compile(r"[A-Za-z_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")


def workflow_files(root: Path) -> list[Path]:
    """The project's workflow files: `.lanpool/`'s, else `.dstack/`'s (workflows.yaml, then
    workflows/*.yaml by name); none when `root` holds no project."""
    for sub in PROJECT_DIRS:
        folder = root / sub
        files = [folder / "workflows.yaml"] if (folder / "workflows.yaml").is_file() else []
        if (folder / "workflows").is_dir():
            files += sorted(
                p for p in (folder / "workflows").iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()
            )
        if files:
            return files
    return []


def find_project(start: Path) -> Path | None:
    """The nearest directory, from `start` up, that holds workflow files."""
    start = start.resolve()
    for d in (start, *start.parents):
        if workflow_files(d):
            return d
    return None


def load_workflows(root: Path) -> Project:
    files = workflow_files(root)
    if not files:
        raise WorkflowError(
            f"no .lanpool/workflows.yaml (or .lanpool/workflows/*.yaml, or .dstack/'s) in {root}: "
            "create one, see docs/workflows.md"
        )
    found = _Found()
    file_errors: list[WorkflowError] = []
    for path in files:
        try:
            entries, line = _entries(path)
        except WorkflowError as exc:  # this file's workflows are lost, not the other files'
            file_errors.append(exc)
            continue
        for index, item in enumerate(entries):
            found.parse(item, path, line, index)
    if len(file_errors) == len(files):
        raise file_errors[0]
    folder = files[0].parent if files[0].name == "workflows.yaml" else files[0].parent.parent
    variables_file = folder / "variables.yaml"
    variables = _load_variables(variables_file, found) if variables_file.is_file() else {}
    project = Project(
        root=root,
        workflows_file=files[0],
        workflows=found.workflows,
        variables=variables,
        variables_file=variables_file if variables_file.is_file() else None,
        notes=found.notes,
        refused=found.refused,
        files=files,
        file_errors=[e.message for e in file_errors],
    )
    _check_dependencies(project)
    for name, error in _undefined_variables(project).items():
        _refuse(project, name, error)
    log_notes(found.notes)
    return project


def _entries(path: Path) -> tuple[list[object], int]:
    """A file's entries under `workflows:` and that key's line; WorkflowError for the whole file."""
    data = read_yaml(path)
    if data is None:
        data = LineMap()
        data.key_lines = {}
    if not isinstance(data, LineMap) or not isinstance(data.get("workflows"), list):
        raise WorkflowError("expected a top-level 'workflows:' list", path, getattr(data, "line", 1))
    return list(data["workflows"]), data.line_of("workflows")


class _Found:
    """The workflows read so far, and those refused (by name) with why."""

    def __init__(self) -> None:
        self.workflows: dict[str, Workflow] = {}
        self.refused: dict[str, WorkflowError] = {}
        self.notes: list[str] = []
        self.places: dict[str, tuple[Path, int]] = {}  # name -> file and line of its first definition

    def parse(self, item: object, path: Path, parent_line: int, index: int) -> None:
        name = item.get("name") if isinstance(item, LineMap) else None
        line = item.line if isinstance(item, LineMap) else parent_line
        key = name if isinstance(name, str) and name.strip() else f"(entry {index + 1} of {path.name})"
        if key in self.places:  # both definitions go: which one the author meant is theirs to say
            self.workflows.pop(key, None)
            first, first_line = self.places[key]
            where = f"line {first_line}" if first == path else f"{first}:{first_line}"
            self.refused[key] = WorkflowError(
                f"duplicate workflow name {key!r} (first at {where}): rename or remove one", path, line
            )
            return
        self.places[key] = (path, line)
        try:
            self.workflows[key] = parse_workflow(item, path, parent_line, self.notes)
        except WorkflowError as exc:
            self.refused[key] = exc


def _refuse(project: Project, name: str, error: WorkflowError) -> None:
    project.workflows.pop(name, None)
    project.refused[name] = error


def _load_variables(path: Path, found: "_Found") -> dict[str, dict[str, Scalar]]:
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
        if section != "global" and section not in found.places:
            close = close_matches(str(section), [*found.places, "global"], n=1)
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
    """Refuse each workflow that depends on one not there or refused (and so on up its
    dependents), and each workflow of a dependency cycle."""
    while _refuse_broken_dependencies(project) or _refuse_a_cycle(project):
        pass


def _refuse_broken_dependencies(project: Project) -> bool:
    refused_any = False
    for wf in list(project.workflows.values()):
        for dep in wf.depends_on:
            if not dep.workflow and dep.tag:
                continue  # `- tag: NAME`: a run, whatever its workflows
            if dep.workflow in project.workflows:
                continue
            if dep.workflow in project.refused:
                why = project.refused[dep.workflow].message
                message = f"workflow {wf.name!r} depends on workflow {dep.workflow!r}, which is refused ({why})"
            elif "/" in dep.workflow:  # dstack's `user/repo/workflow`
                message = f"workflow {wf.name!r} depends on {dep.workflow!r}, of another repository: {CROSS_REPO_FIX}"
            else:
                close = close_matches(dep.workflow, list(project.workflows), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                message = f"workflow {wf.name!r} depends on unknown workflow {dep.workflow!r}{hint}"
            _refuse(project, wf.name, WorkflowError(message, wf.file, wf.line_of("depends-on")))
            refused_any = True
            break
    return refused_any


def _refuse_a_cycle(project: Project) -> bool:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> list[str]:
        state[name] = 1
        for dep in project.workflows[name].depends_on:
            if dep.tag:
                continue  # a tagged run is fixed: no edge in the plan
            if state.get(dep.workflow) == 1:
                return path[path.index(dep.workflow) :] + [dep.workflow]
            if dep.workflow not in state:
                cycle = visit(dep.workflow, [*path, dep.workflow])
                if cycle:
                    return cycle
        state[name] = 2
        return []

    for name in list(project.workflows):
        cycle = visit(name, [name]) if name not in state else []
        if cycle:
            members = cycle[:-1]
            for i, member in enumerate(members):
                wf = project.workflows[member]
                seen_from_it = [*members[i:], *members[:i], member]  # the cycle as read from this workflow
                error = WorkflowError(
                    f"dependency cycle: {' -> '.join(seen_from_it)}", wf.file, wf.line_of("depends-on")
                )
                _refuse(project, member, error)
            return True
    return False


def _undefined_variables(project: Project) -> dict[str, WorkflowError]:
    """Per workflow, the first variable (or secret) it uses wrongly."""
    found: dict[str, WorkflowError] = {}
    for wf in project.workflows.values():
        try:
            _check_variables_defined(project, wf)
        except WorkflowError as exc:
            found[wf.name] = exc
    return found


def _check_variables_defined(project: Project, wf: Workflow) -> None:
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
