"""g after a long follow: where the log view's window starts, from the stored line counts
(app/store/log_counts.py) instead of decoding the window again."""

import random

from lanpool.app.store import Store
from lanpool.app.store.log_counts import window_start
from lanpool.app.views import overview

JOB = "a1b2c3d4e5f6"


def _stored_log(tmp_path, seed: int = 3) -> Store:
    """One node's log as the agent sends it: chunks of 1-300 lines, stderr and metrics between."""
    rng = random.Random(seed)
    store = Store(tmp_path / "lanpool.db")
    store.create_run("calm-owl-1", "train", str(tmp_path))
    store.create_job(JOB, "calm-owl-1", "train", {"name": "gpu1", "host": "127.0.0.1", "port": 1}, {})
    rows, seq = [], 0
    for _ in range(400):
        stream = rng.choice(["out"] * 6 + ["err", "met", "sys"])
        n = rng.randint(1, 300) if stream == "out" else rng.randint(1, 3)
        data = b"".join(f"{stream} {seq + i}\n".encode() for i in range(n))
        rows.append((JOB, 0, seq, n, stream, data))
        seq += n
    store.add_log_chunks(rows)
    return store


def test_the_window_start_from_line_counts_is_where_reading_the_window_starts(tmp_path):
    store = _stored_log(tmp_path)
    total = sum(
        n
        for *_, n, stream, _d in store.conn.execute("SELECT job_id, n_lines, stream, data FROM log_chunks")
        if stream != "met"
    )
    for n in [1, 2, 7, 150, 299, 300, 301, 2000, 20_000, total - 1, total, total + 1, 10**6]:
        expected = overview.log_window(store, JOB, n).oldest[0]
        assert window_start(store.conn, JOB, 0, n, overview.LOG_STREAMS) == expected, n


def test_metric_lines_and_other_nodes_do_not_count(tmp_path):
    """The attack: counting the metric stream's lines, or another node's, starts the window too late."""
    store = _stored_log(tmp_path)
    store.add_log_chunks([(JOB, 1, 0, 10**5, "out", b"x\n" * 10**5)])  # a second node, much longer
    n = 2000
    with_met = window_start(store.conn, JOB, 0, n, ("out", "err", "sys", "met"))
    right = window_start(store.conn, JOB, 0, n, overview.LOG_STREAMS)
    assert right == overview.log_window(store, JOB, n, node=0).oldest[0]
    assert with_met > right  # metrics between: counted, they would leave real lines out of the window
    assert window_start(store.conn, JOB, 1, n, overview.LOG_STREAMS) == 10**5 - n
    assert window_start(store.conn, JOB, 2, n, overview.LOG_STREAMS) == 0  # no such node: nothing stored
