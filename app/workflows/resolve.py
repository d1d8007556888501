"""Turning a workflow and its variables into the concrete job a runner executes."""

import shlex
from collections.abc import Iterable
from dataclasses import field

from lanpool.app.workflows.entry import MAX_NODES, check_artifact_path, check_container_artifacts
from lanpool.app.workflows.model import Project, Scalar, Workflow, WorkflowError
from lanpool.app.workflows.model import render_value as render_value  # the CLI and TUI import it from here
from lanpool.app.workflows.resources import normalize_resources
from lanpool.app.workflows.substitute import (
    UndefinedVariable,
    UnsafeVariable,
    names_referenced,
    substitute_commands,
    substitute_text,
    variable_names_used,
)
from lanpool.app.workflows.variable_env import variable_of_env, variables_as_args, variables_env
from lanpool.protocol.message_base import Record, record

DEFAULT_PYTHON = "3.11"


@record
class ResolvedJob(Record):
    """A workflow made concrete for one job: its commands, environment and artifacts."""

    workflow: str
    commands: list[str]
    env: dict[str, str]
    artifacts: list[str]
    artifacts_all_nodes: list[str]
    working_dir: str
    image: str
    pull: str
    resources: dict[str, int | str]
    nodes: int
    executor: str
    variables: dict[str, str] = field(default_factory=dict)
    resume_from: str = ""  # RUN|JOB|WORKFLOW:TAG to resume from ("" : none)
    python: str = ""  # `version:` (`python:`): the interpreter (or image) the runner gives the job
    requirements: str = ""  # installed by the runner into the job's own environment, before the commands
    ports: list[int] = field(default_factory=list)  # forwarded from the runner's loopback while it runs
    port_count: int = 0  # more ports, picked free by the runner ($PORT_0...) and forwarded the same way
    passed_env: list[str] = field(default_factory=list)  # the caller's env names whose values go with the job
    max_duration_s: float = 0.0  # kept by the runner (max_duration, retry): 0 = none
    retry_on: list[str] = field(default_factory=list)
    retry_limit: int = 0
    retry_delay_s: float = 0.0
    # `image` is lanpool's for provider python, not the author's: used where jobs run in
    # containers, never a reason for a runner to refuse the job.
    image_implicit: bool = False
    hold_base: bool = True  # pip holds the runner's torch/Lightning at the base's versions
    priority: int = 0  # orders its person's waiting jobs on a shared runner; not an input (no cache key)
    idle_s: float = 0.0  # a dev environment: ended after this long with no session (app/runs/dev.py)


def coerce_override(name: str, text: str, default: Scalar | None) -> Scalar:
    """A CLI value, checked against the type of the variable's default."""
    if isinstance(default, bool):
        low = text.lower()
        if low in ("true", "yes", "1", "on"):
            return True
        if low in ("false", "no", "0", "off"):
            return False
        raise WorkflowError(f"--{name} expects true or false (default {render_value(default)}), got {text!r}")
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            raise WorkflowError(f"--{name} expects a whole number (default {default}), got {text!r}") from None
    if isinstance(default, float):
        try:
            return float(text)
        except ValueError:
            raise WorkflowError(f"--{name} expects a number (default {default}), got {text!r}") from None
    return text


def workflow_variables(project: Project, wf: Workflow, overrides: dict[str, str]) -> dict[str, Scalar]:
    """Defaults (global, then the workflow's own) with the overrides that name them applied."""
    values = dict(project.variables_of(wf.name))
    for name, text in overrides.items():
        target = override_target(name, values)
        if target is not None:
            values[target] = coerce_override(target, text, values[target])
    return values


def override_target(name: str, variables: Iterable[str]) -> str | None:
    """The variable an override names: itself, else the one variable spelled alike with `-` for `_`.

    (A CLI that turned `--batch-size` into `batch_size`, argparse's habit, still reaches
    `batch-size`.) None where no variable, or two (`batch-size` and `batch_size`), could be meant.
    """
    names = list(variables)
    if name in names:
        return name
    alike = [n for n in names if n.replace("-", "_") == name.replace("-", "_")]
    return alike[0] if len(alike) == 1 else None


RUN_ARGS = "run.args"  # `${{ run.args }}` (dstack 2022): the words after the workflow name, as shell words


def uses_run_args(wf: Workflow) -> bool:
    """Whether the workflow's commands (or its script's args) take `${{ run.args }}`."""
    texts = [*wf.commands, *(wf.args if isinstance(wf.args, list) else [wf.args])]
    return any(RUN_ARGS in variable_names_used(t) for t in texts)


def resolve(project: Project, name: str, overrides: dict[str, str], builtins: dict[str, str]) -> ResolvedJob:
    """Substitute variables into every field of workflow `name`. `overrides[RUN_ARGS]`: the run's
    `${{ run.args }}`, already shell words (app/cli/run_verbs.py)."""
    wf = project.get(name)
    run_args = overrides.get(RUN_ARGS, "")
    typed = workflow_variables(project, wf, {k: v for k, v in overrides.items() if k != RUN_ARGS})
    values = {k: render_value(v) for k, v in typed.items()}
    as_args = variables_as_args(values, escaped=True)
    text_values = {**values, **builtins, "variables_as_args": variables_as_args(values, escaped=False)}
    text_values[RUN_ARGS] = run_args

    def err(message: str, key: str) -> WorkflowError:
        return WorkflowError(f"workflow {wf.name!r}: {message}", wf.file, wf.line_of(key))

    try:
        # In commands, $variables_as_args is shell text we built (already escaped). The
        # lines are one script to bash, so they are read as one: a quote or a here-document
        # may span lines. Whole numbers (checked by coerce_override) may go where bash
        # evaluates a value; strings may not.
        ints = {k for k, v in typed.items() if isinstance(v, int) and not isinstance(v, bool)}
        env_copies = {k: min(names) for k, v in wf.env.items() if (names := names_referenced(v) & set(typed) - ints)}
        env_copies |= {e: n for e, n in variable_of_env(values, wf.env).items() if n not in ints}
        commands = substitute_commands(
            _commands_of(wf),
            {**values, **builtins},
            {"variables_as_args": as_args, RUN_ARGS: run_args},
            ints,
            env_copies,
        )
        # `${{ secrets.NAME }}` stays as written: the value is put in only when the job is sent
        # (app/secret_store.py), so the stored spec and the cache key never hold it.
        kept = {
            n: f"${{{{ {n} }}}}" for v in wf.env.values() for n in variable_names_used(v) if n.startswith("secrets.")
        }
        env_values = {**text_values, **kept}
        env = {**variables_env(values, wf.env), **{k: substitute_text(v, env_values) for k, v in wf.env.items()}}
        artifacts: list[str] = []
        artifacts_all: list[str] = []
        for spec in wf.artifacts:
            path = substitute_text(spec.path, text_values)
            check_artifact_path(path, err)
            (artifacts_all if spec.nodes == "all" else artifacts).append(path)
        raw_resources = {k: _sub_any(v, text_values) for k, v in wf.resources.items()}
        nodes_text = substitute_text(str(wf.nodes), text_values)
        image = substitute_text(wf.image, text_values)
        resume_from = substitute_text(wf.resume_from, text_values).strip()
    except UndefinedVariable as exc:
        raise err(f"uses variable {exc.name!r}, which is never defined", "commands") from None
    except UnsafeVariable as exc:
        if wf.provider == "python":
            raise err(f"in 'args': {exc.message}", "args") from None
        raise err(f"command {exc.line + 1}: {exc.message}", "commands") from None
    try:
        resources = normalize_resources(raw_resources)
    except ValueError as exc:
        raise err(str(exc), "resources") from None
    if not (nodes_text.isascii() and nodes_text.isdigit()) or not 1 <= int(nodes_text) <= MAX_NODES:
        raise err(f"'nodes' must be a whole number from 1 to {MAX_NODES}, not {nodes_text[:40]!r}", "nodes")
    if any(c.isspace() for c in resume_from):
        raise err(f"'resume-from' must be one run name, job id or WORKFLOW:TAG, not {resume_from!r}", "resume-from")
    # A variable may have made a path absolute, or the image empty: checked as written values are.
    check_container_artifacts(artifacts + artifacts_all, image, wf.provider, wf.executor, err)
    implicit = wf.provider == "python" and not image
    if implicit:
        image = f"python:{wf.version or DEFAULT_PYTHON}-slim"  # where the job runs in a container
    return ResolvedJob(
        workflow=wf.name,
        commands=commands,
        env=env,
        artifacts=artifacts,
        artifacts_all_nodes=artifacts_all,
        working_dir=wf.working_dir,
        image=image,
        pull=wf.pull,
        resources=resources,
        nodes=int(nodes_text),
        executor=wf.executor,
        # Every variable reaches the job (its env, $variables_as_args): each is one of its inputs.
        variables=values,
        resume_from=resume_from,
        # Any workflow's, not only provider python's (a commands workflow's `python: 3.8` is meant too).
        python=wf.version,
        requirements=wf.requirements,
        ports=list(wf.ports),
        port_count=wf.port_count,
        passed_env=list(wf.passed_env),
        max_duration_s=wf.max_duration_s,
        retry_on=list(wf.retry_on),
        retry_limit=wf.retry_limit,
        retry_delay_s=wf.retry_delay_s,
        image_implicit=implicit,
        hold_base=wf.hold_base,
        priority=wf.priority,
    )


def _commands_of(wf: Workflow) -> list[str]:
    """The shell lines of a workflow; `provider: python` becomes a python line (its `requirements:`
    the runner installs into the job's own environment: ResolvedJob.requirements)."""
    if wf.provider != "python":
        return wf.commands
    lines = []
    if isinstance(wf.args, str):
        args = wf.args
    else:
        args = " ".join(a if _is_args_var(a) else _quote_literal(a) for a in wf.args)
    lines.append(f"python {wf.script} {args}".rstrip())
    return lines


def _is_args_var(text: str) -> bool:
    return text.strip() in ("$variables_as_args", "${variables_as_args}", "${{ variables_as_args }}")


def _quote_literal(arg: str) -> str:
    """A list element of `args` is one argument: quote its literal parts, keep its variables."""
    if "$" not in arg:
        return shlex.quote(arg)
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"'


def _sub_any(value: object, values: dict[str, str]) -> object:
    if isinstance(value, str):
        return substitute_text(value, values)
    if isinstance(value, dict):
        return {k: _sub_any(v, values) for k, v in value.items()}
    return value
