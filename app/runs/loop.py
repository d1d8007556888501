"""The run loop behind `Controller.run`: a workflow's plan, job by job, on runners.

Reused jobs are skipped; the others run in order, each getting its dependencies'
artifacts, each a gang of its nodes (app/jobs/remote.py).

Detached (`run -d`), a plan of several jobs goes whole to one runner that can take
every step (Placement.one_runner): each step is sent at once with `after` (the ids of
the steps it waits for) and the run's secret key, and the runner starts it when they
are DONE, staging their artifacts itself (agent/jobs/dag.py), so no controller needs to
stay. Reused steps are not resent (their artifacts go up as inputs). When no one
runner fits every step, `run -d` is refused, naming the steps that need different runners
(never a silent change into a followed run). Steps a run never starts (an earlier one
failed, or Ctrl-C) are listed in it, ABORTED "not started: ...". What the command line
asks for (`--nodes`, `--port`, `--max-duration`, `--env`, `--resume`) is applied
here to the jobs it concerns. Imported only when a run starts (start-up time of
the other verbs).
"""

import asyncio
import dataclasses
import logging
import secrets
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lanpool.app.errors import NotFoundError, UsageError
from lanpool.app.home import ControllerHome
from lanpool.app.jobs.remote import JobServices, Launch, LogSink
from lanpool.app.jobs.submit import submit_job
from lanpool.app.runners.client import RunnerSession
from lanpool.app.runners.pool import Pool
from lanpool.app.runs.dev import DevEnvironment, as_dev_environment
from lanpool.app.runs.names import new_run_name
from lanpool.app.runs.placement import Placement
from lanpool.app.runs.planning import Plan, PlannedJob, with_env
from lanpool.app.runs.result import RunOutcome, Submitted
from lanpool.app.runs.resume import Resumes
from lanpool.app.secret_store import SecretStore, caller_values, secret_refs
from lanpool.app.store import JobRow, Store
from lanpool.app.transfer.snapshot import Manifest, build_manifest
from lanpool.app.transfer.uploads import workspace_files
from lanpool.app.workflows import Project
from lanpool.app.workflows.resolve import ResolvedJob, resolve
from lanpool.protocol import JobState
from lanpool.protocol.message_base import Record, record

log = logging.getLogger(__name__)

# (project, workflow, overrides, no_cache, reuse, env) -> the checked plan (Controller.plan)
Planner = Callable[[Project, str, dict[str, str], bool, bool, dict[str, str] | None], Plan]


@record
class RunRequest(Record):
    """What the command line asks of one run (Controller.run's options)."""

    workflow_name: str
    runner_spec: str | None = None
    overrides: dict[str, str] = dataclasses.field(default_factory=dict)
    follow: bool = True
    no_cache: bool = False
    reuse: bool = False
    tag: str | None = None
    nodes: int | None = None
    resume: str | None = None
    ports: list[int] | None = None
    env: dict[str, str] | None = None
    max_duration_s: float | None = None
    queue_timeout: float | None = None
    resources: dict[str, int | str] | None = None  # `--gpu`, `--cpu`, `--memory` (app/runs/resource_overrides.py)
    run_name: str | None = None  # `--name`: the run's name, else a new memorable one
    in_run: bool = False  # run_name names a run made already (a sweep's, app/runs/sweep.py): join it
    # A dev environment (app/runs/dev.py): the workflow's job stays up (and serves its IDE), and
    # ends after its idle limit with no session into it. None: an ordinary run.
    dev: DevEnvironment | None = None


@dataclass(eq=False)  # never compared: no __eq__ compiled at import
class RunLoop:
    """The Controller's services a run uses; `run` is Controller.run's body."""

    store: Store
    home: ControllerHome
    pool: Pool
    jobs: JobServices
    secrets: SecretStore
    plan: Planner

    def __post_init__(self) -> None:
        self.resumes = Resumes(self.store, self.home)  # checkpoints to resume from (`--resume`, tagged jobs)

    async def run(
        self,
        project: Project,
        req: RunRequest,
        sink: LogSink | None,
        say: Callable[[str], None],
        on_submitted: Callable[[Submitted], None] | None,
    ) -> RunOutcome:
        if req.run_name is not None and not req.in_run and self.store.run_name_taken(req.run_name):
            raise UsageError(name_taken(req.run_name))  # before anything is planned or sent
        if req.resume is not None and not req.resume.strip():
            raise UsageError("--resume needs a run name, a job id or WORKFLOW:TAG")
        cli_resume = self.resumes.job_and_checkpoint(req.resume) if req.resume else None
        plan = self.plan(project, req.workflow_name, req.overrides, req.no_cache, req.reuse, req.env)
        resumes = self.resumes.of(project, plan, req.workflow_name, cli_resume)
        multinode = [p for p in plan.to_run if p.job.nodes > 1 or (req.nodes and req.nodes > 1 and _requested(p, req))]
        if not req.follow and multinode and len(plan.to_run) > 1:
            raise UsageError("--detach takes a multi-node job alone, not in a chain: run its dependencies first")
        follow = req.follow
        outcome = RunOutcome(run_name=req.run_name or new_run_name(self.store.run_name_taken))
        job_ids = {p.workflow: secrets.token_hex(6) for p in plan.to_run}
        previous = None
        try:
            if not req.in_run:
                previous = self.store.create_run(
                    outcome.run_name, req.workflow_name, str(project.root), req.tag, plan.jobs[-1].job.variables
                )
        except sqlite3.IntegrityError:  # `--name` taken (checked, or by a run started meanwhile)
            raise UsageError(name_taken(outcome.run_name)) from None
        if previous:
            say(f"tag {req.tag!r} moved from run {previous} to run {outcome.run_name}")
        if not plan.to_run:
            for planned in plan.jobs:
                assert planned.reuse is not None  # nothing to run: every job is reused
                say(reusing(planned.workflow, planned.reuse))
                outcome.reused.append(planned.reuse)
            return outcome
        placement = Placement(self.pool, req.runner_spec, outcome.run_name, say, req.queue_timeout)
        manifest: Manifest | None = None
        done: dict[str, JobRow] = {}
        chain: tuple[list[RunnerSession], list[str]] | None = None  # a detached DAG's one runner
        run_key = secrets.token_hex(16)  # lets this run's steps, and only them, wait for each other there
        # The snapshot is read while the runner is reached (a thread, and git in a child process,
        # beside the SSH handshake: ~5 ms of every `run`). Used only if a runner comes
        # at once; a run that waits for one reads the files again once it has one (below).
        early = _EarlySnapshot(project.root)
        try:
            sized = [_sized(p.job, _requested(p, req), req.nodes, req.resources) for p in plan.to_run]
            await placement.check(sized)
            if not follow and len(plan.to_run) > 1:
                chain = await placement.one_runner(sized, job_ids[plan.to_run[0].workflow])
                if chain is None:
                    raise UsageError(
                        f"cannot detach {req.workflow_name}: `run -d` sends every step to one runner, and no "
                        f"runner fits them all ({_largest_needs(sized)}); run it without -d (this process then "
                        "runs each step on a runner that fits it)"
                    )
                say(f"sent the whole chain ({len(plan.to_run)} jobs) to runner {chain[0][0].hello.name}")
            for planned in plan.jobs:
                if planned.action == "reuse":
                    assert planned.reuse is not None
                    say(reusing(planned.workflow, planned.reuse))
                    done[planned.workflow] = planned.reuse
                    outcome.reused.append(planned.reuse)
                    continue
                job_id = job_ids[planned.workflow]
                job = resolve(
                    project, planned.workflow, req.overrides, {"run_name": outcome.run_name, "job_id": job_id}
                )
                job = _as_requested(job, _requested(planned, req), req)
                if planned.workflow in resumes:
                    resume_job, resume_ckpt = resumes[planned.workflow]
                    # Same explicit path on every node: never "last" without shared storage.
                    job = dataclasses.replace(job, env={**job.env, "LANPOOL_RESUME_CKPT": resume_ckpt})
                    planned.tagged.append(resume_job)  # its artifacts are placed like a dependency's
                    say(
                        f"{planned.workflow}: resuming from {resume_ckpt} of job {resume_job.id}"
                        f" (run {resume_job.run_name})"
                    )
                sessions, addresses = chain or await placement.sessions_for(job, job_id)
                # The snapshot once the run has a runner: a queued run sends the files as they are then.
                if manifest is None:
                    manifest = await early.take()
                    if manifest is None:
                        manifest = await asyncio.to_thread(build_manifest, project.root)
                # In a detached chain the steps that run now reach their dependents on the
                # runner itself (`after`); reused ones go up from this controller's store.
                inputs = [done[d] for d in planned.deps if d in done] + planned.tagged
                after = [job_ids[d] for d in planned.deps if d not in done] if chain else []
                files = await asyncio.to_thread(workspace_files, manifest, self.home, self.store, inputs)
                remote, status = await submit_job(
                    self.jobs,
                    Launch(
                        job_id,
                        outcome.run_name,
                        job,
                        files,
                        manifest.digest,
                        planned.key,
                        planned.inputs,
                        secrets=self.secrets.values_for(secret_refs(job.env)),
                        passed=caller_values(job.passed_env),
                    ),
                    sessions,
                    addresses,
                    say,
                    after=after,
                    run_key=run_key if chain else "",
                    detached=not follow,
                )
                submitted = Submitted(outcome.run_name, job_id, remote.nodes[0].runner, status)
                outcome.submitted.append(submitted)
                if on_submitted:
                    on_submitted(submitted)
                if chain:
                    continue
                if not follow:
                    return outcome
                row = await remote.follow(sink, say, sessions=sessions)
                for warning in self.store.warnings(job_id):
                    say(f"{planned.workflow}: warning: {warning}")
                outcome.jobs.append(row)
                done[planned.workflow] = row
                if row.state is not JobState.DONE:
                    rest = self._not_started(plan, job_ids, outcome.run_name, f"{planned.workflow} ended {row.status}")
                    if rest:
                        say(f"{planned.workflow} ended {row.status}: not running {', '.join(rest)}")
                    break
        except asyncio.CancelledError:  # Ctrl-C: the steps not yet sent are listed as such
            self._not_started(plan, job_ids, outcome.run_name, "the run was interrupted")
            raise
        finally:
            early.drop()
            placement.close()
        return outcome

    def _not_started(self, plan: Plan, job_ids: dict[str, str], run_name: str, why: str) -> list[str]:
        """Record the run's steps that have no job yet as ABORTED "not started: <why>"; their names."""
        names = []
        for planned in plan.to_run:
            job_id = job_ids[planned.workflow]
            try:
                self.store.job(job_id)
                continue
            except NotFoundError:
                pass
            self.store.create_job(job_id, run_name, planned.workflow, _NO_RUNNER, {"nodes": planned.job.nodes})
            error = f"not started: {why}"
            self.store.set_job_status(job_id, JobState.ABORTED, error, error=error, finished_at=time.time(), synced=1)
            names.append(planned.workflow)
        return names


_NO_RUNNER = {"name": "", "host": "", "port": 0}  # a step that never reached a runner


def _largest_needs(jobs: list[ResolvedJob]) -> str:
    """Which step needs the most of each resource (`train` 1 GPU, `prepare` 8 CPU)."""
    parts = []
    for key, unit in (("gpu", "GPU"), ("cpu", "CPU"), ("memory_mb", "MB of memory")):
        amounts = [(float(j.resources.get(key) or 0), j.workflow) for j in jobs]
        most, name = max(amounts)
        if most:
            parts.append(f"{name} needs {most:g} {unit}")
    return ", ".join(parts) or "every step needs a runner of its own"


class _EarlySnapshot:
    """The project's snapshot, started before a runner is placed; stale once placement waited."""

    FRESH_S = 1.0  # placement took longer (a queue, a slow runner): the files are read again then

    def __init__(self, root: Path) -> None:
        self._started = time.monotonic()
        self._task: asyncio.Task[Manifest] | None = asyncio.create_task(asyncio.to_thread(build_manifest, root))

    async def take(self) -> Manifest | None:
        """The snapshot if still fresh (its error, like a later read's, raised here), else None."""
        task, self._task = self._task, None
        if task is None:
            return None
        if time.monotonic() - self._started > self.FRESH_S:
            _forget(task)
            return None
        return await task

    def drop(self) -> None:
        if self._task is not None:
            _forget(self._task)
            self._task = None


def _forget(task: "asyncio.Task[Manifest]") -> None:
    """A snapshot no one waits for: its outcome (an error too) is not reported as never retrieved."""
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


def _requested(planned: PlannedJob, req: RunRequest) -> bool:
    """Whether this is the job of the workflow asked for (not one of its dependencies)."""
    return planned.workflow == req.workflow_name


def _sized(
    job: ResolvedJob, requested: bool, nodes: int | None, resources: dict[str, int | str] | None = None
) -> ResolvedJob:
    """`--nodes N` and `--gpu/--cpu/--memory` size the requested workflow's job only."""
    if not requested:
        return job
    if resources:  # imported when asked for: `run`'s modules stay within their budget (start-up time)
        from lanpool.app.runs.resource_overrides import with_resources

        job = with_resources(job, resources)
    return dataclasses.replace(job, nodes=nodes) if nodes else job


def name_taken(name: str) -> str:
    return f"--name {name}: a run of that name exists; choose another (or `app headless rm {name}` first)"


def _as_requested(job: ResolvedJob, requested: bool, req: RunRequest) -> ResolvedJob:
    """The job with the command line's options applied: `--env` to every job of the run;
    `--nodes`, `--port` and `--max-duration` to the requested workflow's job only."""
    job = _sized(with_env(job, req.env), requested, req.nodes, req.resources)
    if req.ports and requested:
        job = dataclasses.replace(job, ports=sorted({*job.ports, *req.ports}))
    if req.max_duration_s and requested:
        job = dataclasses.replace(job, max_duration_s=req.max_duration_s)
    if req.dev is not None and requested:
        job = as_dev_environment(job, req.dev)
    return job


def reusing(workflow: str, earlier: JobRow) -> str:
    """The one line a reused job gets in a run (plan's WHY column says the same in its words)."""
    return f"{workflow}: reusing job {earlier.id} of run {earlier.run_name} (same inputs)"
