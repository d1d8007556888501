"""The controller's SQLite store, on a real temp file.
The part with real agents and the CLI (integration); the rest: tests/unit/test_store.py."""

import os
import stat

from lanpool.app.home import ControllerHome
from lanpool.app.store import Store
from tests.unit.test_store import RUNNER, _job, db_path, store  # noqa: F401 (fixtures, used by name)


def test_the_database_is_its_users_alone(tmp_path, cli):
    """Logs and `--env` values live in it: 0600, its WAL too; a fresh home is 0700, and a
    database an older lanpool made 0644 is tightened when next opened."""
    home = ControllerHome.default()  # conftest's LANPOOL_HOME, not made yet
    cli("headless", "status", check=True)
    store = Store(home.db)
    _job(store, "j1")
    mode = {p.name: stat.S_IMODE(p.stat().st_mode) for p in home.root.iterdir() if p.name.startswith("lanpool.db")}
    store.close()
    assert stat.S_IMODE(home.root.stat().st_mode) == 0o700
    assert mode and set(mode.values()) == {0o600} and "lanpool.db-wal" in mode, mode
    os.chmod(home.db, 0o644)  # as an older lanpool left it
    Store(home.db).close()
    assert stat.S_IMODE(home.db.stat().st_mode) == 0o600
