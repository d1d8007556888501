"""Placing jobs on runners by free resources and by what each runner can run.

Pure logic over a snapshot of the pool, so it is easy to test and to reason
about: best fit (the runner with the least room left after placing the job),
so that large jobs still find a runner with room; jobs share a runner while
resources allow; what cannot fit now waits (QUEUED, with the reason) and what
can never fit on any runner is rejected at once. A runner that would refuse the
job (it runs no containers, or only containers; it lacks the Python version) is
never chosen, as agent/executors/choice.py decides on the runner: the refusal
names each runner skipped and why.
"""

from typing import Any

from lanpool.protocol.message_base import Record, record


@record
class Need(Record):
    """What a job asks of a runner: GPUs, CPUs, memory."""

    gpu: int = 0
    cpu: int = 0
    memory_mb: int = 0
    # How it runs: "docker" (a container, asked), "image" (its image where there is an engine;
    # an `auto` runner without one ignores it), "any" (provider python's implicit image),
    # "process" (no image, or asked to).
    runs_in: str = "process"
    python: str = ""  # the version a process job needs ("" : the runner's base)

    @classmethod
    def of(cls, resources: dict[str, Any], job: Any = None) -> "Need":
        """What a job needs: its resources, and (given the ResolvedJob) how it runs."""
        runs_in, python = "process", ""
        if job is not None:
            python = job.python
            if job.executor in ("docker", "process"):
                runs_in = job.executor
            elif job.image:
                runs_in = "any" if job.image_implicit else "image"
            if runs_in in ("any", "image") and any(p.startswith("/") for p in _artifacts(job)):
                runs_in = "docker"  # its absolute artifacts are copied out of a container: only Docker keeps them
        return cls(
            int(resources.get("gpu", 0) or 0),
            int(resources.get("cpu", 0) or 0),
            int(resources.get("memory_mb", 0) or 0),
            runs_in,
            python,
        )

    def __str__(self) -> str:
        parts = [
            f"{self.gpu} GPU" if self.gpu else "",
            f"{self.cpu} CPU" if self.cpu else "",
            f"{self.memory_mb} MB memory" if self.memory_mb else "",
        ]
        return ", ".join(p for p in parts if p) or "no particular resources"


def _artifacts(job: Any) -> list[str]:
    return [*getattr(job, "artifacts", []), *getattr(job, "artifacts_all_nodes", [])]


@record
class Capacity(Record):
    """One runner as the scheduler sees it."""

    name: str
    usable: bool  # trusted by the user, LIVE or BUSY, no host-key conflict
    gpus: int
    gpus_free: int
    cpus: int
    cpus_free: int
    memory_mb: int
    memory_free_mb: int
    why_not: str = ""  # when not usable: offline, unpaired (not trusted: never waited for), conflict
    queued: int = 0  # jobs waiting in the runner's own queue
    # What it runs (its Hello): `mode` as started (auto, docker, process, slurm; "" : not said, so
    # anything), `executor` what runs an image there ("docker" with an engine), `pythons` "3.11,3.10".
    mode: str = ""
    executor: str = ""
    pythons: str = ""

    def cannot_run(self, need: Need) -> str:
        """Why the runner would refuse the job whatever its room ("" : it would take it)."""
        engine = self.executor == "docker"
        if not self.mode:
            return ""
        if need.runs_in == "docker" and not engine:
            return f"runs no containers (--executor {self.mode})"
        if need.runs_in == "image" and not engine and self.mode != "auto":
            return f"runs no containers (--executor {self.mode}) and the job names an image"
        if need.runs_in == "process" and self.mode == "docker":
            return "runs jobs in containers only (--executor docker) and the job names no image"
        in_container = engine and need.runs_in != "process"
        wanted = ".".join(need.python.strip().split(".")[:2])
        have = [v for v in self.pythons.split(",") if v]
        if wanted and not in_container and have and wanted not in have:
            return f"has Python {', '.join(have)}, not {wanted}"
        return ""

    def fits_now(self, need: Need) -> bool:
        return (
            self.usable
            and need.gpu <= self.gpus_free
            and need.cpu <= self.cpus_free
            and need.memory_mb <= self.memory_free_mb
        )

    def fits_ever(self, need: Need) -> bool:
        return need.gpu <= self.gpus and need.cpu <= self.cpus and need.memory_mb <= self.memory_mb

    def slack(self, need: Need) -> tuple[int, int, int]:
        return (self.gpus_free - need.gpu, self.cpus_free - need.cpu, self.memory_free_mb - need.memory_mb)


@record
class Decision(Record):
    """Where the scheduler places a job, or why it waits or can never run."""

    runners: list[str]  # chosen, node 0 first; empty when queued or rejected
    queued: str = ""  # why it must wait
    rejected: str = ""  # why it can never run


def place(
    need: Need,
    pool: list[Capacity],
    nodes: int = 1,
    pinned: str | None = None,
    runner_queues: bool = False,
) -> Decision:
    """Choose `nodes` distinct runners for a job (all or none).

    `runner_queues`: the runners queue jobs themselves (agent.jobs.queue), and start a gang's
    nodes together (agent/gang/hub.py), so any usable runners whose capacity fits will do:
    those with room now first, then the shortest queues. Without it, only runners with
    room now (the controller waits)."""
    if pinned is not None:
        pool = [c for c in pool if c.name == pinned]
        if not pool:
            return Decision([], rejected=f"no runner named {pinned!r}")
        if pool[0].why_not == "unpaired":
            return Decision([], rejected=f"runner {pinned} is not paired with this controller: {_TRUST_HINT}")
        if nodes > 1:
            return Decision([], rejected="--runner pins one runner; a multi-node job needs several")
    # Offline runners may come back, so a job waits for them; unpaired (untrusted) or
    # conflicting ones will not take jobs until someone acts.
    candidates = [c for c in pool if c.usable or c.why_not == "offline"]
    able = [c for c in candidates if not c.cannot_run(need)]
    if len(able) < len(candidates) and len(able) < nodes:  # too few left once those that would refuse it go
        skipped = "; ".join(f"{c.name} {c.cannot_run(need)}" for c in candidates if c.cannot_run(need))
        fewer = f"{len(able)} of {len(candidates)} runners" if nodes > 1 else "no runner"
        return Decision([], rejected=f"{fewer} can run it: {skipped}")
    candidates = able
    ever = [c for c in candidates if c.fits_ever(need)]
    if len(ever) < nodes:
        return Decision([], rejected=_never_reason(need, pool, candidates, nodes, pinned))
    if runner_queues:
        usable = sorted(
            (c for c in ever if c.usable), key=lambda c: (not c.fits_now(need), c.queued, c.slack(need), c.name)
        )
        if len(usable) >= nodes:
            return Decision([c.name for c in usable[:nodes]])
        return Decision([], queued=_wait_reason(need, ever, nodes, 0))
    now = sorted((c for c in ever if c.fits_now(need)), key=lambda c: (c.slack(need), c.name))
    if len(now) >= nodes:
        return Decision([c.name for c in now[:nodes]])
    return Decision([], queued=_wait_reason(need, ever, nodes, len(now)))


_TRUST_HINT = (
    "pair one with `app headless runners pair NAME CODE`, or add one with `app headless runners add HOST[:PORT]`"
)


def _never_reason(
    need: Need, pool: list[Capacity], candidates: list[Capacity], nodes: int, pinned: str | None = None
) -> str:
    if not pool:
        return "no runner is known: start `app agent serve` on a machine and pair it"
    if not candidates:
        states = ", ".join(f"{c.name} {c.why_not}" for c in pool)
        return f"no runner can take jobs ({states}): {_TRUST_HINT}"
    pool = candidates
    biggest = max(pool, key=lambda c: (c.gpus, c.cpus, c.memory_mb))
    if nodes > 1:
        return f"needs {nodes} runners with {need} each; only {sum(c.fits_ever(need) for c in pool)} could ever fit it"
    which = f"runner {biggest.name} (--runner)" if pinned else f"the largest runner ({biggest.name})"
    return f"needs {need}; {which} has {biggest.gpus} GPU, {biggest.cpus} CPU, {biggest.memory_mb} MB memory"


def _wait_reason(need: Need, ever: list[Capacity], nodes: int, free_now: int) -> str:
    states = []
    for c in ever:
        if not c.usable:
            states.append(f"{c.name} {c.why_not}")
        else:
            states.append(f"{c.name}: {c.gpus_free}/{c.gpus} GPU free")
    if all(not c.usable for c in ever):
        offline = ", ".join(f"{c.name} {c.why_not}" for c in ever)
        return f"waiting: {offline}; the job is sent when a runner that fits it comes back"
    wanted = f"{nodes} runners" if nodes > 1 else "a runner"
    return f"waiting for {wanted} with {need} free ({free_now} now; " + ", ".join(states) + ")"
