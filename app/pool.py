"""The runner pool as this controller sees it: trust, pairing, liveness, capacity.

Trust is this controller's own record (the runners row's `trusted`): a runner
gets jobs only after the user paired it (`runners pair`), added it by address
(`runners add HOST[:PORT]`, which pins the host key seen on that connection) or
named it by address for a run (`run --runner HOST:PORT`: the same act as `add`,
so it stays trusted afterwards, as ssh's known_hosts does). A runner that
accepts our key proves nothing: a hostile server accepts every key. mDNS adverts
are hints (app/adverts.py).

States (one enum, shown by `app headless runners` and the TUI):
  LIVE      trusted, answers with its pinned key, accepts ours, has room
  BUSY      the same, but every GPU is taken (or, without GPUs, jobs are running)
  OFFLINE   did not answer the last check
  UNPAIRED  not paired both ways: this controller does not trust it (only found
            by mDNS, whatever it accepts or announces), or it does not accept our
            key, or its pinned key in the store is unreadable. Never given a job.
  CONFLICT  something claims this name with another host key right now (an
            advert still heard, or another key at its address): never used; it
            ends when the claim does, and the pinned key stays
"""

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from enum import StrEnum

from app.errors import HostKeyMismatch, LanpoolError, RunnerRefused, UsageError
from app.host_keys import host_key_or_none, pinned_key, unreadable_key_message
from app.runner_client import RunnerSession
from app.scheduler import Capacity

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0
# Resources come from adverts and Hellos, i.e. from peers: bounded before they are stored.
MAX_PROPS = 32
MAX_PROP_KEY = 32
MAX_PROP_VALUE = 256
_MAX_COUNT = 1 << 40  # no resource count is larger (memory in MB included)


class RunnerState(StrEnum):
    LIVE = "LIVE"
    BUSY = "BUSY"
    OFFLINE = "OFFLINE"
    UNPAIRED = "UNPAIRED"
    CONFLICT = "CONFLICT"


@dataclass(frozen=True)
class RunnerView:
    name: str
    host: str
    port: int
    source: str
    state: str
    props: dict
    last_seen: float | None
    running: int
    trusted: bool = False
    problem: str = ""  # one line for the user when something is wrong with its record

    @property
    def gpus(self) -> int:
        return count(self.props, "gpus")

    @property
    def gpus_free(self) -> int:
        return count(self.props, "gpus_free", self.gpus)

    def capacity(self) -> Capacity:
        p = self.props
        usable = self.trusted and not self.problem and self.state in (RunnerState.LIVE, RunnerState.BUSY)
        if usable:
            why_not = ""
        elif not self.trusted or self.problem:
            why_not = "unpaired"  # never waited for: it takes no job until the user acts
        else:
            why_not = self.state.lower()
        return Capacity(
            name=self.name, usable=usable, gpus=self.gpus, gpus_free=self.gpus_free,
            cpus=count(p, "cpus"), cpus_free=count(p, "cpus_free", count(p, "cpus")),
            memory_mb=count(p, "memory_mb"), memory_free_mb=count(p, "memory_free_mb", count(p, "memory_mb")),
            why_not=why_not,
        )

    def to_json(self) -> dict:
        out = {"name": self.name, "address": f"{self.host}:{self.port}", "host": self.host, "port": self.port,
               "source": self.source, "state": self.state, "trusted": self.trusted,
               "gpus_free": self.gpus_free, "gpus": self.gpus, "gpu_name": self.props.get("gpu_name", ""),
               "executor": self.props.get("executor", ""), "running_jobs": self.running,
               "last_seen": self.last_seen}
        if self.problem:
            out["problem"] = self.problem
        return out


def count(props: dict, key: str, default: int = 0) -> int:
    """A resource count from a peer's text: anything but a plain non-negative integer reads as `default`."""
    value = props.get(key)
    if value is None:
        return default
    text = str(value).strip()
    if not text.isascii() or not text.isdigit() or len(text) > 15:
        return default
    return min(int(text), _MAX_COUNT)


def bounded_props(props: object) -> dict[str, str]:
    """A peer's properties as they may be stored: str to str, at most MAX_PROPS, each bounded."""
    if not isinstance(props, dict):
        return {}
    out: dict[str, str] = {}
    for key, value in props.items():
        if len(out) >= MAX_PROPS:
            log.info("dropped %d properties past the first %d", len(props) - MAX_PROPS, MAX_PROPS)
            break
        out[str(key)[:MAX_PROP_KEY]] = "" if value is None else str(value)[:MAX_PROP_VALUE]
    return out


def _props_of(row: dict) -> dict[str, str]:
    try:
        return bounded_props(json.loads(row.get("props") or "{}"))
    except ValueError:  # a damaged row shows no resources rather than breaking the list
        return {}


async def probe(ctl, row: dict) -> str:
    """Check one runner now; records and returns its state. A runner this controller does
    not trust is at best UNPAIRED, whatever it accepts."""
    name = row["name"]
    if row.get("conflict_key"):
        ctl.store.set_runner(name, state=RunnerState.CONFLICT)
        return RunnerState.CONFLICT
    pinned = host_key_or_none(row.get("host_key"))
    if pinned is None:  # `views` says what to do about it; the other runners go on
        ctl.store.set_runner(name, state=RunnerState.UNPAIRED)
        return RunnerState.UNPAIRED
    try:
        session = await RunnerSession.open(row["host"], row["port"], ctl.client_key, pinned,
                                           timeout=PROBE_TIMEOUT_S)
    except HostKeyMismatch:
        state, fields = RunnerState.CONFLICT, {}
    except RunnerRefused:
        state, fields = RunnerState.UNPAIRED, {"paired": 0, "last_ok": time.time()}
    except LanpoolError:
        state, fields = RunnerState.OFFLINE, {}
    else:
        resources = bounded_props(dict(session.hello.resources) if session.hello else {})
        session.close()
        now = time.time()
        if not row.get("trusted"):
            # It accepts our key, which proves nothing; what its Hello claims is not taken either.
            state, fields = RunnerState.UNPAIRED, {"paired": 1, "last_ok": now, "last_seen": now}
        else:
            gpus = count(resources, "gpus")
            busy = (gpus > 0 and count(resources, "gpus_free") == 0) or (not gpus and count(resources, "running") > 0)
            state = RunnerState.BUSY if busy else RunnerState.LIVE
            props = bounded_props({**_props_of(row), **resources})
            fields = {"paired": 1, "last_ok": now, "last_seen": now, "props": json.dumps(props)}
    ctl.store.set_runner(name, state=state, **fields)
    return state


async def refresh_pool(ctl, wait_s: float = 1.5, interfaces: list[str] | None = None) -> list[RunnerView]:
    """Browse mDNS for `wait_s` (if any interface), then check every known runner.

    A recorded conflict lasts only while its claim is heard, so with one on record
    the browse happens even when `wait_s` is 0."""
    from app.adverts import CONFLICT_BROWSE_S, fold_browse, has_conflicts

    if wait_s <= 0 and has_conflicts(ctl.store):
        wait_s = CONFLICT_BROWSE_S
    if wait_s > 0:
        # zeroconf is imported only when browsing: it is heavy for short CLI calls.
        from app.discovery import browse_interfaces, discover

        interfaces = browse_interfaces() if interfaces is None else interfaces
        if interfaces:
            started = time.time()
            adverts = await discover(interfaces, wait_s)
            await fold_browse(ctl, adverts, started, wait_s)
    await asyncio.gather(*(probe(ctl, row) for row in ctl.store.runners()))
    return views(ctl.store)


def views(store) -> list[RunnerView]:
    """The runners as shown and scheduled. The state is derived defensively: an untrusted
    runner never shows LIVE or BUSY, whatever a stale row says."""
    out = []
    for row in store.runners():
        trusted = bool(row.get("trusted"))
        state = row["state"] or RunnerState.OFFLINE
        problem = ""
        if host_key_or_none(row["host_key"]) is None:
            problem, state = unreadable_key_message(row["name"]), RunnerState.UNPAIRED
        elif row.get("conflict_key"):
            state = RunnerState.CONFLICT
        elif not trusted and state in (RunnerState.LIVE, RunnerState.BUSY):
            state = RunnerState.UNPAIRED
        out.append(RunnerView(
            name=row["name"], host=row["host"], port=row["port"], source=row["source"] or "manual",
            state=state, props=_props_of(row), last_seen=row["last_seen"],
            running=len(store.running_jobs(row["name"])), trusted=trusted, problem=problem))
    return out


async def pair(ctl, target: str, code: str, label: str = "") -> str:
    """Pair with a runner (a known NAME or HOST[:PORT]) using the code it shows; returns its name."""
    from app.controller import parse_address
    row = ctl.store.runner(target)
    if row is not None:
        host, port, expected = row["host"], row["port"], pinned_key(row)
        if row.get("conflict_key"):
            raise UsageError(f"runner {target!r} is in conflict (two host keys advertised): "
                             f"`app headless runners remove {target}`, then pair by address")
    else:
        host, port = parse_address(target, ctl.DEFAULT_PORT)
        expected = None  # first contact by address: the key seen now is pinned
    if not code.strip(" -"):
        raise UsageError("no pairing code given: `app agent status` on the runner shows it (like ABCD-EFGH)")
    session = await RunnerSession.open(host, port, ctl.client_key, expected, pairing=True)
    try:
        public = ctl.client_key.export_public_key().decode().strip()
        name = await session.pair(code, public, label)
    finally:
        session.close()
    # The PAKE bound the code to the host key seen on this connection: that key is pinned,
    # and pairing is the user's act of trust.
    ctl.store.upsert_runner(name, host, port, session.host_key, source=row["source"] if row else "manual",
                            trusted=True)
    ctl.store.set_runner(name, paired=1, trusted=1, state=RunnerState.LIVE, last_ok=time.time())
    return name
