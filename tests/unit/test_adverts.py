"""app/runners/adverts.py with no network: what one browse that heard nobody at all does to a
recorded name conflict. Found in CI under load: `run` browsed 1.5 s, heard nothing (not even the
runner's own advert), ended a conflict heard seconds before, and sent the job. The parts that
need adverts answering (each is probed): tests/integration/test_mdns_hints.py."""

import asyncio
import time

import asyncssh

from lanpool.app.runners.adverts import CONFLICT_HOLD_S, SILENT_BROWSE_TRUSTED_AFTER_S, fold_browse
from lanpool.app.runners.discovery import Advert
from lanpool.app.store import Store


def _key() -> str:
    return asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


def test_a_browse_that_heard_nobody_ends_only_a_claim_not_heard_for_long(tmp_path):
    store = Store(tmp_path / "lanpool.db")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    now = time.time()
    for name, seen in [("recent", now - 5), ("stale", now - SILENT_BROWSE_TRUSTED_AFTER_S - 60)]:
        store.upsert_runner(name, "127.0.0.1", 7422, _key(), trusted=True)
        store.set_runner(name, conflict_key=_key(), conflict_service=f"{name}-forger", conflict_seen=seen)
    asyncio.run(fold_browse(store, client_key, [], now, 1.5))
    recent, stale = store.runner("recent"), store.runner("stale")
    assert recent is not None and recent["conflict_key"], "a claim heard 5 s ago ended by a browse that heard nobody"
    assert stale is not None and stale["conflict_key"] is None, "a claim unheard for minutes outlives silent browses"
    # A browse too short to trust ends none, however old.
    store.set_runner("stale", conflict_key=_key(), conflict_service="x", conflict_seen=now - 10_000)
    asyncio.run(fold_browse(store, client_key, [], now, 0.5))
    assert store.runner("stale")["conflict_key"]
    store.close()


def test_a_browse_that_heard_the_runner_but_not_the_claim_ends_it_only_once_unheard_for_a_while(tmp_path):
    """Found in CI under load: `run` right after `runners` showed the conflict heard the runner's
    own advert but not the forger's (it answered after the 1.5 s browse) and sent the job."""
    store = Store(tmp_path / "lanpool.db")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    now = time.time()
    own = {}
    for name, seen in [("recent", now - 2), ("gone", now - CONFLICT_HOLD_S - 5)]:
        own[name] = _key()
        store.upsert_runner(name, "127.0.0.1", 7422, own[name], trusted=True)
        store.set_runner(name, conflict_key=_key(), conflict_service=f"{name}-forger", conflict_seen=seen)
    heard = [Advert(name, "127.0.0.1", 7422, key, {"name": name}, f"{name}-own") for name, key in own.items()]
    asyncio.run(fold_browse(store, client_key, heard, now, 1.5))
    recent, gone = store.runner("recent"), store.runner("gone")
    assert recent is not None and recent["conflict_key"], "a claim heard 2 s ago ended by one browse that missed it"
    assert gone is not None and gone["conflict_key"] is None, "a claim unheard past the hold outlives browses"
    store.close()
