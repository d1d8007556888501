"""mDNS adverts are hints, never authority.

Anyone on the LAN can announce anything, so an advert may only:
- make known a name this controller has not met: stored untrusted (UNPAIRED),
  never given a job, whatever it accepts or announces;
- show that something claims a known runner's name with another host key:
  CONFLICT for as long as that claim is heard (its goodbye, or a browse that no
  longer hears it, ends it); the pinned key is never replaced;
- give a known runner's new address, stored only after its pinned key answered
  there (an SSH handshake checks that the server holds the key);
- refresh the resources shown for a runner, bounded in count and length.

It never deletes or re-keys a runner: a new name at a known runner's address is
just another, untrusted, runner. A malformed advert (a name that is no runner
name, a key that is not ed25519) is dropped with a log line. An untrusted
runner's key is itself only a hint: when a whole browse hears its name only
with another key, the hint follows (a runner reinstalled before it was paired,
or a forger that got there first and left).
"""

import asyncio
import json
import logging
import re
import time
from typing import TYPE_CHECKING

import asyncssh

from lanpool.app.errors import HostKeyMismatch, LanpoolError, RunnerRefused
from lanpool.app.runners.client import RunnerSession
from lanpool.app.runners.host_keys import host_key_or_none
from lanpool.app.runners.views import PROBE_TIMEOUT_S, RunnerState, bounded_props
from lanpool.app.store import Store

if TYPE_CHECKING:  # app.runners.discovery imports zeroconf, which only browsing needs
    from lanpool.app.runners.discovery import Advert

log = logging.getLogger(__name__)

# A runner name as adverts may carry it: no spaces, colons or control characters, so a
# name can never read as an address (`--runner HOST:PORT`) nor change the terminal.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# A browse shorter than this may miss a claim still being made: it clears no conflict.
MIN_CLEARING_BROWSE_S = 1.0
# How long the CLI listens before deciding that a recorded conflict's claim is gone.
CONFLICT_BROWSE_S = 1.5
# A browse that heard nobody at all, not even the runners that announce themselves, may
# only have been too slow (a loaded machine answers late): it ends no claim heard more
# recently than this. Hearing others but not the claim is what ends one.
SILENT_BROWSE_TRUSTED_AFTER_S = 120.0
# Hearing others but not the claim ends it only once it has gone unheard this long: on a
# loaded machine one responder among several may answer after a 1.5 s browse ended (found in
# CI: `run` right after `runners` showed the conflict heard the runner but not the forger).
CONFLICT_HOLD_S = 10.0


def record_advert(store: Store, advert: "Advert") -> tuple[str, int] | None:
    """Fold one advert into the store, with no network. Returns the new address a known
    runner announced: `fold_advert` stores it once the pinned key answered there."""
    name = advert.name if isinstance(advert.name, str) else ""
    if not NAME_RE.match(name):
        log.warning("ignored an mDNS advert from %s: %r is not a runner name", advert.host, name[:80])
        return None
    key = host_key_or_none(advert.host_key)
    if key is None:
        log.warning(
            "ignored the mDNS advert of %s from %s: its host key is not an ed25519 public key", name, advert.host
        )
        return None
    if not isinstance(advert.port, int) or not 1 <= advert.port <= 65535:
        log.warning("ignored the mDNS advert of %s from %s: port %r", name, advert.host, advert.port)
        return None
    props = json.dumps(bounded_props(advert.props))
    now = time.time()
    known = store.runner(name)
    if known is None:
        store.upsert_runner(name, advert.host, advert.port, key, source="mdns")
        store.set_runner(name, props=props, state=RunnerState.UNPAIRED, paired=0, last_seen=now)
        return None
    pinned = host_key_or_none(known["host_key"])
    if pinned is None:
        return None  # a damaged store row: `runners` says what to do; no advert repairs it
    if key != pinned:
        if known["conflict_key"] != key:
            log.warning(
                "runner %s is claimed by an mDNS advert from %s with another host key: a conflict "
                "while that claim is heard; the pinned key stays",
                name,
                advert.host,
            )
        store.set_runner(
            name,
            conflict_key=key,
            conflict_service=str(advert.service)[:300],
            conflict_seen=now,
            state=RunnerState.CONFLICT,
        )
        return None
    if (advert.host, advert.port) != (known["host"], known["port"]):
        return advert.host, advert.port  # nothing stored before the pinned key answers there
    store.set_runner(name, props=props, last_seen=now)
    return None


async def answers_with_key(client_key: asyncssh.SSHKey, host: str, port: int, key: str) -> bool:
    """Whether a server at host:port proves it holds `key` (refusing our key still proves it:
    the host key is checked in the key exchange, before authentication)."""
    try:
        session = await RunnerSession.open(host, port, client_key, key, timeout=PROBE_TIMEOUT_S)
    except RunnerRefused:
        return True
    except (HostKeyMismatch, LanpoolError):
        return False
    session.close()
    return True


async def fold_advert(store: Store, client_key: asyncssh.SSHKey, advert: "Advert") -> None:
    """`record_advert`, then a new address of a known runner checked against its pinned key."""
    moved = record_advert(store, advert)
    if moved is None:
        return
    host, port = moved
    row = store.runner(advert.name)
    key = host_key_or_none(row["host_key"]) if row else None
    if row is None or key is None:
        return
    if not await answers_with_key(client_key, host, port, key):
        log.warning(
            "runner %s was announced at %s:%d, where its pinned key does not answer: its address stays %s:%d",
            advert.name,
            host,
            port,
            row["host"],
            row["port"],
        )
        return
    log.info("runner %s moved to %s:%d (its pinned key answered there)", advert.name, host, port)
    store.set_runner(
        advert.name, host=host, port=port, props=json.dumps(bounded_props(advert.props)), last_seen=time.time()
    )


async def fold_browse(
    store: Store, client_key: asyncssh.SSHKey, adverts: list["Advert"], started_at: float, browsed_s: float
) -> None:
    """Everything one browse heard (from `started_at`, for `browsed_s` seconds): the
    adverts, then the conflicts whose claim it no longer heard are over: those last heard
    CONFLICT_HOLD_S before it began (a browse that heard nobody at all: SILENT_BROWSE_TRUSTED_AFTER_S)."""
    heard: dict[str, set[str]] = {}
    for advert in adverts:
        key = host_key_or_none(advert.host_key)
        if key is not None and isinstance(advert.name, str):
            heard.setdefault(advert.name, set()).add(key)
    for name, keys in heard.items():
        row = store.runner(name)
        if row is None or row.get("trusted") or host_key_or_none(row["host_key"]) in keys:
            continue
        # An untrusted runner's key is only a hint, and nobody announces it any more.
        advert, advert_key = min(
            ((a, k) for a in adverts if a.name == name and (k := host_key_or_none(a.host_key))),
            key=lambda ak: str(ak[0].service),
        )
        log.info("runner %s (not paired) is now announced with another host key: following it", name)
        store.upsert_runner(name, advert.host, advert.port, advert_key)
        clear_conflict(store, name)
    await asyncio.gather(*(fold_advert(store, client_key, a) for a in adverts))
    if browsed_s < MIN_CLEARING_BROWSE_S:
        return
    for row in store.runners():
        seen = row["conflict_seen"] or 0
        unheard_for = started_at - seen
        if row["conflict_key"] and unheard_for > (CONFLICT_HOLD_S if adverts else SILENT_BROWSE_TRUSTED_AFTER_S):
            log.info("the conflicting claim on runner %s is no longer heard: conflict over", row["name"])
            clear_conflict(store, row["name"])


def clear_conflict(store: Store, name: str) -> None:
    """The claim is gone; the state is the next probe's to say."""
    store.set_runner(name, conflict_key=None, conflict_service=None, conflict_seen=None)


def forget_claims(store: Store, service: str) -> list[str]:
    """A service said goodbye: the conflicts it made are over. Returns those runners' names."""
    names = [r["name"] for r in store.runners() if r["conflict_key"] and r["conflict_service"] == service]
    for name in names:
        clear_conflict(store, name)
    return names


def has_conflicts(store: Store) -> bool:
    return any(r["conflict_key"] for r in store.runners())
