"""The runner pool as this controller sees it: trust, pairing, liveness, capacity.

Trust is this controller's own record (the runners row's `trusted`): a runner
gets jobs only after the user paired it (`runners pair`), added it by address
(`runners add HOST[:PORT]`, which pins the host key seen on that connection) or
named it by address for a run (`run --runner HOST:PORT`: the same act as `add`,
so it stays trusted afterwards, as ssh's known_hosts does). A runner that
accepts our key proves nothing: a hostile server accepts every key. mDNS adverts
are hints (app/runners/adverts.py).

States and views: app/runners/views.py. Adverts are hints: app/runners/adverts.py.
"""

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from lanpool.app.errors import HostKeyMismatch, LanpoolError, RunnerError, RunnerRefused, UsageError
from lanpool.app.home import ControllerHome
from lanpool.app.runners.host_keys import UnreadableHostKey, host_key_or_none, pinned_key
from lanpool.app.runners.reach import open_socket
from lanpool.app.runners.scheduler import Need, place
from lanpool.app.runners.views import PROBE_TIMEOUT_S, RunnerState, RunnerView, bounded_props, count, props_of, views
from lanpool.app.store import JobRow, Store
from lanpool.protocol import JobState, wire

if TYPE_CHECKING:  # app.runners.discovery imports zeroconf, which only browsing needs
    import asyncssh

    from lanpool.app.runners.client import RunnerSession
    from lanpool.app.runners.discovery import Advert
    from lanpool.app.runners.sessions import RunSessions

log = logging.getLogger(__name__)

DEFAULT_PORT = wire.DEFAULT_PORT
DISCOVERY_WAIT_S = 1.5  # mDNS browse when no runner is known yet
QUEUE_POLL_S = 2.0  # how often a queued job looks for room again

__all__ = ["DEFAULT_PORT", "Pool", "RunnerState", "RunnerView", "parse_address"]


def parse_address(spec: str, default_port: int) -> tuple[str, int]:
    """HOST, HOST:PORT, an IPv6 address, or [IPV6]:PORT; the port is 1-65535."""
    text = spec.strip()
    shown = repr(text[:100])
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise UsageError(f"bad runner address {shown}: use HOST, HOST:PORT or [IPV6]:PORT")
        port = rest[1:] if rest else None
    elif text.count(":") > 1:  # a bare IPv6 address has no port
        host, port = text, None
    else:
        host, sep, port = text.partition(":")
        port = port if sep else None
    if not host or any(c.isspace() or not c.isprintable() for c in host):
        raise UsageError(f"bad runner address {shown}: use HOST or HOST:PORT")
    if port is None:
        return host, default_port
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
        raise UsageError(f"bad runner address {shown}: the port must be a number from 1 to 65535")
    return host, int(port)


class Pool:
    """The runners this controller knows: trust, connections, liveness, placement."""

    def __init__(self, store: Store, home: ControllerHome) -> None:
        self.store = store
        self.home = home
        self._key: asyncssh.SSHKey | None = None
        self.kept: RunSessions | None = None  # while a run is placed: its probes' sessions (app/runners/sessions.py)

    # asyncssh (with cryptography) is imported by what talks to runners, not at the top:
    # `status` and `logs` of stored runs never need it (start-up time).
    @property
    def client_key(self) -> "asyncssh.SSHKey":
        if self._key is None:
            from lanpool.app.keys import load_or_create_client_key

            self._key = load_or_create_client_key(self.home.key)
        return self._key

    @property
    def public_key_file(self) -> Path:
        _ = self.client_key
        return Path(str(self.home.key) + ".pub")

    async def connect(self, host: str, port: int, *, trust: bool = False) -> "RunnerSession":
        """Open a session with the runner at host:port, checked against its pinned host key.

        Only a runner this controller trusts is connected to (app/runners/pool.py). `trust` is the
        user's own act of naming this address (`runners add`, `run --runner HOST:PORT`): the
        key seen now is pinned, unless a trusted runner there has one, and the runner is
        trusted from then on."""
        known = self.store.runner_by_address(host, port)
        if known is not None and not known.get("trusted"):
            known = None  # an mDNS hint pins nothing and trusts nothing
        if known is None and not trust:
            raise RunnerError(
                f"no runner this controller trusts is at {host}:{port}: "
                f"`app headless runners add {host}:{port}` trusts what answers there, "
                "or pair it (`app headless runners pair NAME CODE`)"
            )
        pinned = pinned_key(known) if known else None
        session = self.kept.take(host, port, pinned) if self.kept and not trust else None
        if session is None:
            sock = await open_socket(host, port)  # before the SSH stack's import: see app/runners/reach.py
            from lanpool.app.startup.import_paused import import_paused

            import_paused("lanpool.app.runners.client")  # the SSH stack, with the GC paused
            from lanpool.app.runners.client import RunnerSession

            session = await RunnerSession.open(host, port, self.client_key, pinned, sock=sock)
        try:
            name = session.hello.name
            named = self.store.runner(name)
            if named is not None and named.get("trusted") and pinned_key(named) != session.host_key:
                raise RunnerError(
                    f"runner {name!r} at {host}:{port} has a different host key than the one pinned for that "
                    f"name: if it was reinstalled, `app headless runners remove {name}` first"
                )
            if trust or (known is not None and known["name"] != name):  # known is None only when trusting
                self.store.upsert_runner(name, host, port, session.host_key, trusted=True)
            if known is not None and known["name"] != name:
                # Its pinned key answered under a new name: the same machine, renamed.
                self.store.remove_runner(known["name"])
        except BaseException:
            session.close()
            raise
        return session

    async def add_runner(self, host: str, port: int) -> str:
        """`runners add HOST[:PORT]`: trust what answers there, pinning its host key; its name."""
        async with await self.connect(host, port, trust=True) as session:
            return session.hello.name

    def names_an_address(self, spec: str | None) -> TypeGuard[str]:
        """Whether `--runner SPEC` is an address (HOST[:PORT]) rather than a known runner's name."""
        return spec is not None and spec != "" and self.store.runner(spec) is None

    def runner_seen(self, name: str, answers: bool) -> None:
        """A followed job's runner went away (OFFLINE) or answers again (LIVE)."""
        if answers:
            self.store.set_runner(name, state=RunnerState.LIVE, last_ok=time.time())
        else:
            self.store.set_runner(name, state=RunnerState.OFFLINE)

    def views(self) -> list[RunnerView]:
        return views(self.store)

    def names(self) -> list[str]:
        return [r["name"] for r in self.store.runners()]

    def state_of(self, name: str) -> str | None:
        """A known runner's state (LIVE, OFFLINE, ...); None for a name not known."""
        row = self.store.runner(name)
        return row["state"] if row else None

    def forget(self, name: str) -> bool:
        """Forget a runner and its pinned host key; False if no runner has that name."""
        return self.store.remove_runner(name)

    async def probe(self, row: dict[str, Any]) -> str:
        """Check one runner now; records and returns its state. A runner this controller does
        not trust is at best UNPAIRED, whatever it accepts."""
        name = row["name"]
        if row.get("conflict_key"):
            self.store.set_runner(name, state=RunnerState.CONFLICT)
            return RunnerState.CONFLICT
        pinned = host_key_or_none(row.get("host_key"))
        if pinned is None:  # `views` says what to do about it; the other runners go on
            self.store.set_runner(name, state=RunnerState.UNPAIRED)
            return RunnerState.UNPAIRED
        fields: dict[str, object]
        try:
            sock = await open_socket(row["host"], row["port"], PROBE_TIMEOUT_S)  # nothing there: no SSH import
            from lanpool.app.startup.import_paused import import_paused

            import_paused("lanpool.app.runners.client")  # the SSH stack, with the GC paused
            from lanpool.app.runners.client import RunnerSession

            session = await RunnerSession.open(
                row["host"], row["port"], self.client_key, pinned, timeout=PROBE_TIMEOUT_S, sock=sock
            )
        except HostKeyMismatch:
            state, fields = RunnerState.CONFLICT, {}
        except RunnerRefused:
            state, fields = RunnerState.UNPAIRED, {"paired": 0, "last_ok": time.time()}
        except LanpoolError:
            state, fields = RunnerState.OFFLINE, {}
        else:
            resources = bounded_props(dict(session.hello.resources))
            if self.kept is not None and row.get("trusted"):
                self.kept.keep(row["host"], row["port"], session)
            else:
                session.close()
            now = time.time()
            if not row.get("trusted"):
                # It accepts our key, which proves nothing; what its Hello claims is not taken either.
                state, fields = RunnerState.UNPAIRED, {"paired": 1, "last_ok": now, "last_seen": now}
            else:
                gpus = count(resources, "gpus")
                busy = (gpus > 0 and count(resources, "gpus_free") == 0) or (
                    not gpus and count(resources, "running") > 0
                )
                state = RunnerState.BUSY if busy else RunnerState.LIVE
                # What its Hello says now replaces what it said before; who holds it is the Hello's
                # alone (a runner nobody holds any more says nothing of it: the old holders go).
                earlier = {k: v for k, v in props_of(row).items() if k != "held_by"}
                props = bounded_props({**earlier, **resources})
                fields = {"paired": 1, "last_ok": now, "last_seen": now, "props": json.dumps(props)}
        self.store.set_runner(name, state=state, **fields)
        return state

    async def probe_all(self, names: list[str] | None = None) -> None:
        """Check every known runner (or those named) now, all at once; one that fails is its own."""
        rows = self.store.runners() if names is None else [r for r in map(self.store.runner, names) if r is not None]
        await asyncio.gather(*(self.probe(row) for row in rows), return_exceptions=True)

    # -- adverts heard by a front end that browses all along (hints: app/runners/adverts.py) --------

    async def fold_advert(self, advert: "Advert") -> None:
        """One advert as it comes: a new address is checked before it is stored."""
        from lanpool.app.runners.adverts import fold_advert  # asyncssh with it: only what handles adverts pays for it

        await fold_advert(self.store, self.client_key, advert)

    @property
    def conflict_browse_s(self) -> float:
        """How long a browse that settles a name conflict listens (app.runners.adverts, loaded only here)."""
        from lanpool.app.runners.adverts import CONFLICT_BROWSE_S

        return CONFLICT_BROWSE_S

    async def fold_browse(self, adverts: list["Advert"], started_at: float, browsed_s: float) -> None:
        """Everything one browse heard: conflicts whose claim it no longer heard are over."""
        from lanpool.app.runners.adverts import fold_browse

        await fold_browse(self.store, self.client_key, adverts, started_at, browsed_s)

    def goodbye(self, service: str, still_heard: list["Advert"]) -> list[str]:
        """A service said goodbye: the conflicts it made are over, unless an advert still
        heard makes the same claim. Returns the runners whose conflict ended, to check again."""
        from lanpool.app.runners.adverts import forget_claims, record_advert

        names = forget_claims(self.store, service)
        for advert in still_heard:
            if advert.name in names:
                record_advert(self.store, advert)
        return names

    def has_conflicts(self) -> bool:
        # app.runners.adverts.has_conflicts, without importing adverts (asyncssh) for a plain `runners` listing
        return any(r["conflict_key"] for r in self.store.runners())

    async def refresh(self, wait_s: float = 1.5, interfaces: list[str] | None = None) -> list[RunnerView]:
        """Browse mDNS for `wait_s` (if any interface), then check every known runner.

        A recorded conflict lasts only while its claim is heard, so with one on record
        the browse happens even when `wait_s` is 0."""
        if wait_s <= 0 and self.has_conflicts():
            from lanpool.app.runners.adverts import CONFLICT_BROWSE_S

            wait_s = CONFLICT_BROWSE_S
        if wait_s > 0:
            # zeroconf is imported only when browsing: it is heavy for short CLI calls.
            from lanpool.app.runners.adverts import fold_browse
            from lanpool.app.runners.discovery import browse_interfaces, discover

            interfaces = browse_interfaces() if interfaces is None else interfaces
            if interfaces:
                started = time.time()
                heard = await discover(interfaces, wait_s)
                await fold_browse(self.store, self.client_key, heard, started, wait_s)
        if self.kept is not None and wait_s <= 0 and self.kept.fresh():
            return views(self.store)  # probed just now, for the same run
        await asyncio.gather(*(self.probe(row) for row in self.store.runners()))
        if self.kept is not None:
            self.kept.probed()
        return views(self.store)

    async def choose_runners(
        self,
        spec: str | None,
        need: Need,
        nodes: int,
        run_name: str,
        job_id: str,
        workflow: str,
        say: Callable[[str], None],
        queue_timeout: float | None = None,
    ) -> list[tuple[str, int]]:
        """`nodes` distinct runners, node 0 first, each one whose capacity fits: the job queues
        there, journalled (a gang's nodes start together when all have room: agent/gang/hub.py),
        so no need for this process to stay. While nothing can take
        the job (its runners offline), it is QUEUED here with this process's pid, so a
        `status` can tell when the process that would submit it is gone; `queue_timeout`
        seconds of that and the run gives up."""
        last = ""
        told: set[str] = set()
        since = time.monotonic()
        try:
            while True:
                views = await self.refresh(wait_s=0 if self.store.runners() else DISCOVERY_WAIT_S)
                for view in views:
                    if view.problem and view.name == spec:
                        raise UnreadableHostKey(view.problem)
                    if view.problem and view.problem not in told:  # once, not every poll
                        say(view.problem)
                        told.add(view.problem)
                capacities = [v.capacity() for v in views]
                decision = place(need, capacities, nodes=nodes, pinned=spec, runner_queues=True)
                if decision.runners:
                    rows = [self.store.known_runner(name) for name in decision.runners]
                    return [(row["host"], row["port"]) for row in rows]
                if decision.rejected:
                    raise UsageError(f"cannot run {workflow}: {decision.rejected}")
                if last and self.store.job(job_id).state.is_terminal():  # `stop` cancelled it meanwhile
                    raise UsageError(f"{workflow}: cancelled while queued")
                if queue_timeout is not None and time.monotonic() - since >= queue_timeout:
                    self.store.set_job_status(
                        job_id, JobState.ABORTED, "queue timeout", finished_at=time.time(), synced=1
                    )
                    raise UsageError(f"cannot run {workflow}: gave up after --queue-timeout: {decision.queued}")
                if decision.queued != last:
                    say(f"queued: {decision.queued} (Ctrl-C cancels)")
                    self.store.queue_job(job_id, run_name, workflow, decision.queued, pid=os.getpid())
                    last = decision.queued
                await asyncio.sleep(QUEUE_POLL_S)
        except (asyncio.CancelledError, KeyboardInterrupt):
            if last:
                self.store.set_job_status(
                    job_id, JobState.ABORTED, "cancelled while queued", finished_at=time.time(), synced=1
                )
            raise

    def abort_orphaned(self, jobs: list[JobRow]) -> None:
        """Jobs queued here (no runner yet) whose `run` process is gone end ABORTED:
        nothing else would ever submit them."""
        for job in jobs:
            if job.state is JobState.QUEUED and not job.runner and not _queued_by_alive(job):
                self.store.set_job_status(
                    job.id,
                    JobState.ABORTED,
                    "its run process ended while it was queued",
                    error="its `run` process ended while it was queued: run it again",
                    finished_at=time.time(),
                    synced=1,
                )

    async def pair(self, target: str, code: str, label: str = "") -> str:
        """Pair with a runner (a known NAME or HOST[:PORT]) using the code it shows; returns its name."""
        row = self.store.runner(target)
        if row is not None:
            host, port, expected = row["host"], row["port"], pinned_key(row)
            if row.get("conflict_key"):
                raise UsageError(
                    f"runner {target!r} is in conflict (two host keys advertised): "
                    f"`app headless runners remove {target}`, then pair by address"
                )
        else:
            host, port = parse_address(target, DEFAULT_PORT)
            expected = None  # first contact by address: the key seen now is pinned
        if not code.strip(" -"):
            raise UsageError("no pairing code given: `app agent status` on the runner shows it (like ABCD-EFGH)")
        from lanpool.app.runners.client import RunnerSession

        session = await RunnerSession.open(host, port, self.client_key, expected, pairing=True)
        try:
            public = self.client_key.export_public_key().decode().strip()
            name = await session.pair(code, public, label)
        finally:
            session.close()
        # The PAKE bound the code to the host key seen on this connection: that key is pinned,
        # and pairing is the user's act of trust.
        self.store.upsert_runner(
            name, host, port, session.host_key, source=row["source"] if row else "manual", trusted=True
        )
        self.store.set_runner(name, paired=1, trusted=1, state=RunnerState.LIVE, last_ok=time.time())
        return name


def _queued_by_alive(job: JobRow) -> bool:
    """Whether the `run` process that queued this job here (pid in its spec) still lives:
    nothing else would ever submit it. A row without a pid (an older store) is given the benefit."""
    try:
        pid = int(json.loads(job.spec or "{}").get("queued_by") or 0)
    except (ValueError, TypeError, AttributeError):
        return True
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True
