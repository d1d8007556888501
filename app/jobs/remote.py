"""One job on its runners: a gang of N >= 1 nodes, node k on runner k.

Every job is one: a single-node job is a gang of one, with one job_nodes row.
`RemoteJob` follows, stops and brings back the artifacts of 1..N nodes (it is
made by app/jobs/submit.py's submit_job), so a fix lands once. What the size changes is said here, once:
- env: a gang of N > 1 is wired for torch.distributed (app/jobs/multinode.py);
- status: a gang of one's status is its node's, recorded as the runner says
  it; a bigger gang is RUNNING once its runners started every node, and ends as
  one (DONE, the first node's failure, or STOPPED/ABORTED when each unfinished
  node was stopped on request).
The runners start, retry and stop a bigger gang's nodes together (agent/gang/hub.py):
following one never coordinates it. A runner lost while followed is waited for (the
job may still run there) until every other node has ended; a bigger gang's runners
count a node lost on their own.

A job with no job_nodes row yet (between its jobs row and its runner accepting
it, or seeded by a test) is node 0 on the jobs row's runner.

A Slurm runner runs a multi-node job's N nodes as ONE job there (app/store/slurm_nodes.py): it
has N node rows like any gang (`--node`, the TUI's node switch, `exec --node`), but one
runner job is followed and stopped, its status is the job's, and its one log's lines go
to their node's rows by the tag the runner's node script put on them.
"""

from __future__ import annotations  # runner sessions, artifacts, uploads: types only here (start-up time)

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import field
from typing import TYPE_CHECKING, Any

from lanpool.app.errors import (
    HostKeyMismatch,
    LanpoolError,
    NotFoundError,
    RunnerError,
    RunnerProtocolError,
    RunnerRefused,
    UsageError,
)
from lanpool.app.jobs.multinode import prefix_node
from lanpool.app.secret_store import mask
from lanpool.app.store import JobRow, Store
from lanpool.app.store.slurm_nodes import by_node, slurm_nodes
from lanpool.protocol import JobState
from lanpool.protocol.message_base import Record, record

if TYPE_CHECKING:  # `status`/`logs` of stored jobs use RemoteJob without the SSH stack
    from lanpool.app.runners.client import RunnerSession
    from lanpool.app.store.log_batch import LogBatch
    from lanpool.app.transfer.artifacts import Artifacts
    from lanpool.app.transfer.uploads import WorkspaceFiles
    from lanpool.app.workflows.resolve import ResolvedJob
    from lanpool.protocol import JobStatus

log = logging.getLogger(__name__)

RECONNECT_S = 2.0  # how often a followed job's offline runner is tried again

Connect = Callable[[str, int], Awaitable["RunnerSession"]]  # a session with a trusted runner
LogSink = Callable[[str, str, bytes], None]  # (job_id, stream, data) for each chunk of new log lines
Say = Callable[[str], None]


@record
class JobServices(Record):
    """What a RemoteJob works with: the store, the artifacts, a way to reach a trusted runner,
    and a way to record a runner's liveness (the pool's)."""

    store: Store
    # Built on first call: the artifact stack costs ~50 ms of imports that `logs` and `status`
    # of stored jobs never use; only a job's end pulls artifacts.
    artifacts: Callable[[], Artifacts]
    connect: Connect
    runner_seen: Callable[[str, bool], None]  # (runner, answers): LIVE again or OFFLINE
    # The job's stored env (secrets as placeholders) -> the texts to mask in its log (app/secret_store.py).
    masks: Callable[[dict[str, str], list[str]], list[str]] = lambda _env, _passed: []


@record
class NodeAt(Record):
    """Where one node of a job runs: the runner's name and address."""

    node: int
    runner: str
    host: str
    port: int

    def row(self) -> dict[str, Any]:
        return {"name": self.runner, "host": self.host, "port": self.port}


@record
class Launch(Record):
    """What a job is submitted with."""

    job_id: str
    run_name: str
    job: ResolvedJob
    files: WorkspaceFiles  # the snapshot and the reused inputs, by content
    snapshot_digest: str = ""
    cache_key: str | None = None
    cache_inputs: dict[str, Any] | None = None
    secrets: dict[str, str] = field(default_factory=dict)  # NAME -> value, for the SubmitJob only
    passed: dict[str, str] = field(default_factory=dict)  # the caller's `- NAME` values, for the SubmitJob only


def _cause(status: JobStatus) -> str:
    """Why a node's part did not succeed ("" when it did, or has not ended)."""
    if status.state == JobState.DONE or not JobState(status.state).is_terminal():
        return ""
    return status.error or f"{status.state.lower()} with exit code {status.exit_code}"


class RemoteJob:
    """A job on its N >= 1 nodes; see the module docstring."""

    def __init__(self, jobs: JobServices, job_id: str, nodes: list[NodeAt] | None = None) -> None:
        self.jobs = jobs
        self.store = jobs.store
        self.job_id = job_id
        job = self.store.job(job_id)
        spec = json.loads(job.spec or "{}")
        self.slurm = slurm_nodes(job.spec)  # N > 1: one job on a Slurm runner runs all N nodes
        self.size = max(1, int(spec.get("nodes") or 1), self.slurm)  # nodes
        self.masks = jobs.masks(
            spec.get("env") or {}, spec.get("passed_env") or []
        )  # secrets echoed by the job: stored and shown as ***
        # The runner jobs followed and stopped: node k's on runner k, or a Slurm job's one.
        self.nodes = nodes if nodes is not None else self._recorded_nodes(job)
        self.size = max(self.size, len(self.nodes))
        self.parts = 1 if self.slurm else self.size
        self.say: Say = lambda _text: None  # the follower's, for what a user should hear

    def _recorded_nodes(self, job: JobRow) -> list[NodeAt]:
        rows = self.store.nodes(self.job_id)[: 1 if self.slurm else None]
        if not rows and (self.size == 1 or self.slurm) and job.runner:
            return [NodeAt(0, job.runner, job.host, job.port)]
        return [NodeAt(r["node"], r["runner"], r["host"], r["port"]) for r in rows]

    def log_ends(self, start: int | None = None) -> dict[int, int]:
        """Where each node's stored log ends (node -> seq), `start` for node 0's when given. A
        Slurm job's nodes share its one log's line numbers: each resumes after the last stored."""
        if self.slurm:
            end = start if start is not None else self.store.one_log_end(self.job_id, self.size)
            return dict.fromkeys(range(self.size), end)
        ends = {at.node: self.store.log_end(self.job_id, at.node) for at in self.nodes}
        if start is not None:
            ends[0] = start
        return ends

    def shown(self, node: int, stream: str, data: bytes) -> bytes:
        """Log bytes as a front end shows them: a bigger gang's tagged `[node K]` (metrics are data)."""
        return data if self.size == 1 or stream == "met" else prefix_node(node, data)

    # -- status ---------------------------------------------------------------------------

    def _note(self, node: int, status: JobStatus | None, cause: str = "") -> None:
        """Record node `node`'s status (None: lost, with `cause`); a gang of one's is the job's status."""
        if status is not None and self.parts == 1:
            self._record_status(status)
        at = self.nodes[node]
        if status is None:
            for k in self._rows_of(node):
                self.store.set_node(self.job_id, k, at.row(), JobState.LOST, None, cause)
            return
        known = next((r for r in self.store.nodes(self.job_id) if r["node"] == node), None)
        if known and JobState(known["status"]).is_terminal() and not JobState(status.state).is_terminal():
            return  # a stale "still running" after the end was recorded: the end stands
        for k in self._rows_of(node):
            self.store.set_node(self.job_id, k, at.row(), status.state, status.exit_code, _cause(status))
        if self.parts > 1 and status.attempt > self.store.job(self.job_id).retries:  # the gang started again
            self.store.update_job(self.job_id, retries=status.attempt)
        if self.parts > 1 and status.state == JobState.RUNNING and self.store.job(self.job_id).state is JobState.QUEUED:
            # A detached gang left its runners' queues (they start its nodes together).
            self.store.set_job_status(
                self.job_id, JobState.RUNNING, f"on {self.size} nodes", error="", started_at=status.started_at
            )

    def _rows_of(self, node: int) -> range:
        """The node rows a runner job's status is for: its own, or all of a Slurm job's."""
        return range(self.size) if self.slurm else range(node, node + 1)

    def _record_status(self, status: JobStatus) -> None:
        if status.job_id != self.job_id:  # a runner writes only the state of the job it was asked about
            raise RunnerProtocolError(
                f"a runner answered with the status of job {status.job_id!r} for job {self.job_id}: not recorded"
            )
        if not JobState(status.state).is_terminal() and self.store.job(self.job_id).state.is_terminal():
            # A stale "still running" (e.g. stop's immediate reply, processed late) arriving
            # after a follower recorded the end: the end stands. Checking the state, not only
            # `synced`, closes the window between recording the end and pulling artifacts.
            return
        fields: dict[str, object] = {
            "retries": status.attempt,
            "exit_code": status.exit_code,
            "started_at": status.started_at,
            "finished_at": status.finished_at,
        }
        if status.error:
            fields["error"] = status.error
        elif not JobState(status.state).is_terminal() or status.state == JobState.DONE:
            # Why it waits in the runner's queue, or "retry 1 of 3"; a clean end leaves no stale reason.
            fields["error"] = "" if status.state == JobState.DONE else status.reason
        self.store.set_job_status(self.job_id, status.state, detail="", **fields)

    # -- follow -------------------------------------------------------------------------------

    async def _wait_for_nodes(self, follow: bool) -> None:
        """A gang still being submitted (by the run that started it) gets its nodes' rows one by one."""
        while len(self.nodes) < self.parts and follow and not self.store.job(self.job_id).state.is_terminal():
            await asyncio.sleep(0.5)
            self.nodes = self._recorded_nodes(self.store.job(self.job_id))
        if not self.nodes or [n.node for n in self.nodes] != list(range(len(self.nodes))):
            raise RunnerError(f"job {self.job_id} has no complete record of its nodes: it did not start on all of them")

    async def follow(
        self,
        sink: LogSink | None,
        say: Say,
        *,
        follow: bool = True,
        only_node: int | None = None,
        starts: dict[int, int] | None = None,
        sessions: list[RunnerSession] | None = None,
        pull: bool = True,
    ) -> JobRow:
        """Store, show and (for a bigger gang) tag every node's log from `starts` (node -> seq;
        a node not in it from its first line; None: from where the store ends). With follow:
        until every node ended, then bring back the artifacts and record the end. Without:
        bring the logs and statuses up to date, and finish the job if every node has ended
        (without `pull`: its end is recorded, the artifacts left for a later call, which a
        caller can give all the time they take). `sessions` (node k's at k) are used and
        left open; those opened here are closed."""
        self.say = say
        await self._wait_for_nodes(follow)
        if only_node is not None and not 0 <= only_node < self.size:
            raise UsageError(f"job {self.job_id} has nodes 0 to {self.size - 1}, not {only_node}")
        live: dict[int, RunnerSession] = dict(enumerate(sessions or []))
        given = set(live.values())
        try:
            if not live and not (follow and self.parts == 1):  # one not reachable now: said, the job left as is
                for at in self.nodes:
                    live[at.node] = await self.jobs.connect(at.host, at.port)
            followers = [
                self._follow_node(
                    at,
                    live,
                    sink,
                    None if starts is None else starts.get(at.node, 0),
                    follow,
                    only_node,
                )
                for at in self.nodes
            ]
            if follow:
                return await self._follow_all(followers, live)
            finals: dict[int, JobStatus | None] = {}
            for at, follower in zip(self.nodes, followers, strict=False):
                finals[at.node] = await follower
            if not all(s is not None and JobState(s.state).is_terminal() for s in finals.values()):
                return self.store.job(self.job_id)
            return await self._finish(live, finals, self._failure(finals), pull, follow=False)
        finally:
            for session in live.values():
                if session not in given:
                    session.close()

    async def _follow_all(
        self, followers: list[Coroutine[Any, Any, JobStatus]], live: dict[int, RunnerSession]
    ) -> JobRow:
        """Follow every node to its end; the first to fail stops the others."""
        tasks = {asyncio.ensure_future(f): at for f, at in zip(followers, self.nodes, strict=False)}
        finals: dict[int, JobStatus | None] = {}
        failure = ""
        pending = set(tasks)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    at = tasks[task]
                    try:
                        status, cause = task.result(), ""
                    except RunnerProtocolError as exc:  # it answered, with something unusable
                        if self.parts == 1:
                            state = self.store.job(self.job_id).status
                            raise RunnerProtocolError(
                                f"{exc.message}; stopped following job {self.job_id} (left {state} here)"
                            ) from None
                        status, cause = None, exc.message
                    except LanpoolError as exc:
                        if self.parts == 1:
                            raise
                        status, cause = None, f"runner {at.runner} lost: {exc.message}"
                    finals[at.node] = status
                    if status is None:
                        self._note(at.node, None, cause)
                    cause = cause or (_cause(status) if status is not None else "")
                    if cause and not failure and self.parts > 1:
                        failure = f"node {at.node} ({at.runner}): {cause}"
                        if pending:
                            self.say(f"{failure}; its runners stop the other nodes")
        finally:
            for task in pending:  # interrupted (Ctrl-C): the nodes keep running on their runners
                task.cancel()
        return await self._finish(live, finals, failure)

    async def _follow_node(
        self,
        at: NodeAt,
        live: dict[int, RunnerSession],
        sink: LogSink | None,
        start: int | None,
        follow: bool,
        only_node: int | None,
    ) -> JobStatus:
        pending = self.store.log_batch()  # one commit per 0.25 s, not per batch (app/store/log_batch.py)
        try:
            return await self._follow_node_into(pending, at, live, sink, start, follow, only_node)
        finally:
            pending.flush()

    async def _follow_node_into(
        self,
        pending: LogBatch,
        at: NodeAt,
        live: dict[int, RunnerSession],
        sink: LogSink | None,
        start: int | None,
        follow: bool,
        only_node: int | None,
    ) -> JobStatus:
        """Store node `at`'s log from `start` (default: where the store ends) and pass it to
        `sink` (only node `only_node`'s lines, when given); returns its final status (with follow=False: its status now).
        A gang of one rides out its runner's outages (OFFLINE, then re-attach): the session
        it reconnects with goes into `live`."""
        from lanpool.app.jobs.own_output import (
            OwnOutput,  # the message classes: only a follow needs them (start-up time)
        )

        position = self.log_ends()[at.node] if start is None else start
        offline_since = None
        session = live.get(at.node)
        while True:
            try:
                if session is None:
                    session = live[at.node] = await self.jobs.connect(at.host, at.port)
                    if offline_since is not None:
                        self.say(f"runner {at.runner} is back after {time.time() - offline_since:.0f}s: re-attached")
                        self.jobs.runner_seen(at.runner, True)
                own = OwnOutput(self.job_id, at.node, session.where)
                async for batch in session.attach(self.job_id, position, follow=follow, states=True):
                    rows, final = own.take(batch)
                    if self.slurm and rows:
                        rows = by_node(rows, self.size)
                    if rows and self.masks:
                        rows = [(*r[:5], mask(r[5], self.masks), *r[6:]) for r in rows]  # r[6]: the runner's time
                    if rows:
                        position = max(position, max(r[2] + r[3] for r in rows))
                        pending.add(rows)
                        if sink and only_node is not None:
                            rows = [r for r in rows if r[1] == only_node]
                        if sink and rows:
                            # Sinks that read what was stored (app/views/log_select.py; metrics, which the TUI's
                            # charts read back) get it committed first; plain lines wait for the batch.
                            if getattr(sink, "reads_the_store", False) or any(r[4] == "met" for r in rows):
                                pending.flush()
                            for row in rows:
                                sink(self.job_id, row[4], self.shown(row[1], row[4], row[5]))
                    if final is not None:
                        pending.flush()  # every line before a status is stored before it
                        self._note(at.node, final)
                        if not follow or JobState(final.state).is_terminal():
                            return final
                raise RunnerError(f"node {at.node}: the log stream ended before the job")
            except (RunnerRefused, HostKeyMismatch, NotFoundError, RunnerProtocolError):
                raise  # the runner answered: asking again gets the same answer
            except RunnerError as exc:
                if not follow or (self.parts > 1 and self._others_ended(at.node)):
                    raise
                session = None
                if offline_since is None:
                    offline_since = time.time()
                    self.jobs.runner_seen(at.runner, False)
                    self.say(
                        f"runner {at.runner} went offline ({exc.message}); waiting for it to come back "
                        "(the job may still run there; Ctrl-C detaches)"
                    )
                await asyncio.sleep(RECONNECT_S)

    def _others_ended(self, node: int) -> bool:
        """Whether every node but `node` has ended (a lost runner is then waited for no longer)."""
        rows = [r for r in self.store.nodes(self.job_id) if r["node"] != node]
        return len(rows) >= self.parts - 1 and all(JobState(r["status"]).is_terminal() for r in rows)

    def _failure(self, finals: dict[int, JobStatus | None]) -> str:
        failed = [(k, s) for k, s in sorted(finals.items()) if s is not None and _cause(s)]
        if not failed or self.parts == 1:
            return ""
        k, s = failed[0]
        return f"node {k} ({self.nodes[k].runner}): {_cause(s)}"

    async def _finish(
        self,
        live: dict[int, RunnerSession],
        finals: dict[int, JobStatus | None],
        failure: str,
        pull: bool = True,
        follow: bool = True,
    ) -> JobRow:
        """Every node ended: its artifacts and its end (app/jobs/end.py); a follower waits for
        another process pulling them, a refresh does not."""
        from lanpool.app.jobs.end import finish_job  # with the artifacts' pull (start-up time: imports above)

        return await finish_job(
            self.store, self.jobs.artifacts(), self.job_id, self.parts, live, finals, failure, pull, wait=follow
        )

    # -- stop ------------------------------------------------------------------------------

    async def stop(self, abort: bool, grace_s: float | None) -> list[str]:
        """Ask every node's runner to stop its part of the job, all at once; returns the
        problems (a node whose runner cannot be reached is left to the failure handling).
        When no runner could be asked, the first problem is raised."""

        async def one(at: NodeAt) -> LanpoolError | None:
            try:
                async with await self.jobs.connect(at.host, at.port) as session:
                    self._note(at.node, await session.stop(self.job_id, abort, grace_s))
                return None
            except LanpoolError as exc:
                return exc

        errors = await asyncio.gather(*(one(at) for at in self.nodes))
        failed = [(at, e) for at, e in zip(self.nodes, errors, strict=False) if e is not None]
        if failed and len(failed) == len(self.nodes):
            raise failed[0][1]
        return [f"node {at.node} ({at.runner}): {e.message}" for at, e in failed]
