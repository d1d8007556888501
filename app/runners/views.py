"""Runners as shown and scheduled: their states, resources and one view each.

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

import json
import logging
from enum import StrEnum
from typing import Any

from lanpool.app.runners.host_keys import host_key_or_none, unreadable_key_message
from lanpool.app.runners.scheduler import Capacity
from lanpool.app.store import Store
from lanpool.protocol.message_base import Record, record

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


@record
class RunnerView(Record):
    """A runner as the controller shows it: its record, state and running jobs."""

    name: str
    host: str
    port: int
    source: str
    state: str
    props: dict[str, Any]
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

    @property
    def held_by(self) -> str:
        """Who holds it, as it last said to us (agent/jobs/turns.py): labels, workflows, times."""
        return "".join(c for c in str(self.props.get("held_by", "")) if c.isprintable())[:MAX_PROP_VALUE]

    @property
    def gpu_util(self) -> list[int | None]:
        """Percent busy per GPU now, as the runner last said ("gpu_util": "37,0"); None: not read."""
        parts = str(self.props.get("gpu_util", "")).split(",")
        return [min(int(p), 100) if p.isascii() and p.isdigit() and len(p) <= 3 else None for p in parts if p][:64]

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
            name=self.name,
            usable=usable,
            gpus=self.gpus,
            gpus_free=self.gpus_free,
            cpus=count(p, "cpus"),
            cpus_free=count(p, "cpus_free", count(p, "cpus")),
            memory_mb=count(p, "memory_mb"),
            memory_free_mb=count(p, "memory_free_mb", count(p, "memory_mb")),
            why_not=why_not,
            queued=count(p, "queued"),
            mode=p.get("mode", ""),
            executor=p.get("executor", ""),
            pythons=p.get("python", ""),
        )

    def to_json(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "address": f"{self.host}:{self.port}",
            "host": self.host,
            "port": self.port,
            "source": self.source,
            "state": self.state,
            "trusted": self.trusted,
            "gpus_free": self.gpus_free,
            "gpus": self.gpus,
            "gpu_name": self.props.get("gpu_name", ""),
            "gpu_util": self.gpu_util,
            "executor": self.props.get("executor", ""),
            "isolation": self.props.get("isolation", ""),
            "running_jobs": self.running,
            "held_by": self.held_by,
            "last_seen": self.last_seen,
        }
        if self.problem:
            out["problem"] = self.problem
        return out


def count(props: dict[str, Any], key: str, default: int = 0) -> int:
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


def props_of(row: dict[str, Any]) -> dict[str, str]:
    try:
        return bounded_props(json.loads(row.get("props") or "{}"))
    except ValueError:  # a damaged row shows no resources rather than breaking the list
        return {}


def views(store: Store) -> list[RunnerView]:
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
        out.append(
            RunnerView(
                name=row["name"],
                host=row["host"],
                port=row["port"],
                source=row["source"] or "manual",
                state=state,
                props=props_of(row),
                last_seen=row["last_seen"],
                running=len(store.running_jobs(row["name"])),
                trusted=trusted,
                problem=problem,
            )
        )
    return out
