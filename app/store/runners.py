"""The runners table: each runner this controller knows, its address, pinned key and trust."""

import time
from typing import Any

from lanpool.app.errors import NotFoundError
from lanpool.app.store.rows import JOB_COLS, JobRow, Table
from lanpool.app.store.transactions import atomic


class RunnerRows(Table):
    def runner(self, name: str) -> dict[str, Any] | None:
        rows = self._dicts("SELECT * FROM runners WHERE name = ?", (name,))
        return rows[0] if rows else None

    def known_runner(self, name: str) -> dict[str, Any]:
        """The runner's row, which the caller knows is there (NotFoundError if it was removed meanwhile)."""
        row = self.runner(name)
        if row is None:
            raise NotFoundError(f"no runner {name!r}: `app headless runners` lists them")
        return row

    def runner_by_address(self, host: str, port: int) -> dict[str, Any] | None:
        """The runner at an address, a trusted one first: an advert may put another name there."""
        rows = self._dicts(
            "SELECT * FROM runners WHERE host = ? AND port = ? ORDER BY COALESCE(trusted, 0) DESC, added_at LIMIT 1",
            (host, port),
        )
        return rows[0] if rows else None

    def runners(self) -> list[dict[str, Any]]:
        return self._dicts("SELECT * FROM runners ORDER BY name")

    def set_runner(self, name: str, **fields: object) -> None:
        """Update runner columns (state, paired, trusted, props, conflict_*, last_ok, last_seen, host, port).

        `trusted=1` is the user's act (pairing, `runners add`, `--runner HOST:PORT`): it also
        records when, unless `trusted_at` is given."""
        allowed = {
            "state",
            "paired",
            "props",
            "conflict_key",
            "conflict_service",
            "conflict_seen",
            "last_ok",
            "last_seen",
            "host",
            "port",
            "host_key",
            "source",
            "trusted",
            "trusted_at",
        }
        assert set(fields) <= allowed, fields  # column names are code, never input
        if fields.get("trusted") and "trusted_at" not in fields:
            fields["trusted_at"] = time.time()
        with atomic(self.conn):
            assignments = ", ".join(f"{c} = ?" for c in fields)
            self.conn.execute(f"UPDATE runners SET {assignments} WHERE name = ?", (*fields.values(), name))

    def running_jobs(self, runner: str) -> list[JobRow]:
        rows = self.conn.execute(
            f"SELECT {JOB_COLS} FROM jobs WHERE runner = ? AND status IN ('SUBMITTED', 'RUNNING')", (runner,)
        )
        return [JobRow(*r) for r in rows]

    def remove_runner(self, name: str) -> bool:
        with atomic(self.conn):
            return self.conn.execute("DELETE FROM runners WHERE name = ?", (name,)).rowcount > 0

    def upsert_runner(
        self, name: str, host: str, port: int, host_key: str, source: str = "manual", trusted: bool | None = None
    ) -> None:
        """Add a runner, or set a known one's address and key (callers check the key first).

        Another runner at the same address is left alone: an mDNS advert can put any name
        anywhere, and must never delete a pinned runner (app/runners/adverts.py)."""
        now = time.time()
        trust = None if trusted is None else int(trusted)
        with atomic(self.conn):
            self.conn.execute(
                """INSERT INTO runners (name, host, port, host_key, source, added_at, last_seen, trusted, trusted_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, COALESCE(?, 0), CASE WHEN ? = 1 THEN ? END)
                   ON CONFLICT(name) DO UPDATE SET host=excluded.host, port=excluded.port,
                     host_key=excluded.host_key, last_seen=excluded.last_seen,
                     trusted=COALESCE(?, trusted),
                     trusted_at=CASE WHEN ? = 1 THEN excluded.trusted_at ELSE trusted_at END""",
                (name, host, port, host_key, source, now, now, trust, trust, now, trust, trust),
            )
