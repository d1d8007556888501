"""Trust is the controller's own record: a runner gets jobs only after the user paired it,
added it by address, or named its address with --runner. Real agents on loopback, real
mDNS on 127.0.0.1, the real CLI; each happy path next to the attack it must refuse.
The in-process part (unit); the rest: tests/integration/test_trust.py."""

import sqlite3


def test_store_from_before_trust_keeps_only_runners_added_by_address(tmp_path):
    """Migration 6: runners the user added by address stay trusted; those found by mDNS
    (which may only have accepted our key) must be paired or added again."""
    from lanpool.app.store import Store, migrations

    db_path = tmp_path / "old.db"
    raw = sqlite3.connect(db_path)
    import sqlite_utils

    db = sqlite_utils.Database(raw)
    for number, step in enumerate(migrations.MIGRATIONS[:5], start=1):
        step(db)
        raw.execute(f"PRAGMA user_version = {number}")
    for name, source in (("by-hand", "manual"), ("heard", "mdns")):
        raw.execute(
            "INSERT INTO runners (name, host, port, host_key, source, added_at, state, paired) "
            "VALUES (?, '10.0.0.1', 7422, 'k', ?, 1.0, 'LIVE', 1)",
            (name, source),
        )
    raw.commit()
    raw.close()
    store = Store(db_path)
    try:
        assert store.runner("by-hand")["trusted"] == 1 and store.runner("heard")["trusted"] == 0
    finally:
        store.close()
