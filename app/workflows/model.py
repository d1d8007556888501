"""What parsed workflow files hold (before variables are substituted)."""

from dataclasses import field
from pathlib import Path
from typing import Any

from lanpool.app.errors import UsageError
from lanpool.protocol.message_base import Record, record

Scalar = str | int | float | bool


# YAML 1.1's other booleans, as PyYAML spelled them. Workflow files are read with YAML 1.2's
# (app/workflows/yaml_lines.py), where these are words; a field that takes a boolean still
# takes them, so `hold_base: no` means what it did. Anywhere else (a variable, a key) they stay words.
FLAG_WORDS = {
    **{word: True for base in ("yes", "on") for word in (base, base.capitalize(), base.upper())},
    **{word: False for base in ("no", "off") for word in (base, base.capitalize(), base.upper())},
}


def flag(value: object) -> bool | None:
    """A boolean field's value: true/false, or yes/no/on/off; None for anything else."""
    if isinstance(value, bool):
        return value
    return FLAG_WORDS.get(value) if isinstance(value, str) else None


def render_value(value: object) -> str:
    """A value as shell or env text: YAML reads `true` as a bool, and the text wants `true` back, not `True`."""
    return str(value).lower() if isinstance(value, bool) else str(value)


class WorkflowError(UsageError):
    """A problem in a workflow file, reported as `file:line: what is wrong`."""

    def __init__(self, message: str, file: Path | None = None, line: int | None = None) -> None:
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(where + message)
        self.file = file
        self.line = line


LATEST = "latest"


@record
class Dependency(Record):
    """A workflow's `needs:` entry: the workflow (or run tag) it waits for."""

    workflow: str
    # `prepare:NAME`: the run tagged NAME, not a fresh plan; `prepare:latest`: the latest
    # DONE run of prepare (dstack's meaning). No workflow (`:NAME`): every job of the run tagged NAME.
    tag: str | None = None

    @property
    def latest(self) -> bool:
        return self.tag == LATEST

    def __str__(self) -> str:
        return f"{self.workflow}:{self.tag}" if self.tag else self.workflow


@record
class ArtifactSpec(Record):
    """One `artifacts:` path of a workflow, and which nodes it comes from."""

    path: str
    nodes: str = "0"  # "0": from node 0 only; "all": from every node (multi-node jobs)


@record
class StopWorst(Record):
    """`sweep: {stop_worst: ...}`: at each step of `at`, a job of the sweep that reached it is
    stopped when its `metric` (best so far) ranks in the worse part of those that reached it
    (asynchronous successive halving: app/runs/halving.py)."""

    metric: str
    at: list[int]
    keep: float = 0.5
    mode: str = ""  # "min" or "max"; "": read from the metric's name (app/views/compare.py)


@record
class SweepSpec(Record):
    """A workflow's `sweep:`: the variables swept, each as its values (grid) or a distribution
    (random: `choice`, `uniform`, `log_uniform`, `int_uniform` -> [lo, hi]); app/runs/sweep.py
    makes the points."""

    method: str = "grid"  # or "random"
    samples: int = 0  # random: how many points
    seed: int | None = None  # random: the same seed draws the same points
    # variable -> ("values", [v, ...]) or (distribution, [lo, hi]) / ("choice", [v, ...])
    variables: dict[str, tuple[str, list[Scalar]]] = field(default_factory=dict)
    stop_worst: StopWorst | None = None


@record
class Workflow(Record):
    """One entry of `workflows:`. Text fields may still hold `$variables`."""

    name: str
    commands: list[str]
    help: str = ""
    image: str = ""
    provider: str = ""  # "python": the dstack shorthand, turned into commands
    version: str = ""
    requirements: str = ""
    script: str = ""
    args: list[str] | str = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    artifacts: list[ArtifactSpec] = field(default_factory=list)
    working_dir: str = ""
    resources: dict[str, Scalar | dict[str, Any]] = field(default_factory=dict)
    nodes: int | str = 1
    executor: str = ""
    pull: str = "missing"
    depends_on: list[Dependency] = field(default_factory=list)
    repo_include: list[str] | None = None  # None: the whole snapshot counts
    resume_from: str = ""  # a run name, job id or WORKFLOW:TAG whose checkpoint this job resumes from
    ports: list[int] = field(default_factory=list)  # the job's loopback ports, forwarded while it runs
    port_count: int = 0  # `ports: N` (2022): N free ports the runner picks, $PORT_0..., forwarded as `ports`
    # `env: [- NAME]` (2022): the caller's own NAME, read when the job is sent and never stored
    passed_env: list[str] = field(default_factory=list)
    # Kept by the runner (agent.jobs.limits): 0 = no time limit / no retry.
    max_duration_s: float = 0.0
    retry_on: list[str] = field(default_factory=list)
    retry_limit: int = 0
    retry_delay_s: float = 0.0
    # The runner's torch/Lightning (and CUDA) held at the base's versions while pip installs (agent/python/job_envs.py).
    hold_base: bool = True
    priority: int = 0  # among its person's jobs waiting on a shared runner: higher first (agent/jobs/turns.py)
    dev: bool = False  # a dev environment: `run`/`dev` keep it up for ssh and editors (app/runs/dev.py)
    idle_s: float | None = None  # a dev environment's idle limit (None: the default, 0: none)
    ide: str = ""  # `ide: jupyter`: a dev environment that also serves JupyterLab (app/runs/dev.py)
    sweep: SweepSpec | None = None  # `sweep:`: `run` makes a job per point (app/runs/sweep.py)
    file: Path | None = None
    line: int | None = None
    key_lines: dict[str, int] = field(default_factory=dict, compare=False)

    def line_of(self, key: str) -> int | None:
        return self.key_lines.get(key, self.line)


@record
class Project(Record):
    """A directory with `.lanpool/` (or a 2022 `.dstack/`) workflow files."""

    root: Path
    workflows_file: Path  # the first of `files`
    workflows: dict[str, Workflow]  # those that can run
    # section ("global" or a workflow name) -> variable -> default value
    variables: dict[str, dict[str, Scalar]] = field(default_factory=dict)
    variables_file: Path | None = None
    notes: list[str] = field(default_factory=list)  # what loading ignored (2022 keys lanpool has no use for)
    # Workflows lanpool refuses, each with why (app/workflows/loader.py): the others run without them.
    refused: dict[str, WorkflowError] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)  # workflows.yaml and workflows/*.yaml
    file_errors: list[str] = field(default_factory=list)  # files that could not be read at all, each with why

    @property
    def variables_path(self) -> str:
        """The variables file as the user knows it: `.dstack/variables.yaml` in a dstack project."""
        folder = self.workflows_file.parent
        return f"{(folder.parent if folder.name == 'workflows' else folder).name}/variables.yaml"

    def get(self, name: str) -> Workflow:
        if name in self.refused:
            raise self.refused[name]
        try:
            return self.workflows[name]
        except KeyError:
            known = ", ".join(sorted(self.workflows)) or "none"
            hidden = (
                f"; {len(self.file_errors)} file(s) could not be read: {self.file_errors[0]}"
                if self.file_errors
                else ""
            )
            raise WorkflowError(
                f"no workflow named {name!r} (workflows here: {known}){hidden}", self.workflows_file
            ) from None

    def variables_of(self, name: str) -> dict[str, Scalar]:
        """Defaults a workflow sees: the global section, then its own on top."""
        return {**self.variables.get("global", {}), **self.variables.get(name, {})}
