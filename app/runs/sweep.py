"""A sweep (`run W --sweep lr=1e-4,3e-4 --sweep batch=32,64`): one run of N jobs, one per point of
the grid (the product of the values, in the order given), each an ordinary job of W with its own
variables: its own cache key (a point that already ran with the same inputs is reused, and said
so), its own place (each goes to a runner with room, else waits in a runner's queue, as any job
does), its own log and metrics. `app headless compare RUN` puts the points side by side.

Every point is sent detached, one after another; a followed sweep then waits for all of them and
ends with their comparison, a detached one (`-d`) returns once the last is sent, so the laptop may
close. `--max-parallel N` (followed only) sends a point when one of N slots is free: the front end
that follows the points frees a point's slot when it ends (`slots`), so the points beyond N wait on
this controller, not in a runner's queue, and leave other users' jobs room. A point's dependencies are planned with it: run them first (`app headless run prepare`) and
every point reuses them, rather than each point running its own.
"""

import asyncio
import dataclasses
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from lanpool.app.errors import UsageError
from lanpool.app.runs.loop import RunLoop, RunRequest, name_taken
from lanpool.app.runs.names import new_run_name
from lanpool.app.runs.result import Submitted
from lanpool.app.store import JobRow
from lanpool.app.workflows import Project
from lanpool.app.workflows.model import Scalar, StopWorst, SweepSpec
from lanpool.app.workflows.resolve import coerce_override, render_value
from lanpool.app.workflows.sweep_spec import MAX_POINTS, MAX_VALUES


@dataclass(frozen=True)
class Grid:
    """The swept variables, each with its values, and the points: one {variable: value} each."""

    axes: dict[str, list[str]]
    points: list[dict[str, str]]
    seed: int | None = None  # a random sweep's: the same seed draws the same points
    stop_worst: StopWorst | None = None  # early stopping, decided by the controller that follows it


def grid_of(
    project: Project, workflow: str, specs: list[str], known: dict[str, object], overrides: dict[str, str]
) -> Grid:
    """The command line's `--sweep`s, else the workflow's `sweep:` (the command line's replace it)."""
    spec = project.get(workflow).sweep
    if specs:  # the points are the command line's; the workflow's early stopping still holds
        grid = parse_grid(specs, workflow, known, overrides)
        return dataclasses.replace(grid, stop_worst=spec.stop_worst if spec else None)
    if spec is None:
        raise UsageError(f"{workflow} has no 'sweep:': give --sweep VAR=V1,V2")
    return spec_grid(spec, workflow, known, overrides)


def parse_grid(specs: list[str], workflow: str, known: dict[str, object], overrides: dict[str, str]) -> Grid:
    """`--sweep VAR=V1,V2,...` (repeatable) as a grid; every mistake is one line naming it."""
    axes: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"--sweep {spec!r}: write VARIABLE=VALUE,VALUE,... (e.g. --sweep lr=1e-4,3e-4)")
        if name not in known:
            have = ", ".join(sorted(known)[:20]) or "none (define them in .lanpool/variables.yaml)"
            raise UsageError(f"--sweep {name}: {workflow} has no variable {name!r}; its variables: {have}")
        if name in axes:
            raise UsageError(f"--sweep {name} is given twice: put all its values in one --sweep {name}=V1,V2")
        if name in overrides:
            raise UsageError(f"--{name} and --sweep {name}: give one (a swept variable takes each value in turn)")
        values = [v.strip() for v in text.split(",")]
        if any(not v for v in values):
            raise UsageError(f"--sweep {spec!r}: an empty value; separate the values with single commas")
        if len(values) > MAX_VALUES:
            raise UsageError(f"--sweep {name}: {len(values)} values; at most {MAX_VALUES}")
        axes[name] = list(dict.fromkeys(values))  # a value given twice is one point
    size = 1
    for values in axes.values():
        size *= len(values)
    if size > MAX_POINTS:
        raise UsageError(f"--sweep: {size} points; one run takes at most {MAX_POINTS} (sweep fewer values)")
    points = [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())]
    return Grid(axes, points)


def spec_grid(spec: SweepSpec, workflow: str, known: dict[str, object], overrides: dict[str, str]) -> Grid:
    """The points of a workflow's `sweep:` (app/workflows/sweep_spec.py): every combination of a
    grid, or `samples` draws of a random sweep (`seed`: the same points every time; none: a new
    seed, which the run records)."""
    for name in spec.variables:
        if name not in known:
            have = ", ".join(sorted(known)[:20]) or "none (define them in .lanpool/variables.yaml)"
            raise UsageError(f"{workflow}'s sweep: no variable {name!r}; its variables: {have}")
        if name in overrides:
            raise UsageError(f"--{name}: {workflow}'s sweep sets {name}; sweep other values with --sweep {name}=V1,V2")
    if spec.method == "grid":
        axes = {name: [render_value(v) for v in values] for name, (_kind, values) in spec.variables.items()}
        points = [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())]
        return Grid(axes, points, stop_worst=spec.stop_worst)
    seed = spec.seed if spec.seed is not None else random.SystemRandom().randrange(2**31)
    rng = random.Random(seed)
    points = [
        {name: _draw(rng, kind, values) for name, (kind, values) in spec.variables.items()} for _ in range(spec.samples)
    ]
    axes = {name: list(dict.fromkeys(p[name] for p in points)) for name in spec.variables}
    return Grid(axes, points, seed, spec.stop_worst)


def _draw(rng: random.Random, kind: str, values: list[Scalar]) -> str:
    if kind == "choice":
        return render_value(rng.choice(values))
    low, high = float(values[0]), float(values[1])
    if kind == "int_uniform":
        return str(rng.randint(int(low), int(high)))
    if kind == "log_uniform":
        return f"{math.exp(rng.uniform(math.log(low), math.log(high))):.6g}"
    return f"{rng.uniform(low, high):.6g}"


def point_text(point: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


@dataclass
class SweepOutcome:
    run_name: str
    submitted: list[Submitted] = field(default_factory=list)  # the points sent, in order
    reused: list[JobRow] = field(default_factory=list)  # points that had run already, with the same inputs
    points: dict[str, dict[str, str]] = field(default_factory=dict)  # job id -> its point
    stop_worst: StopWorst | None = None

    @property
    def job_ids(self) -> list[str]:
        return [s.job_id for s in self.submitted] + [j.id for j in self.reused]


async def run_sweep(
    loop: RunLoop,
    project: Project,
    req: RunRequest,
    grid: Grid,
    known: dict[str, object],
    say: Callable[[str], None],
    on_submitted: Callable[[Submitted, dict[str, str]], None] | None = None,
    slots: asyncio.Semaphore | None = None,
) -> SweepOutcome:
    """Make the run, then send each point of `grid` to it as a detached job of its own. `slots`:
    a point is sent once it holds one; the caller releases it when the point's job ends (a point
    reused from an earlier run holds none). `on_submitted` gets each job sent with its point."""
    store = loop.store
    if req.run_name is not None and store.run_name_taken(req.run_name):
        raise UsageError(name_taken(req.run_name))
    if req.nodes and req.nodes > 1 or req.resume:
        raise UsageError("--sweep runs single-node jobs, each from scratch: drop --nodes/--resume")
    for point in grid.points:  # a value of the wrong type is refused before the run exists (as --lr abc is)
        for variable, text in point.items():
            default = known.get(variable)
            coerce_override(variable, text, default if isinstance(default, str | int | float) else None)
    name = req.run_name or new_run_name(store.run_name_taken)
    # The run's variables: the defaults with the command line's, each swept one as its list of values.
    variables: dict[str, object] = {**known, **req.overrides, **grid.axes}
    previous = store.create_run(name, req.workflow_name, str(project.root), req.tag, variables)
    if previous:
        say(f"tag {req.tag!r} moved from run {previous} to run {name}")
    outcome = SweepOutcome(name, stop_worst=grid.stop_worst)
    drawn = f", drawn with seed {grid.seed} (`seed: {grid.seed}` draws them again)" if grid.seed is not None else ""
    say(f"run {name}: a sweep of {len(grid.points)} point(s) over {', '.join(grid.axes)}{drawn}")
    if grid.stop_worst and not req.follow:
        say(
            f"run {name}: stop_worst is decided by the controller that follows a sweep: detached, every point runs to its end"
        )
    for k, point in enumerate(grid.points, 1):
        label = f"point {k}/{len(grid.points)} ({point_text(point)})"
        one = dataclasses.replace(
            req, overrides={**req.overrides, **point}, run_name=name, in_run=True, follow=False, tag=None
        )
        if slots is not None:
            if slots.locked():
                say(f"{label}: waits for one of the points running to end (--max-parallel)")
            await slots.acquire()
        try:
            sent = await loop.run(project, one, None, _prefixed(say, label), None)
        except BaseException:
            if slots is not None:
                slots.release()
            raise
        if slots is not None and not any(store.job(s.job_id).workflow == req.workflow_name for s in sent.submitted):
            slots.release()  # reused: nothing of this point runs
        for sub in sent.submitted:
            say(f"{label}: job {sub.job_id} on runner {sub.runner}")
            outcome.submitted.append(sub)
            outcome.points[sub.job_id] = point
            if on_submitted:
                on_submitted(sub, point)
        wanted = [j for j in sent.reused if j.workflow == req.workflow_name]
        for job in wanted:  # the point itself ran before (its dependencies' reuse is the run's own business)
            outcome.reused.append(job)
            outcome.points[job.id] = point
    return outcome


def _prefixed(say: Callable[[str], None], label: str) -> Callable[[str], None]:
    return lambda text: say(f"{label}: {text}")
