"""Read models for the front ends (app/views/overview.py) on a real SQLite store."""

import json
from pathlib import Path

import pytest

from lanpool.app.store import Store
from lanpool.app.views import overview

RUNNER = {"name": "gpu-box", "host": "10.0.0.5", "port": 2222}


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / "lanpool.db")
    yield s
    s.close()


def _job(
    store: Store, job_id: str, run: str, workflow: str = "train", variables: dict | None = None, tag: str | None = None
) -> None:
    store.create_run(run, workflow, "/p", tag, variables or {})
    store.create_job(job_id, run, workflow, RUNNER, {})


def _lines(store: Store, job_id: str, node: int, start: int, count: int, per_chunk: int, stream: str = "out"):
    """Store lines `start`..`start+count` of one node as the agent would: chunks of `per_chunk` lines."""
    rows = []
    for seq in range(start, start + count, per_chunk):
        n = min(per_chunk, start + count - seq)
        data = "".join(f"n{node} line {i}\n" for i in range(seq, seq + n)).encode()
        rows.append((job_id, node, seq, n, stream, data))
    store.add_log_chunks(rows)


def test_job_lines_newest_first_filtered_and_bounded(store):
    for i in range(30):
        _job(
            store, f"job{i:02d}", f"run-{i:02d}", "train" if i % 2 else "prepare", {"lr": i}, "best" if i == 7 else None
        )
    store.set_artifacts("job03", [("model.ckpt", 10), ("log.txt", 2)])
    lines = overview.job_lines(store, limit=10)
    assert [line.job.id for line in lines] == [f"job{i:02d}" for i in range(29, 19, -1)]
    assert [line.job.id for line in overview.job_lines(store, "prepare", limit=100)] == [
        f"job{i:02d}" for i in range(28, -1, -2)
    ]
    assert [line.job.id for line in overview.job_lines(store, "best")] == ["job07"]  # by tag
    assert [line.job.id for line in overview.job_lines(store, '"lr": 13')] == ["job13"]  # by variable
    assert overview.job_lines(store, "%") == []  # LIKE wildcards are literal
    three = overview.job_lines(store, "job03")[0]
    assert three.artifacts == 2 and three.runners == ("gpu-box",) and three.variables == {"lr": 3}
    store.set_job_status("job05", "FAILED", exit_code=3)
    failed = overview.job_lines(store, status="FAILED")
    assert [line.job.id for line in failed] == ["job05"] and failed[0].status_text == "FAILED (3)"


def test_log_window_is_the_tail_and_pages_back_without_gaps_or_repeats(store):
    _job(store, "j", "r")
    _lines(store, "j", 0, 0, 10_000, per_chunk=333)  # chunks straddle every page boundary
    _lines(store, "j", 0, 10_000, 50, per_chunk=1)  # then a slow tail, a line per chunk
    window = overview.log_window(store, "j", 1000)
    assert [ln.text for ln in window.lines] == [f"n0 line {i}" for i in range(9050, 10_050)]
    assert not window.at_start
    seen = [ln.text for ln in window.lines]
    while not window.at_start:
        window = overview.log_window(store, "j", 777, before=window.oldest)
        seen = [ln.text for ln in window.lines] + seen
    assert seen == [f"n0 line {i}" for i in range(10_050)]


def test_log_window_merges_nodes_by_line_number_and_filters_one(store):
    _job(store, "m", "r")
    _lines(store, "m", 0, 0, 100, per_chunk=7)
    _lines(store, "m", 1, 0, 60, per_chunk=5)
    store.add_log_chunks([("m", 0, 100, 1, "met", b'{"step": 1, "name": "loss", "value": 1.0}\n')])
    window = overview.log_window(store, "m", 1000)
    texts = [ln.text for ln in window.lines]
    assert len(texts) == 160 and window.at_start  # metrics are not log lines
    assert texts[:4] == ["[node 0] n0 line 0", "[node 1] n1 line 0", "[node 0] n0 line 1", "[node 1] n1 line 1"]
    only1 = overview.log_window(store, "m", 1000, node=1)
    assert [ln.text for ln in only1.lines] == [f"[node 1] n1 line {i}" for i in range(60)]
    # paging a merged log back also covers every line of every node exactly once
    window = overview.log_window(store, "m", 50)
    seen = [ln.text for ln in window.lines]
    while not window.at_start:
        window = overview.log_window(store, "m", 50, before=window.oldest)
        seen = [ln.text for ln in window.lines] + seen
    assert sorted(seen) == sorted(texts)


def test_stream_kinds_and_bad_bytes_are_kept_readable(store):
    _job(store, "e", "r")
    store.add_log_chunks(
        [
            ("e", 0, 0, 1, "out", b"ok\n"),
            ("e", 0, 1, 1, "err", b"bad \xff byte\n"),
            ("e", 0, 2, 1, "sys", b"job started\n"),
        ]
    )
    lines = overview.log_window(store, "e", 10).lines
    assert [(ln.stream, ln.text) for ln in lines] == [("out", "ok"), ("err", "bad \ufffd byte"), ("sys", "job started")]


def test_search_and_save_read_the_whole_stored_log(store, tmp_path):
    _job(store, "s", "r")
    _lines(store, "s", 0, 0, 5000, per_chunk=100)
    found = overview.search_log(store, "s", "LINE 42")  # case-insensitive
    assert (
        found
        == ["n0 line 42"]
        + [f"n0 line {i}" for i in range(420, 430)]
        + [f"n0 line {i}" for i in range(4200, 4300)][: 1000 - 11]
    )
    assert len(overview.search_log(store, "s", "line", limit=7)) == 7
    out = tmp_path / "saved.log"
    assert overview.save_log(store, "s", out) == 5000
    assert out.read_text().splitlines() == [f"n0 line {i}" for i in range(5000)]


def test_metrics_reader_reads_only_new_points_and_series_sort_by_step(store):
    _job(store, "t", "r")
    reader = overview.MetricsReader("t")
    assert reader.update(store) is False and reader.points == []

    def met(seq, points):
        data = "".join(json.dumps(p) + "\n" for p in points).encode()
        store.add_log_chunks([("t", 0, seq, len(points), "met", data)])

    met(0, [{"step": 2, "name": "train_loss", "value": 0.5}, {"step": 1, "name": "train_loss", "value": 0.9}])
    _lines(store, "t", 0, 2, 3, per_chunk=3)  # log lines between metrics
    assert reader.update(store) is True and len(reader.points) == 2
    met(
        5,
        [
            {"step": 2, "name": "val_loss", "value": 0.7},
            {"step": 3, "name": "train_loss", "value": None},
            "not a point",
            {"name": "no step"},
        ],
    )
    assert reader.update(store) is True and len(reader.points) == 4
    assert reader.update(store) is False  # nothing new: nothing re-read
    series = overview.metric_series(reader.points)
    assert series == {"train_loss": ([1, 2], [0.9, 0.5]), "val_loss": ([2], [0.7])}


def test_a_metrics_chunk_is_read_whole_and_line_by_line_only_when_it_must():
    from lanpool.app.store.metric_lines import json_lines as _json_lines

    good = b'{"step": 1, "name": "a", "value": 1}\n\n{"step": 2, "name": "a", "value": 2}\n'
    assert [p["step"] for p in _json_lines(good)] == [1, 2]
    assert [p["step"] for p in _json_lines(good.decode())] == [1, 2]  # text as bytes
    bad = b'{"step": 1, "name": "a"}\nnot json\n{"step": 2, "name": "a"}\n'
    assert [p["step"] for p in _json_lines(bad)] == [1, 2]  # the bad line alone is skipped
    two = b'{"step": 1, "name": "a"}, {"step": 9, "name": "a"}\n{"step": 2, "name": "a"}\n'
    assert [p["step"] for p in _json_lines(two)] == [2]  # a line of two values is no point, as before
    assert _json_lines(b"") == [] and _json_lines(b"\n  \n") == []
