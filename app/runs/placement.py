"""Where a run's jobs go: each job on its own runner with room for it, and the run's connections."""

import asyncio
import dataclasses
from collections.abc import Callable

from lanpool.app.errors import UsageError
from lanpool.app.runners.client import RunnerSession
from lanpool.app.runners.pool import DEFAULT_PORT, DISCOVERY_WAIT_S, Pool, parse_address
from lanpool.app.runners.scheduler import Capacity, Need, place
from lanpool.app.runners.sessions import RunSessions
from lanpool.app.runners.views import RunnerState, RunnerView, bounded_props
from lanpool.app.runs.slurm_placement import fits, slurm_runner
from lanpool.app.workflows.resolve import ResolvedJob


class Placement:
    """Where a run's jobs go, and the run's connections (closed when it ends).

    Each job is placed on its own, sized by its own resources: a DAG's CPU step
    goes to a CPU box and its GPU step to the GPU box, the dependencies'
    artifacts moving through the controller's store (app/transfer/uploads.py). A gang
    gets its N runners at once. `--runner` pins every single-node job: a known
    name, or an address (connected to and trusted as `runners add` does); a job
    that can never fit the pinned runner is an error naming it."""

    def __init__(
        self,
        pool: Pool,
        spec: str | None,
        run_name: str,
        say: Callable[[str], None],
        queue_timeout: float | None = None,
    ) -> None:
        self.pool = pool
        self.queue_timeout = queue_timeout
        self.spec = spec
        self.run_name = run_name
        self.say = say
        self.address = parse_address(spec, DEFAULT_PORT) if pool.names_an_address(spec) else None
        self.sessions: dict[tuple[str, int], RunnerSession] = {}
        self.kept = RunSessions()  # the probes' sessions, connected to again by this run
        if pool.kept is None:  # (a second run placed at once, in the TUI, probes as before)
            pool.kept = self.kept

    async def check(self, jobs: list[ResolvedJob]) -> None:
        """Refuse the run before any job starts when one of them can never fit: the error
        names that job, what it needs and what the best runner has. (A run of one job
        is told the same by its own placement, so it is not probed twice.)"""
        if self.address is not None:
            for job in jobs:
                if job.nodes == 1:
                    await self._pinned_address(job)
            return
        if len(jobs) < 2:
            return
        views = await self.pool.refresh(wait_s=0 if self.pool.store.runners() else DISCOVERY_WAIT_S)
        pool = [v.capacity() for v in views]
        for job in jobs:
            if job.nodes > 1 and slurm_runner(views, job.resources, job.nodes, self._pinned_name(job)):
                continue  # one Slurm runner takes all its nodes
            decision = place(Need.of(job.resources, job), pool, nodes=job.nodes, pinned=self._pinned_name(job))
            if decision.rejected:
                raise UsageError(f"cannot run {job.workflow}: {decision.rejected}")

    async def sessions_for(self, job: ResolvedJob, job_id: str) -> tuple[list[RunnerSession], list[str]]:
        """Node k's session at k, and the address node k is reached at."""
        if job.nodes == 1 and self.address is not None:
            session = await self._pinned_address(job)
            return [session], [self.address[0]]
        if job.nodes > 1:
            whole = await self._slurm_session(job)
            if whole is not None:
                return whole
        hosts = await self.pool.choose_runners(
            self._pinned_name(job),
            Need.of(job.resources, job),
            job.nodes,
            self.run_name,
            job_id,
            job.workflow,
            self.say,
            self.queue_timeout,
        )
        new = [h for h in dict.fromkeys(hosts) if h not in self.sessions]
        # A gang's runners connected to at once; those that answered are closed with the run.
        opened = await asyncio.gather(*(self.pool.connect(*h) for h in new), return_exceptions=True)
        self.sessions.update((h, s) for h, s in zip(new, opened, strict=True) if isinstance(s, RunnerSession))
        for failed in (s for s in opened if isinstance(s, BaseException)):
            raise failed
        return [self.sessions[h] for h in hosts], [host for host, _port in hosts]

    async def one_runner(self, jobs: list[ResolvedJob], job_id: str) -> tuple[list[RunnerSession], list[str]] | None:
        """One runner that can take every job of a detached DAG (each in turn: its capacity
        fits the largest need of each resource), its session and address; None when no one
        runner can (the steps need different runners)."""
        need = Need(
            max(Need.of(j.resources).gpu for j in jobs),
            max(Need.of(j.resources).cpu for j in jobs),
            max(Need.of(j.resources).memory_mb for j in jobs),
        )
        if self.address is None:
            views = await self.pool.refresh(wait_s=0 if self.pool.store.runners() else DISCOVERY_WAIT_S)
            pinned = self._pinned_name(jobs[0])
            # Each step must be one it can run (containers, Python), besides the largest need of each resource.
            able = [
                c for c in (v.capacity() for v in views) if not any(c.cannot_run(Need.of(j.resources, j)) for j in jobs)
            ]
            if not able or place(need, able, pinned=pinned, runner_queues=True).rejected:
                return None
        resources = {"gpu": need.gpu, "cpu": need.cpu, "memory_mb": need.memory_mb}
        largest = dataclasses.replace(jobs[0], resources={k: v for k, v in resources.items() if v}, nodes=1)
        if self.address is not None:
            for job in jobs:  # each must fit the pinned runner (an error names the one that cannot)
                await self._pinned_address(job)
        return await self.sessions_for(largest, job_id)

    async def _slurm_session(self, job: ResolvedJob) -> tuple[list[RunnerSession], list[str]] | None:
        """A Slurm runner that runs all of a multi-node job's nodes as one job (one Slurm
        allocation; app/runs/slurm_placement.py), if one fits; None: the job goes to N runners.
        `--runner HOST:PORT` names the one, as a known name does."""
        if self.address is not None:
            return await self._slurm_address(job)
        views = await self.pool.refresh(wait_s=0 if self.pool.store.runners() else DISCOVERY_WAIT_S)
        view = slurm_runner(views, job.resources, job.nodes, self._pinned_name(job))
        if view is None:
            return None
        if (view.host, view.port) not in self.sessions:
            self.sessions[view.host, view.port] = await self.pool.connect(view.host, view.port)
        self.say(f"{job.workflow}: its {job.nodes} nodes run as one Slurm job on runner {view.name}")
        return [self.sessions[view.host, view.port]], [view.host]

    async def _slurm_address(self, job: ResolvedJob) -> tuple[list[RunnerSession], list[str]] | None:
        assert self.address is not None
        if self.address not in self.sessions:  # naming it trusts it, as for a single-node job
            self.sessions[self.address] = await self.pool.connect(*self.address, trust=True)
        session = self.sessions[self.address]
        if not fits(bounded_props(dict(session.hello.resources)), job.resources, job.nodes):
            return None
        self.say(f"{job.workflow}: its {job.nodes} nodes run as one Slurm job on runner {session.hello.name}")
        return [session], [self.address[0]]

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()
        if self.pool.kept is self.kept:
            self.pool.kept = None
        self.kept.close()

    def _pinned_name(self, job: ResolvedJob) -> str | None:
        """The known runner `--runner` names, if any; a gang is pinned only by a known name."""
        if self.spec is None or self.address is not None:
            return None
        if job.nodes > 1 and self.pool.store.runner(self.spec) is None:
            return None
        return self.spec

    async def _pinned_address(self, job: ResolvedJob) -> RunnerSession:
        """The session with `--runner HOST:PORT` (naming it trusts it), once it is known the
        job could ever fit there (by the resources its Hello reports)."""
        assert self.address is not None
        if self.address not in self.sessions:
            self.sessions[self.address] = await self.pool.connect(*self.address, trust=True)
        session = self.sessions[self.address]
        decision = place(Need.of(job.resources, job), [hello_capacity(session)], pinned=session.hello.name)
        if decision.rejected:
            raise UsageError(f"cannot run {job.workflow}: {decision.rejected}")
        return session


def hello_capacity(session: RunnerSession) -> Capacity:
    """A runner as its Hello describes it (just connected to, and trusted by naming it)."""
    props = bounded_props(dict(session.hello.resources))
    view = RunnerView(session.hello.name, "", 0, "manual", RunnerState.LIVE, props, None, 0, trusted=True)
    return view.capacity()
