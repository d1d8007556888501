"""Detached gangs: the members of a multi-node job start together, with no controller alive.

The controller submits member k of a gang to runner k (SubmitJob.gang): the
gang's id and size, the member's rank, node 0's agent address and pinned host
key, a secret token the controller draws per gang, and the gang's order (the
controller's clock at submit). Each member waits in its runner's queue like any
job. When it reaches the head and fits, its runner RESERVES what it needs
(agent.jobs.manager: the job stays QUEUED, holding its GPUs, CPUs and memory) and tells
node 0's agent, the coordinator. When every rank is reserved the coordinator
picks MASTER_PORT and sends Go to all, and starts node 0: only then does any
member's process start.

No deadlock: every runner puts gang members in the gang order (ahead of later
gangs), holds one gang reservation at a time, and the coordinator releases a
gang whose reservations waited LANPOOL_GANG_RESERVE_S (60) without Go; each
member goes back in line after a random backoff, so two gangs over the same
runners cannot keep blocking each other.

While the gang runs, each member's connection to the coordinator stays open:
a member ending FAILED or LOST is relayed to the others, which stop ("node K
failed"); a member that loses the coordinator tries to re-join it (backoff) for
LANPOOL_GANG_LOST_S (60), then stops; node 0 likewise waits that long for a
member whose connection dropped to come back before it counts that node lost.

Retries are the gang's: a node never runs again alone (its rank could not rejoin
the others' collectives). A node whose run ends into a retry (agent.jobs.end)
goes back in its queue as attempt N and says so (`again`); the coordinator then
stops every other node into the same attempt (JobManager.restart), and all meet
at the barrier again, as at the first start. A node lost for good, with `lost`
in its retry, restarts the others the same way. Every message at the barrier
names its attempt, so a member's word from an earlier attempt never counts.

Trust: members reach node 0's agent over SSH with the host key the controller
pinned (never trust on first use), as user `gang-<gang id>` with the token as
password. Node 0 keeps only the token's sha256 (compared in constant time);
such a connection may open only the `lanpool-gang` subsystem of its own gang:
no submit, no logs, no files, no exec, no forwarding (agent.ssh.server). A
member keeps the token in its job's private dir (agent.gang.token), so one whose
agent restarted before Go re-joins the barrier, and one whose container outlived a restart
after Go re-joins the running gang (`adopted`).
"""

import asyncio
import dataclasses
import hashlib
import hmac
import logging
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

import asyncssh

from lanpool.agent.gang.channel import Lines, connect_node0, open_barrier, until_end
from lanpool.agent.gang.token import read_token
from lanpool.agent.jobs.env import free_port
from lanpool.agent.jobs.job import Job
from lanpool.agent.jobs.launch import read_request
from lanpool.agent.jobs.limits import retries
from lanpool.agent.jobs.manager import JobManager
from lanpool.protocol import GangSpec, JobState
from lanpool.protocol.errors import ProtocolError

log = logging.getLogger(__name__)

# A node's end that ends its gang (none may run on alone): anything but DONE, each said so.
_ENDS_THE_GANG = {
    JobState.FAILED.value: "failed",
    JobState.LOST.value: "was lost",
    JobState.STOPPED.value: "was stopped",
    JobState.ABORTED.value: "was aborted",
}


def _seconds(name: str, default: float) -> float:
    try:
        return max(0.1, float(os.environ.get(name, default)))
    except ValueError:
        return default


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest() if token else ""


@dataclass
class _Gang:
    """Node 0's view of one gang: which ranks are reserved, and their channels."""

    gang_id: str
    size: int
    ready: set[int] = field(default_factory=set)
    members: dict[int, Lines] = field(default_factory=dict)
    started: bool = False
    ended: bool = False
    timer: asyncio.TimerHandle | None = None
    attempt: int = 0  # the jobs' attempt this gang meets for (JobRecord.attempt)
    failed: bool = False  # a node's end stopped the others (said once)


class GangHub:
    """Both sides of the gang barrier on one agent: coordinator for its rank-0 jobs, member for the others."""

    def __init__(self, manager: JobManager) -> None:
        self.manager = manager
        self.reserve_s = _seconds("LANPOOL_GANG_RESERVE_S", 60.0)
        self.lost_s = _seconds("LANPOOL_GANG_LOST_S", 60.0)
        self._gangs: dict[str, _Gang] = {}
        self._tries: dict[str, int] = {}  # releases per gang: the backoff grows with them
        self._tasks: set[asyncio.Task[None]] = set()
        manager.on_reserved = self.reserved
        manager.on_adopted = self.adopted
        manager.on_requeued = self.requeued

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _backoff(self, gang_id: str) -> float:
        tries = self._tries[gang_id] = self._tries.get(gang_id, 0) + 1
        return min(300.0, self.reserve_s * min(tries, 5) / 2) * random.uniform(0.5, 1.5)

    # -- node 0: the coordinator ------------------------------------------------

    def _leader(self, gang_id: str) -> Job | None:
        for job in self.manager.jobs.values():
            rec = job.record
            if rec.gang_id == gang_id and rec.gang_rank == 0 and not rec.terminal:
                return job
        return None

    def authorize(self, gang_id: str, token: str, peer: str) -> bool:
        """Whether `token` is the token of gang `gang_id`, led by a job of this runner that has not ended."""
        leader = self._leader(gang_id)
        expected = leader.record.gang_token_hash if leader is not None else ""
        ok = bool(expected) and hmac.compare_digest(expected, token_hash(token))
        if not ok:
            log.warning("refused a gang connection from %s: %s", peer, "wrong token" if leader else "unknown gang")
        return ok

    def _gang(self, leader: Job) -> _Gang:
        rec = leader.record
        gang = self._gangs.get(rec.gang_id)
        if gang is None or gang.ended:
            gang = self._gangs[rec.gang_id] = _Gang(rec.gang_id, rec.gang_size, attempt=rec.attempt)
        return gang

    def _restart(self, gang: _Gang, leader: Job, attempt: int, reason: str, origin: int) -> None:
        """Attempt `attempt` for every node: each running one is stopped into it, the ones at the
        barrier let go; `origin` (a node already on its way there) is not told."""
        if gang.ended or attempt <= gang.attempt:
            return  # already under way (each node may say it), or the job ended
        log.info("gang %s: %s: every node starts again (attempt %d)", gang.gang_id, reason, attempt)
        gang.ended = True
        if gang.timer is not None:
            gang.timer.cancel()
        for rank, lines in list(gang.members.items()):
            if rank != origin:
                lines.send(again=attempt, why=reason)
        # The new attempt's gang first: node 0's restart below may take its reservation at once.
        self._gangs[gang.gang_id] = _Gang(gang.gang_id, gang.size, attempt=attempt)
        if origin != 0:
            self.manager.restart(leader, attempt, reason)

    def requeued(self, job: Job) -> None:
        """A node's run ended into a retry (agent.jobs.end): node 0's restarts the gang here; a
        member's says so on its channel (_run_member)."""
        rec = job.record
        gang = self._gangs.get(rec.gang_id)
        if rec.gang_rank == 0 and gang is not None and gang.attempt < rec.attempt:
            self._restart(gang, job, rec.attempt, f"node 0 {_clean(rec.last_end) or 'ended'}", origin=0)

    async def serve(self, process: "asyncssh.SSHServerProcess[bytes]", gang_id: str) -> None:
        """A member's channel to this coordinator: Ready(rank), then its end, until it closes."""
        lines = Lines(process.stdin, process.stdout)
        leader = self._leader(gang_id)
        hello = await lines.read() or {}
        rank, back = hello.get("ready"), hello.get("running")  # Running: a started member re-joins
        rank = back if rank is None else rank
        attempt = hello.get("attempt", 0)
        if (
            leader is None
            or not isinstance(rank, int)
            or not 0 < rank < leader.record.gang_size
            or not isinstance(attempt, int)
            or isinstance(attempt, bool)
            or not 0 <= attempt <= leader.record.retry_limit + 1
        ):
            log.warning("gang %s: a member sent no valid Ready: closing", gang_id)
            process.exit(1)
            return
        gang = self._gang(leader)
        if attempt > gang.attempt:  # it went back in line before its word on its old channel came
            self._restart(gang, leader, attempt, f"node {rank} starts again", origin=rank)
            gang = self._gang(leader)
        if attempt < gang.attempt:  # a member still at an earlier attempt: it joins the new one
            lines.send(again=gang.attempt, why="its gang started again")
            process.exit(0)
            return
        if back is None and (rank in gang.members or gang.started):
            log.warning("gang %s: rank %d is already here (or the gang started): closing", gang_id, rank)
            process.exit(1)
            return
        if back is not None and not self._rejoined(gang, leader):
            log.warning("gang %s: rank %d re-joins a gang that has not started: closing", gang_id, rank)
            process.exit(1)
            return
        gang.members[rank] = lines
        if back is None:
            gang.ready.add(rank)
            self._arm(gang)
            self._check(gang, leader)
        said_end = False
        try:
            while (msg := await lines.read()) is not None:
                state, again = msg.get("end"), msg.get("again")
                said_end = said_end or isinstance(state, str) or isinstance(again, int)
                if isinstance(again, int) and not isinstance(again, bool) and gang.attempt < again <= attempt + 1:
                    why = f"node {rank} {_clean(msg.get('why')) or 'ended'}"
                    self._restart(gang, leader, again, why, origin=rank)
                elif gang.started and isinstance(state, str) and state in _ENDS_THE_GANG:
                    why = _clean(msg.get("why"))  # e.g. its agent shut down, max_duration reached
                    self._fail(gang, leader, rank, _ENDS_THE_GANG[state] + (f" ({why})" if why else ""))
        except (OSError, asyncssh.Error, ConnectionError):
            pass
        finally:
            if gang.members.get(rank) is lines:  # not a newer channel of the same rank
                gang.members.pop(rank)
                gang.ready.discard(rank)
            process.exit(0)
        if gang.started and not gang.ended and not said_end and rank not in gang.members:  # LOST, unless back soon
            deadline = time.monotonic() + self.lost_s
            while not gang.ended and rank not in gang.members and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
            if not gang.ended and not leader.record.terminal and rank not in gang.members:
                what = f"was lost (its agent gone, not back within {self.lost_s:.0f}s)"
                rec = leader.record
                if retries(rec, JobState.LOST):  # `lost` in its retry: the gang starts again without it for now
                    self._restart(gang, leader, rec.attempt + 1, f"node {rank} {what}", origin=-1)
                else:
                    self._fail(gang, leader, rank, what)

    def _rejoined(self, gang: _Gang, leader: Job) -> bool:
        """Whether a started member may re-join: node 0 runs (after this agent's restart its
        gang is new here: it is started now, and node 0's end relayed again)."""
        if self.manager.is_reserved(leader) or leader.record.state == JobState.QUEUED:
            return False
        if not gang.started:
            gang.started = True
            self._spawn(self._watch_leader(gang, leader))
        return True

    def _arm(self, gang: _Gang) -> None:
        if gang.timer is None and not gang.started:
            gang.timer = asyncio.get_running_loop().call_later(self.reserve_s, self._release, gang)

    def _check(self, gang: _Gang, leader: Job) -> None:
        if gang.started or gang.ready != set(range(gang.size)):
            return
        if not self.manager.is_reserved(leader):  # node 0 ended (cancelled) while the others waited
            gang.ready.discard(0)
            return
        gang.started = True
        if gang.timer is not None:
            gang.timer.cancel()
        port = free_port()
        log.info("gang %s: all %d nodes reserved: Go (MASTER_PORT %d)", gang.gang_id, gang.size, port)
        for lines in gang.members.values():
            lines.send(go=port)
        self.manager.start_reserved(leader, port)
        self._spawn(self._watch_leader(gang, leader))

    def _release(self, gang: _Gang) -> None:
        """Not every rank was reserved in time: everyone lets go and goes back in line."""
        gang.timer = None
        if gang.started:
            return
        backoff = self._backoff(gang.gang_id)
        log.info(
            "gang %s: not all nodes free within %.0fs: released, again in %.0fs", gang.gang_id, self.reserve_s, backoff
        )
        for lines in gang.members.values():
            lines.send(release=backoff)
        gang.ready.clear()
        leader = self._leader(gang.gang_id)
        if leader is not None and self.manager.is_reserved(leader):
            self.manager.unreserve(leader, backoff)

    async def _watch_leader(self, gang: _Gang, leader: Job) -> None:
        await leader.wait_attempt_over(gang.attempt)  # its end, or a retry (`requeued` restarts the gang)
        rec = leader.record
        if rec.terminal and rec.state in _ENDS_THE_GANG:
            self._fail(gang, leader, 0, _ENDS_THE_GANG[rec.state] + (f" ({_clean(rec.error)})" if rec.error else ""))
        if leader.record.terminal:
            gang.ended = True

    def _fail(self, gang: _Gang, leader: Job, rank: int, what: str) -> None:
        if gang.failed:
            return
        gang.failed = True
        reason = f"node {rank} {what}"
        for other, lines in gang.members.items():
            if other != rank:
                lines.send(stop=reason)
        if rank != 0:
            _stop(self.manager, leader, reason)

    # -- every rank: a reservation was taken ---------------------------------------

    def reserved(self, job: Job) -> None:
        rec = job.record
        if rec.gang_rank == 0:
            gang = self._gang(job)
            gang.ready.add(0)
            self._arm(gang)
            self._check(gang, job)
        else:
            self._spawn(self._member(job))

    async def _member(self, job: Job) -> None:
        """Member k: Ready to the coordinator, Go (or a release), then its job's end both ways."""
        rec = job.record
        spec = _spec(job)
        if spec is None:
            self.manager.fail_reserved(job, "its gang token is missing on this runner: run the job again")
            return
        deadline = time.monotonic() + self.reserve_s
        conn = None
        while conn is None:
            try:
                conn = await connect_node0(spec.coordinator, spec.host_key, rec.gang_id, spec.gang_token)
            except (OSError, asyncssh.Error, ValueError) as exc:
                if not self.manager.is_reserved(job):
                    return
                if time.monotonic() > deadline:
                    job.system_line(f"lanpool: cannot reach node 0's agent at {spec.coordinator}: {exc}")
                    self.manager.unreserve(job, self._backoff(rec.gang_id))
                    return
                await asyncio.sleep(1.0)
        try:
            async with conn:
                await self._meet(job, conn, spec)
        except (OSError, asyncssh.Error, ConnectionError) as exc:
            job.system_line(f"lanpool: lost node 0's agent at {spec.coordinator}: {exc}")
            if self.manager.is_reserved(job):
                self.manager.unreserve(job, self._backoff(rec.gang_id))
            elif not job.record.terminal:
                _lost_node0(self.manager, job)

    async def _meet(self, job: Job, conn: asyncssh.SSHClientConnection, spec: GangSpec) -> None:
        """Ready, then Go (its job starts) or a release (it goes back in line), then the run."""
        rec = job.record
        attempt = rec.attempt
        lines = await open_barrier(conn, ready=rec.gang_rank, attempt=attempt)
        msg = await until_end(lines.read(), job, attempt)
        if job.record.terminal or job.record.attempt != attempt:
            return
        if msg is not None and _attempt(msg.get("again"), attempt):  # the gang is at a later attempt
            self.manager.restart(job, msg["again"], "its gang started again")
            return
        if msg is None or "go" not in msg or not isinstance(msg["go"], int) or not 0 < msg["go"] < 65536:
            backoff = msg.get("release") if msg else None
            wait = float(backoff) if isinstance(backoff, (int, float)) and 0 < backoff < 600 else 5.0
            self.manager.unreserve(job, wait)
            return
        self.manager.start_reserved(job, msg["go"])
        await self._run_member(job, lines, spec)

    async def _run_member(self, job: Job, lines: Lines, spec: GangSpec) -> None:
        again: list[asyncssh.SSHClientConnection] = []  # connections of re-joins, closed at the end
        attempt = job.record.attempt
        try:
            while True:
                msg = await until_end(lines.read(), job, attempt)
                if not job.record.terminal and job.record.attempt != attempt:  # back in line: the gang starts again
                    lines.send(again=job.record.attempt, why=job.record.last_end[:120])
                    return
                if job.record.terminal:
                    if self.manager.closing and job.record.state != JobState.DONE.value:
                        # Stopped because this agent exits (a process cannot outlive it): the gang cannot go on.
                        lines.send(end=JobState.LOST.value, why="its agent shut down")
                    else:
                        lines.send(end=job.record.state, why=job.record.error[:120])
                    return
                if msg is None:  # the coordinator is gone: its end may be relayed to nobody, so stop in time
                    joined = await self._rejoin(job, spec)
                    if joined is None:
                        _lost_node0(self.manager, job)
                        return
                    again.append(joined[0])
                    lines = joined[1]
                elif _attempt(msg.get("again"), attempt):
                    why = _clean(msg.get("why")) or "its gang starts again"
                    self.manager.restart(job, msg["again"], why)
                elif isinstance(msg.get("stop"), str):
                    _stop(self.manager, job, msg["stop"][:200])
        finally:
            for conn in again:
                conn.close()

    def adopted(self, job: Job) -> None:
        """A member still running when this agent restarted (a container outlives it)."""
        self._spawn(self._readopted(job))

    async def _readopted(self, job: Job) -> None:
        """Re-join node 0's agent as a started member and go on, as after losing node 0;
        stop if that fails within LANPOOL_GANG_LOST_S (node 0 counts this node lost by then)."""
        spec = _spec(job)
        why = "this runner's agent restarted"
        joined = await self._rejoin(job, spec, why) if spec is not None else None
        if spec is None or joined is None:
            _stop(self.manager, job, f"{why} and could not re-join node 0's agent")
            return
        try:
            async with joined[0]:
                await self._run_member(job, joined[1], spec)
        except (OSError, asyncssh.Error, ConnectionError) as exc:
            job.system_line(f"lanpool: lost node 0's agent at {spec.coordinator}: {exc}")
            _lost_node0(self.manager, job)

    async def _rejoin(
        self, job: Job, spec: GangSpec, why: str = "lost node 0's agent"
    ) -> tuple[asyncssh.SSHClientConnection, Lines] | None:
        """Node 0's agent again (it may be restarting), with a growing pause, for at most LANPOOL_GANG_LOST_S."""
        job.system_line(f"lanpool: {why}; trying to re-join node 0's agent for {self.lost_s:.0f}s")
        deadline, pause = time.monotonic() + self.lost_s, 0.5
        while not job.record.terminal and time.monotonic() < deadline:
            conn = None
            try:
                conn = await connect_node0(spec.coordinator, spec.host_key, spec.gang_id, spec.gang_token)
                lines = await open_barrier(conn, running=job.record.gang_rank, attempt=job.record.attempt)
                job.system_line("lanpool: re-joined node 0's agent")
                return conn, lines
            except (OSError, asyncssh.Error, ValueError) as exc:
                log.info("gang %s: node 0 not back yet: %s", spec.gang_id, exc)
                if conn is not None:
                    conn.close()
            await asyncio.sleep(max(0.0, min(pause, deadline - time.monotonic())))
            pause = min(pause * 2, 5.0)
        return None


def _spec(job: Job) -> GangSpec | None:
    """The member's gang spec with its token: from memory, or after a restart from the job's dir."""
    if job.request is not None and job.request.gang is not None:
        return job.request.gang
    try:
        saved = read_request(job.dir).gang
    except (OSError, ValueError, ProtocolError) as exc:
        log.warning("job %s: cannot read its request back: %s", job.record.job_id, exc)
        return None
    token = read_token(job.dir)
    return dataclasses.replace(saved, gang_token=token) if saved is not None and token else None


def _clean(why: Any) -> str:
    """A peer's word on why (clipped, printable), or ""."""
    return "".join(c for c in why[:120] if c.isprintable()) if isinstance(why, str) else ""


def _attempt(again: Any, attempt: int) -> bool:
    """Whether `again` names a later attempt than `attempt` (and not an absurd one)."""
    return isinstance(again, int) and not isinstance(again, bool) and attempt < again <= attempt + 100


def _lost_node0(manager: JobManager, job: Job) -> None:
    """Node 0's agent did not come back: with `lost` in its retry, this node goes back in line (its
    gang meets again once node 0 is back); otherwise it stops."""
    if retries(job.record, JobState.LOST):
        manager.restart(job, job.record.attempt + 1, "lost node 0's agent")
    else:
        _stop(manager, job, "lost node 0's agent")


def _stop(manager: JobManager, job: Job, reason: str) -> None:
    if not job.record.terminal:
        job.system_line(f"lanpool: stopping: {reason}")
        manager.stop(job.record.job_id, abort=False, grace_s=None, owner=None)
