"""The runner pool as this controller sees it: discovery, pairing, liveness, capacity.

States (one enum, shown by `app headless runners` and the TUI):
  LIVE      answers, our key is accepted, has room
  BUSY      answers, but every GPU is taken (or, without GPUs, jobs are running)
  OFFLINE   did not answer the last check
  UNPAIRED  answers, but does not accept our key yet (pair it)
  CONFLICT  something advertised this name with another host key: never used
"""

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from enum import StrEnum

from app.errors import HostKeyMismatch, LanpoolError, RunnerRefused, UsageError
from app.runner_client import RunnerSession, host_key_text
from app.scheduler import Capacity

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0


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

    @property
    def gpus(self) -> int:
        return int(self.props.get("gpus", 0) or 0)

    @property
    def gpus_free(self) -> int:
        return int(self.props.get("gpus_free", self.gpus) or 0)

    def capacity(self) -> Capacity:
        p = self.props
        usable = self.state in (RunnerState.LIVE, RunnerState.BUSY)
        return Capacity(
            name=self.name, usable=usable, gpus=self.gpus, gpus_free=self.gpus_free,
            cpus=int(p.get("cpus", 0) or 0), cpus_free=int(p.get("cpus_free", p.get("cpus", 0)) or 0),
            memory_mb=int(p.get("memory_mb", 0) or 0),
            memory_free_mb=int(p.get("memory_free_mb", p.get("memory_mb", 0)) or 0),
            why_not="" if usable else self.state.lower(),
        )

    def to_json(self) -> dict:
        return {"name": self.name, "address": f"{self.host}:{self.port}", "host": self.host, "port": self.port, "source": self.source, "state": self.state,
                "gpus_free": self.gpus_free, "gpus": self.gpus, "gpu_name": self.props.get("gpu_name", ""),
                "executor": self.props.get("executor", ""), "running_jobs": self.running,
                "last_seen": self.last_seen}


def record_advert(store, advert) -> None:
    """Fold one mDNS advertisement into the store; a name with another key is a conflict."""
    known = store.runner(advert.name)
    advert_key = host_key_text(advert.host_key)
    props = json.dumps(advert.props)
    now = time.time()
    if known is None:
        store.upsert_runner(advert.name, advert.host, advert.port, advert_key, source="mdns")
        store.set_runner(advert.name, props=props, state=RunnerState.UNPAIRED, paired=0, last_seen=now)
    elif host_key_text(known["host_key"] or "") == advert_key:
        store.set_runner(advert.name, host=advert.host, port=advert.port, props=props, last_seen=now)
    elif known["conflict_key"] != advert_key:
        log.warning("runner %s advertised with another host key from %s: marked as a conflict",
                    advert.name, advert.host)
        store.set_runner(advert.name, conflict_key=advert_key, state=RunnerState.CONFLICT)


async def probe(ctl, row: dict) -> str:
    """Check one runner now; records and returns its state."""
    if row.get("conflict_key"):
        ctl.store.set_runner(row["name"], state=RunnerState.CONFLICT)
        return RunnerState.CONFLICT
    try:
        session = await RunnerSession.open(row["host"], row["port"], ctl.client_key, row["host_key"],
                                           timeout=PROBE_TIMEOUT_S)
    except HostKeyMismatch:
        state, fields = RunnerState.CONFLICT, {}
    except RunnerRefused:
        state, fields = RunnerState.UNPAIRED, {"paired": 0, "last_ok": time.time()}
    except LanpoolError:
        state, fields = RunnerState.OFFLINE, {}
    else:
        resources = dict(session.hello.resources) if session.hello else {}
        session.close()
        busy = (int(resources.get("gpus", 0) or 0) > 0 and int(resources.get("gpus_free", 0) or 0) == 0) or \
            (not int(resources.get("gpus", 0) or 0) and int(resources.get("running", 0) or 0) > 0)
        state = RunnerState.BUSY if busy else RunnerState.LIVE
        props = {**json.loads(row.get("props") or "{}"), **{k: str(v) for k, v in resources.items()}}
        fields = {"paired": 1, "last_ok": time.time(), "last_seen": time.time(), "props": json.dumps(props)}
    ctl.store.set_runner(row["name"], state=state, **fields)
    return state


async def refresh_pool(ctl, wait_s: float = 1.5, interfaces: list[str] | None = None) -> list[RunnerView]:
    """Browse mDNS for `wait_s` (if any interface), then check every known runner."""
    # zeroconf is imported only when browsing: it is heavy for short CLI calls.
    from app.discovery import browse_interfaces, discover

    interfaces = browse_interfaces() if interfaces is None else interfaces
    if interfaces and wait_s > 0:
        for advert in await discover(interfaces, wait_s):
            record_advert(ctl.store, advert)
    await asyncio.gather(*(probe(ctl, row) for row in ctl.store.runners()))
    return views(ctl.store)


def views(store) -> list[RunnerView]:
    out = []
    for row in store.runners():
        out.append(RunnerView(
            name=row["name"], host=row["host"], port=row["port"], source=row["source"] or "manual",
            state=row["state"] or RunnerState.OFFLINE, props=json.loads(row["props"] or "{}"),
            last_seen=row["last_seen"], running=len(store.running_jobs(row["name"]))))
    return out


async def pair(ctl, target: str, code: str, label: str = "") -> str:
    """Pair with a runner (a known NAME or HOST[:PORT]) using the code it shows; returns its name."""
    from app.controller import parse_address
    row = ctl.store.runner(target)
    if row is not None:
        host, port, expected = row["host"], row["port"], row["host_key"]
        if row.get("conflict_key"):
            raise UsageError(f"runner {target!r} is in conflict (two host keys advertised): "
                             f"`app headless runners remove {target}`, then pair by address")
    else:
        host, port = parse_address(target, ctl.DEFAULT_PORT)
        expected = None  # first contact by address: the key seen now is pinned
    session = await RunnerSession.open(host, port, ctl.client_key, expected, pairing_code=code)
    try:
        public = ctl.client_key.export_public_key().decode().strip()
        paired = await session.pair(public, label)
    finally:
        session.close()
    ctl.store.upsert_runner(paired.name, host, port, session.host_key,
                            source=row["source"] if row else "manual")
    ctl.store.set_runner(paired.name, paired=1, state=RunnerState.LIVE, last_ok=time.time())
    return paired.name
