"""The controller API: what `app headless` and the TUI both call.

It owns the store and the services around it: the runner pool (app/runners/pool.py),
the jobs on runners (app/jobs/remote.py: every job a gang of 1..N nodes), their
artifacts (app/transfer/artifacts.py) and the removal of old runs (app/runs/retention.py).
It turns workflows into jobs on runners (the run loop: app/runs/loop.py), follows
their logs into the store, and pulls artifacts back.
"""

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from lanpool.app.errors import LanpoolError, NotFoundError, RunnerError, UsageError
from lanpool.app.home import ControllerHome
from lanpool.app.runners.pool import DEFAULT_PORT, Pool, RunnerState, parse_address
from lanpool.app.store import ARTIFACTS_REFUSED, JobRow, Store
from lanpool.protocol import JobState

# Start-up time: `status` and `logs` of stored runs need only the store. What talks
# to runners (asyncssh, cryptography) and reads workflows (yaml) is imported on first use: the
# jobs and artifacts below are built when a verb first asks for them, the pool connects lazily.
if TYPE_CHECKING:
    import asyncssh

    from lanpool.app.jobs.remote import JobServices, LogSink
    from lanpool.app.runners.client import RunnerSession
    from lanpool.app.runs.dev import DevEnvironment
    from lanpool.app.runs.planning import Plan
    from lanpool.app.runs.resource_overrides import shown_resources
    from lanpool.app.runs.result import RunOutcome, Submitted
    from lanpool.app.runs.retention import DEFAULT_PRUNE_AGE, Removal, Retention, parse_age
    from lanpool.app.runs.sweep import SweepOutcome
    from lanpool.app.runs.sweep_follow import SweepFollower
    from lanpool.app.secret_store import SecretStore
    from lanpool.app.store.run_filter import RunFilter
    from lanpool.app.transfer.artifacts import Artifacts
    from lanpool.app.views.runs import Runs
    from lanpool.app.views.usage import Usage
    from lanpool.app.workflows import Project
    from lanpool.app.workflows.model import Scalar

log = logging.getLogger(__name__)

# Front ends import these from here (the Controller is their one door: never app.store).
__all__ = [
    "ARTIFACTS_REFUSED",
    "DEFAULT_PRUNE_AGE",
    "Controller",
    "JobRow",
    "LogSink",
    "Removal",
    "RunFilter",
    "RunOutcome",
    "Submitted",
    "parse_address",
    "parse_age",
    "shown_resources",
]


# Names front ends take from here that come from their modules on first use: `runners`, `key`
# and `status` of a home with nothing to refresh never load what runs and follows jobs.
_LATER = {
    "DEFAULT_PRUNE_AGE": "lanpool.app.runs.retention",
    "Removal": "lanpool.app.runs.retention",
    "RunFilter": "lanpool.app.store.run_filter",
    "parse_age": "lanpool.app.runs.retention",
    "LogSink": "lanpool.app.jobs.remote",
    "RunOutcome": "lanpool.app.runs.result",
    "Submitted": "lanpool.app.runs.result",
    "shown_resources": "lanpool.app.runs.resource_overrides",
}


def __getattr__(name: str) -> Any:
    module = _LATER.get(name)
    if module is not None:
        import importlib

        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Controller:
    DEFAULT_PORT = DEFAULT_PORT

    def __init__(self, home: ControllerHome | None = None) -> None:
        self.home = home or ControllerHome.default()
        self.home.create()
        self.store = Store(self.home.db)
        self.pool = Pool(self.store, self.home)  # light: it imports asyncssh when it first talks to a runner

    # Built on first use (start-up time, above): each imports its graph then.
    @cached_property
    def runs(self) -> "Runs":
        """Runs, jobs and their logs as the front ends read them."""
        from lanpool.app.views.runs import Runs

        return Runs(self.store, self.home)

    @cached_property
    def secrets(self) -> "SecretStore":
        """`${{ secrets.NAME }}` values: a 0600 file, never SQLite."""
        from lanpool.app.secret_store import SecretStore

        return SecretStore(self.home)

    @cached_property
    def retention(self) -> "Retention":
        """rm and prune of old runs (`run` and `status` never need it)."""
        from lanpool.app.runs.retention import Retention

        return Retention(self.store, self.home)

    @cached_property
    def artifacts(self) -> "Artifacts":
        from lanpool.app.transfer.artifacts import Artifacts

        return Artifacts(self.store, self.home)

    @cached_property
    def jobs(self) -> "JobServices":
        from lanpool.app.jobs.remote import JobServices

        return JobServices(
            self.store, lambda: self.artifacts, self.pool.connect, self.pool.runner_seen, self.secrets.masks_for_spec
        )

    @property
    def client_key(self) -> "asyncssh.SSHKey":
        return self.pool.client_key

    @property
    def public_key_file(self) -> Path:
        return self.pool.public_key_file

    def close(self) -> None:
        self.store.close()

    def disk_full(self, exc: BaseException) -> "LanpoolError | None":
        """`exc` as one line when it is a write this controller could not make for want of room."""
        from lanpool.app.store.store import disk_full

        return disk_full(exc, self.home.root)

    async def connect(self, host: str, port: int, *, trust: bool = False) -> "RunnerSession":
        return await self.pool.connect(host, port, trust=trust)

    async def add_runner(self, host: str, port: int) -> str:
        return await self.pool.add_runner(host, port)

    # -- runs ----------------------------------------------------------------------------

    def load_project(self, root: Path) -> "Project":
        from lanpool.app.workflows import load_workflows

        return load_workflows(root)

    def plan(
        self,
        project: "Project",
        workflow_name: str,
        overrides: dict[str, str] | None = None,
        no_cache: bool = False,
        reuse: bool = False,
        env: dict[str, str] | None = None,
        resources: dict[str, int | str] | None = None,
    ) -> "Plan":
        """What a run would do: each job of the DAG, run or reused, and why; `resources`
        (`--gpu/--cpu/--memory`) shown on the requested workflow's job, as `run` would send it."""
        plan = self._plan(self.store, project, workflow_name, overrides, no_cache, reuse, env)
        if resources:
            from lanpool.app.runs.resource_overrides import with_resources

            for planned in plan.jobs:
                if planned.workflow == workflow_name:
                    planned.job = with_resources(planned.job, resources)
        return plan

    def plan_in_thread(
        self,
        project: "Project",
        workflow_name: str,
        overrides: dict[str, str] | None = None,
        no_cache: bool = False,
        reuse: bool = False,
        env: dict[str, str] | None = None,
    ) -> "Plan":
        """`plan` for a worker thread (hashing the project's files can take a while): on its own connection."""
        return self.runs.in_own_store(
            lambda store: self._plan(store, project, workflow_name, overrides, no_cache, reuse, env)
        )

    def _plan(
        self,
        store: Store,
        project: "Project",
        workflow_name: str,
        overrides: dict[str, str] | None,
        no_cache: bool,
        reuse: bool,
        env: dict[str, str] | None = None,
    ) -> "Plan":
        from lanpool.app.runs.planning import make_plan
        from lanpool.app.secret_store import caller_values, secret_refs

        project.get(workflow_name)  # an unknown workflow: one line, before any hashing
        plan = make_plan(project, store, self.home, workflow_name, overrides or {}, no_cache, reuse, env)
        # A secret that is not set: one line naming it, before anything is sent.
        self.secrets.values_for(n for p in plan.to_run for n in secret_refs(p.job.env))
        caller_values(n for p in plan.to_run for n in p.job.passed_env)  # and a passed `- NAME` this shell lacks
        return plan

    def variables(self, project: "Project", workflow_name: str) -> dict[str, "Scalar"]:
        """Every variable a run of the workflow takes (its DAG's), with its default."""
        from lanpool.app.runs.planning import known_variables

        # Each default comes from Project.variables_of, a Scalar; planning hands them on as objects.
        return cast("dict[str, Scalar]", known_variables(project, workflow_name))

    async def run(
        self,
        project: "Project",
        workflow_name: str,
        runner_spec: str | None = None,
        overrides: dict[str, str] | None = None,
        *,
        sink: "LogSink | None" = None,
        say: Callable[[str], None] | None = None,
        on_submitted: "Callable[[Submitted], None] | None" = None,
        follow: bool = True,
        no_cache: bool = False,
        reuse: bool = False,
        tag: str | None = None,
        nodes: int | None = None,
        resume: str | None = None,
        ports: list[int] | None = None,
        env: dict[str, str] | None = None,
        max_duration_s: float | None = None,
        queue_timeout: float | None = None,
        resources: dict[str, int | str] | None = None,
        run_name: str | None = None,
        dev: "DevEnvironment | None" = None,
    ) -> "RunOutcome":
        """Run a workflow's plan: reused jobs are skipped, the others run in order, each
        getting its dependencies' artifacts, each a gang of its nodes (app/jobs/remote.py).

        With follow=False the single job to run is submitted and left running.
        `env`: `--env`/`--env-file` (app/runs/env_overrides.py), applied to every job of the run.
        `resources`: `--gpu/--cpu/--memory` over the requested workflow's (app/runs/resource_overrides.py);
        `run_name`: `--name`, refused when taken; `dev`: a dev environment (app/runs/dev.py).
        """
        # The loop lives in app/runs/loop.py, imported here: only `run` needs it (start-up time).
        from lanpool.app.runs.loop import RunLoop, RunRequest

        loop = RunLoop(self.store, self.home, self.pool, self.jobs, self.secrets, self.plan)
        request = RunRequest(
            workflow_name=workflow_name,
            runner_spec=runner_spec,
            overrides=overrides or {},
            follow=follow,
            no_cache=no_cache,
            reuse=reuse,
            tag=tag,
            nodes=nodes,
            resume=resume,
            ports=ports,
            env=env,
            max_duration_s=max_duration_s,
            queue_timeout=queue_timeout,
            resources=resources,
            run_name=run_name,
            dev=dev,
        )
        return await loop.run(project, request, sink, say or (lambda _text: None), on_submitted)

    async def sweep(
        self,
        project: "Project",
        workflow_name: str,
        specs: list[str],
        *,
        say: Callable[[str], None] | None = None,
        on_submitted: "Callable[[Submitted, dict[str, str]], None] | None" = None,
        slots: "asyncio.Semaphore | None" = None,
        **options: Any,
    ) -> "SweepOutcome":
        """`run --sweep VAR=V1,V2 ...` (else the workflow's `sweep:`): one run, one detached job per
        point (app/runs/sweep.py); `options` are Controller.run's. A point that ran before with the same
        inputs is reused unless `no_cache`. `slots`: at most that many points sent and not ended
        (`--max-parallel`): the caller follows the points and releases a slot as each ends."""
        from lanpool.app.runs.loop import RunLoop, RunRequest
        from lanpool.app.runs.sweep import grid_of, run_sweep

        request = RunRequest(workflow_name=workflow_name, **options)
        request = dataclasses.replace(request, reuse=not request.no_cache)
        known: dict[str, object] = dict(self.variables(project, workflow_name))
        grid = grid_of(project, workflow_name, specs, known, request.overrides)
        loop = RunLoop(self.store, self.home, self.pool, self.jobs, self.secrets, self.plan)
        return await run_sweep(loop, project, request, grid, known, say or (lambda _text: None), on_submitted, slots)

    def sweep_follower(
        self,
        project: "Project",
        workflow_name: str,
        *,
        max_parallel: int | None = None,
        judge: bool = True,
        say: Callable[[str], None] | None = None,
        on_end: "Callable[[JobRow, dict[str, str]], None] | None" = None,
    ) -> "SweepFollower":
        """What follows a sweep's points as `sweep` sends them (app/runs/sweep_follow.py): at most
        `max_parallel` not ended, and the workflow's `stop_worst` judged (unless not `judge`)."""
        from lanpool.app.runs.sweep_follow import SweepFollower

        spec = project.get(workflow_name).sweep
        return SweepFollower(
            self.store,
            lambda job_id: self.follow(job_id, follow=True),
            lambda job_id, why: self.stop(job_id, why=why),
            workflow_name,
            max_parallel=max_parallel,
            rule=spec.stop_worst if spec and judge else None,
            say=say or (lambda _text: None),
            on_end=on_end,
        )

    def sweep_plan(
        self, project: "Project", workflow_name: str, specs: list[str], overrides: dict[str, str], **options: Any
    ) -> "list[tuple[dict[str, str], Plan]]":
        """`plan --sweep ...` (else the workflow's `sweep:`): each point with its plan (`options`: plan's).
        A random sweep without a seed draws new points each time: its plan shows one draw."""
        from lanpool.app.runs.sweep import grid_of

        grid = grid_of(project, workflow_name, specs, dict(self.variables(project, workflow_name)), overrides)
        reuse = not options.pop("no_cache", False)
        return [
            (point, self.plan(project, workflow_name, {**overrides, **point}, not reuse, reuse, **options))
            for point in grid.points
        ]

    # -- jobs ------------------------------------------------------------------------------

    def node_count(self, job_id: str) -> int:
        """How many nodes the job runs on (1 for a single-node job)."""
        from lanpool.app.jobs.remote import RemoteJob

        return RemoteJob(self.jobs, job_id).size

    async def follow(
        self,
        job_id: str,
        sink: "LogSink | None" = None,
        follow: bool = True,
        say: Callable[[str], None] | None = None,
        node: int | None = None,
        from_store: bool = True,
        start: int | None = None,
        pull: bool = True,
        sessions: "list[RunnerSession] | None" = None,
    ) -> JobRow:
        """Bring the job's log into the store from where it stopped, and its final status.

        `from_store=False`: the sink gets only new lines (the TUI reads the stored tail itself),
        from `start` (node 0's line number; default: where the store ends now).
        With `follow`, waits until the job ends; a controller killed meanwhile
        resumes here later and loses nothing (the store knows its last line).
        A runner that goes away while followed is waited for, then re-attached.
        `sessions` (node k's at k) are used and left open.
        """
        from lanpool.app.jobs.remote import RemoteJob

        job = self.store.job(job_id)
        remote = RemoteJob(self.jobs, job_id)
        # Each node's log resumes where the store ended when we looked: lines another
        # process stores meanwhile come again from the runner (and are stored once), and
        # the sink gets every line once, whoever stores them.
        starts = remote.log_ends(start)
        if node is not None and not 0 <= node < remote.size:
            raise UsageError(
                f"job {job_id} runs on {remote.size} node(s): --node takes 0"
                + (f" to {remote.size - 1}" if remote.size > 1 else "")
                + f", not {node}"
            )
        if sink and from_store:  # what is already stored first, then the rest from the runner
            for chunk_node, seq, stream, data in self.store.log_chunks(job_id):
                if (node is not None and chunk_node != node) or seq >= starts.get(chunk_node, 0):
                    continue
                sink(job_id, stream, remote.shown(chunk_node, stream, data))
        if job.synced:
            return job
        return await remote.follow(
            sink,
            say or (lambda _t: None),
            follow=follow,
            only_node=node,
            starts=starts if sink else None,
            pull=pull,
            sessions=sessions,
        )

    async def stop(
        self, job_id: str, abort: bool = False, grace_s: float | None = None, why: str | None = None
    ) -> JobRow:
        """Stop every node of the job at once; it ends STOPPED/ABORTED as one. `why`: kept as the
        job's reason (a sweep's early stopping says its rank)."""
        if why:
            ended = await self._stop(job_id, abort, grace_s)
            if ended.state is JobState.STOPPED:
                self.store.set_job_status(job_id, ended.status, why, error=why)
            return self.store.job(job_id)
        return await self._stop(job_id, abort, grace_s)

    async def _stop(self, job_id: str, abort: bool, grace_s: float | None) -> JobRow:
        job = self.store.job(job_id)
        if job.state.is_terminal():
            return job
        if job.state is JobState.QUEUED and not job.runner:  # never left this controller: nothing to ask
            self.store.set_job_status(
                job_id, JobState.ABORTED, "cancelled while queued", finished_at=time.time(), synced=1
            )
            return self.store.job(job_id)
        from lanpool.app.jobs.remote import RemoteJob

        try:
            problems = await RemoteJob(self.jobs, job_id).stop(abort, grace_s)
        except NotFoundError:
            if job.state is not JobState.SUBMITTED:
                raise
            # Its `run` was cut off (killed) before any runner took it: nothing runs; it ends here.
            why = "it never reached a runner (its run was interrupted)"
            self.store.set_job_status(job_id, JobState.ABORTED, why, error=why, finished_at=time.time(), synced=1)
            return self.store.job(job_id)
        for problem in problems:
            log.warning("could not stop %s", problem)
        return await self.follow(job_id)

    async def refresh(self, jobs: list[JobRow], timeout_s: float = 5.0) -> None:
        """Bring non-terminal jobs up to date from their runners; unreachable ones stay as they are.
        One connection per runner, whatever the number of its jobs (the TUI refreshes every
        unfinished job every few seconds: 100 runners must stay cheap)."""
        self.pool.abort_orphaned(jobs)
        # A job queued here (no runner yet) is its `run` process's; one queued on a runner is asked.
        pending = [j for j in jobs if not j.synced and (j.state is not JobState.QUEUED or j.runner)]
        if not pending:
            return
        from lanpool.app.jobs.remote import RemoteJob

        nodes = {j.id: [(at.runner, at.host, at.port) for at in RemoteJob(self.jobs, j.id).nodes] for j in pending}
        sessions: dict[tuple[str, int], RunnerSession] = {}

        async def connect(runner: str, host: str, port: int) -> None:
            try:
                sessions[host, port] = await asyncio.wait_for(self.jobs.connect(host, port), timeout_s)
            except (LanpoolError, TimeoutError) as exc:
                log.info("could not refresh the jobs of %s: %s", runner, exc)
                if isinstance(exc, TimeoutError) or type(exc) is RunnerError:
                    self.store.set_runner(runner, state=RunnerState.OFFLINE)

        async def one(job: JobRow) -> None:
            if not nodes[job.id] or any((h, p) not in sessions for _r, h, p in nodes[job.id]):
                return  # a runner of its is not reachable now: left as it is
            mine = [sessions[h, p] for _r, h, p in nodes[job.id]]
            try:
                # The status only is timed; a pull takes as long as the bytes take (below).
                job = await asyncio.wait_for(self.follow(job.id, follow=False, pull=False, sessions=mine), timeout_s)
            except (LanpoolError, TimeoutError) as exc:
                log.info("could not refresh %s: %s", job.id, exc)
                return
            if job.state.is_terminal() and not job.synced:
                try:  # a slow transfer is not an offline runner; one cut off resumes next time
                    await self.follow(job.id, follow=False, sessions=mine)
                except LanpoolError as exc:
                    log.info("could not pull the artifacts of %s: %s", job.id, exc)

        runners = {(h, p): r for where in nodes.values() for r, h, p in where}
        try:
            await asyncio.gather(*(connect(r, h, p) for (h, p), r in runners.items()))
            await asyncio.gather(*(one(j) for j in pending))
        finally:
            for session in sessions.values():
                session.close()

    def metrics(self, job_id: str) -> list[dict[str, Any]]:
        """Metric points of a job (its "met" log stream): step, name, value, time."""
        from lanpool.app.views.overview import MetricsReader

        reader = MetricsReader(job_id)  # the one parser of metric lines (the TUI reads the same way)
        reader.update(self.store)
        return reader.points

    def usage(self, since_s: float, by: str) -> "Usage":
        """GPU-, CPU- and wall-hours of the jobs that ran in the last `since_s` seconds, a row per
        runner, workflow or run (app/views/usage.py): from the store alone, no runner asked."""
        from lanpool.app.views.usage import usage_of

        return usage_of(self.store, since_s, by)

    # -- artifacts --------------------------------------------------------------------------

    async def download_artifacts(
        self, job_id: str, output: Path, progress: Callable[[int, int], None] | None = None
    ) -> list[tuple[str, int]]:
        """Copy a job's artifacts to `output`; `progress(done_bytes, total_bytes)` after each file."""
        from lanpool.app.transfer.artifacts import PULL_BUSY_POLL_S
        from lanpool.app.transfer.pull import PullBusy

        job = self.store.job(job_id)
        while not job.artifacts_pulled and not job.synced:  # it may have ended while detached: ask
            try:
                job = await self.follow(job_id, follow=False)
            except PullBusy:  # another process (a `logs -f`, the TUI) is pulling them: wait for it
                await asyncio.sleep(PULL_BUSY_POLL_S)
                job = self.store.job(job_id)
                continue
            break
        if not job.artifacts_pulled and not job.state.is_terminal():
            raise UsageError(f"job {job_id} is still {job.status}: artifacts come back when it ends")
        return await self.artifacts.copy_out(job, output, progress)

    def downloads_dir(self, run_name: str) -> Path:
        """Where a run's artifacts are downloaded when no directory is given: outside the project."""
        return self.home.downloads(run_name)
