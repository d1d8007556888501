"""Followed log lines are stored a transaction at a time (app/store/log_batch.py): few commits
for a flood, nothing lost or doubled, a quiet job's last lines stored anyway, bounded memory."""

import asyncio
import sqlite3
import time

import pytest

from lanpool.app.store import Store
from lanpool.app.store.log_batch import LogBatch


def _rows(first_seq: int, n: int, per_row: int = 10) -> list[tuple]:
    return [
        ("j1", 0, seq, per_row, "out", b"".join(b"%010d\n" % i for i in range(seq, seq + per_row)), 0)
        for seq in range(first_seq, first_seq + n * per_row, per_row)
    ]


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "lanpool.db")
    s.create_run("quick-fox-1", "echo", "/proj")
    s.create_job("j1", "quick-fox-1", "echo", {"name": "r", "host": "127.0.0.1", "port": 1}, {})
    yield s
    s.close()


def _stored_lines(store: Store) -> list[int]:
    return [int(line) for _n, _s, _st, data in store.log_chunks("j1") for line in data.split()]


def test_a_flood_is_stored_in_few_commits_with_every_line_once(store):
    batch = store.log_batch()
    for i in range(2000):  # 2000 SSH batches of 10 chunks: 200k lines, seconds of work at most
        batch.add(_rows(i * 100, 10))
    batch.add(_rows(0, 10))  # a chunk seen twice (a re-attach) is kept once
    batch.flush()
    assert _stored_lines(store) == list(range(200_000))
    assert batch.commits < 200, f"{batch.commits} commits for 2001 batches: not batched"


def test_each_batch_alone_would_commit_every_time(store):
    """The attack on the test above: with no time or size allowance every add commits."""
    batch = LogBatch(store.add_log_chunks, every_s=0.0)
    for i in range(50):
        batch.add(_rows(i * 100, 10))
    assert batch.commits == 50


def test_a_quiet_job_s_last_lines_are_stored_without_more_lines(store, tmp_path):
    async def follow() -> list[int]:
        batch = store.log_batch()
        batch.add(_rows(0, 3))
        other = sqlite3.connect(tmp_path / "lanpool.db")  # another process's view
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                got = other.execute("SELECT COALESCE(SUM(n_lines), 0) FROM log_chunks").fetchone()[0]
                if got:
                    return [got]
            return []
        finally:
            other.close()

    assert asyncio.run(follow()) == [30]


def test_memory_is_bounded_by_size(store):
    batch = LogBatch(store.add_log_chunks, every_s=3600, max_bytes=64 * 1024)
    for i in range(500):
        batch.add(_rows(i * 100, 10))
        assert batch._bytes < 64 * 1024 + 2000  # at most one batch over the bound, then stored
    batch.flush()
    assert len(_stored_lines(store)) == 50_000


def test_a_failed_commit_keeps_the_rows_for_the_next(store):
    calls = []

    def flaky(rows):
        calls.append(len(rows))
        if len(calls) == 1:
            raise sqlite3.OperationalError("database is locked")
        store.add_log_chunks(rows)

    batch = LogBatch(flaky, every_s=3600)
    batch.add(_rows(0, 5))
    with pytest.raises(sqlite3.OperationalError):
        batch.flush()
    batch.add(_rows(50, 5))
    batch.flush()
    assert _stored_lines(store) == list(range(100))
