"""`compare`'s rows (app/views/compare.py) and where they come from in the store, on a real
SQLite file. The CLI on a real agent: tests/integration/test_compare.py."""

import json
import math
from pathlib import Path

import pytest

from lanpool.app.home import ControllerHome
from lanpool.app.store import Store
from lanpool.app.views.compare import better_is, compare
from lanpool.app.views.runs import Runs

RUNNER = {"name": "gpu-box", "host": "10.0.0.5", "port": 2222}


def _points(name: str, values: list[float], first_step: int = 100) -> list[dict]:
    return [{"step": first_step * (k + 1), "name": name, "value": v} for k, v in enumerate(values)]


@pytest.mark.parametrize(
    ("name", "mode"),
    [
        ("val_loss", "min"),
        ("train/loss_epoch", "min"),
        ("perplexity", "min"),
        ("val_acc", "max"),
        ("top1_accuracy", "max"),
        ("valacc", "max"),
        ("f1", "max"),
        ("eval/reward", "max"),
        ("BLEU", "max"),
        ("error_rate", "min"),
    ],
)
def test_which_way_is_better_is_read_from_the_name(name, mode):
    assert better_is(name) == mode
    assert better_is(name, "max" if mode == "min" else "min") != mode  # --mode wins


def _met(store: Store, job_id: str, points: list, node: int = 0, seq: int = 0) -> int:
    """Store `points` as one "met" chunk, as a follower does; returns the seq after it."""
    data = "".join((p if isinstance(p, str) else json.dumps(p)) + "\n" for p in points).encode()
    store.add_log_chunks([(job_id, node, seq, len(points), "met", data)])
    return seq + len(points)


def _summary(store: Store, job_id: str, name: str, mode: str) -> dict | None:
    jobs = [store.job(job_id)]
    seen = compare(jobs, {}, store.metric_summaries([job_id]), metrics=[name], mode=mode)
    return seen.rows[0]["metrics"][name]


def test_best_is_the_first_point_that_reached_it_and_a_nan_is_never_best(tmp_path: Path):
    store = Store(tmp_path / "lanpool.db")
    _job(store, "a", "run-a")
    logged = _points("val_loss", [2.0, 1.5, 1.5, 1.7])
    seq = _met(store, "a", logged[:2])  # in three chunks, as a follower stores them
    seq = _met(store, "a", logged[2:], seq=seq)
    nan = {"step": 500, "name": "val_loss", "value": math.nan}
    _met(store, "a", [nan, {"step": 600, "name": "other", "value": 0.0}], seq=seq)
    s = _summary(store, "a", "val_loss", "min")
    assert s is not None
    assert (s["best"], s["best_step"], s["last"], s["last_step"], s["points"]) == (1.5, 200, None, 500, 5)
    high = _summary(store, "a", "val_loss", "max")
    assert high is not None and (high["best"], high["best_step"]) == (2.0, 100)
    assert _summary(store, "a", "nosuch", "min") is None
    store.close()


def test_a_chunk_that_comes_twice_counts_once_and_order_is_the_logs(tmp_path: Path):
    """A follower that re-attaches sends chunks again; nodes' chunks arrive interleaved."""
    store = Store(tmp_path / "lanpool.db")
    _job(store, "a", "run-a")
    _met(store, "a", _points("val_loss", [1.0]), node=1, seq=0)  # node 1's first: a later place than node 0's
    _met(store, "a", _points("val_loss", [3.0, 1.0], first_step=10), node=0, seq=0)
    _met(store, "a", _points("val_loss", [3.0, 1.0], first_step=10), node=0, seq=0)  # again: ignored
    s = _summary(store, "a", "val_loss", "min")
    assert s is not None and s["points"] == 3
    assert (s["best"], s["best_step"]) == (1.0, 20)  # equal bests: node 0's, logged first
    assert (s["last"], s["last_step"]) == (1.0, 100)  # the last: node 1's
    store.close()


def test_hostile_points_are_not_numbers_and_names_are_text(tmp_path: Path):
    store = Store(tmp_path / "lanpool.db")
    _job(store, "a", "run-a")
    hostile = [
        {"step": "a" * 10_000, "name": 7, "value": "1e9"},  # a string is no number
        {"step": 1, "name": "7", "value": True},  # nor is a boolean
        {"step": 2, "name": "7", "value": 1e308 * 10},  # inf
        '{"step": 3, "name": "7", "value": ' + "9" * 400 + "}",  # an integer no float holds
        "not json at all",
        '{"name": "7", "value": 1}',  # no step: not a point
        "[1, 2, 3]",
        '{"step": 4, "name": "7", "value": 1}, {"step": 5, "name": "7", "value": 0}',  # two values on a line
    ]
    _met(store, "a", hostile)
    s = _summary(store, "a", "7", "min")
    assert s is not None and s["best"] is None and s["last"] is None and s["points"] == 4
    store.close()


def test_metrics_stored_before_the_summaries_are_summed_up_by_the_migration(tmp_path: Path):
    from lanpool.app.store.metric_summaries import rebuild

    store = Store(tmp_path / "lanpool.db")
    _job(store, "a", "run-a")
    _met(store, "a", _points("val_loss", [2.0, 0.5, 1.0]))
    before = store.metric_summaries(["a"])
    rebuild(store.conn)  # what migration 14 runs on a store that has metrics already
    assert store.metric_summaries(["a"]) == before and before["a"]["val_loss"].low == 0.5
    store.delete_runs(["run-a"])
    assert store.metric_summaries(["a"]) == {"a": {}}  # deleted with its job
    store.close()


def _job(store: Store, job_id: str, run: str, workflow: str = "train", inputs: dict | None = None) -> None:
    if not store.run_name_taken(run):
        store.create_run(run, workflow, "/proj", variables={"lr": "run-level", "epochs": 3})
    store.create_job(job_id, run, workflow, RUNNER, {}, cache_key="k" + job_id, cache_inputs=inputs)


def test_rows_show_the_variables_that_differ_and_sort_by_the_best(tmp_path: Path):
    store = Store(tmp_path / "lanpool.db")
    _job(store, "a", "run-a", inputs={"variables": {"lr": "0.1", "epochs": 3}})
    _job(store, "b", "run-b", inputs={"variables": {"lr": "0.01", "epochs": 3}})
    _job(store, "c", "run-c", inputs={"variables": {"lr": "0.001", "epochs": 3}})
    jobs = [store.job(i) for i in "abc"]
    variables = {i: store.job_variables(i) for i in "abc"}
    _met(store, "a", _points("val_loss", [1.0, 0.9]) + _points("gpu0_util", [50.0]))
    _met(store, "b", _points("val_loss", [0.8, 0.5, 0.6]) + _points("val_acc", [0.7, 0.9]))
    points = store.metric_summaries("abc")
    seen = compare(jobs, variables, points, sort="val_loss")
    assert seen.varying == ["lr"]  # epochs is the same everywhere
    assert seen.metrics == ["val_acc", "val_loss"]  # the runner's GPU samples are not the job's metrics
    assert [r["job_id"] for r in seen.rows] == ["b", "a", "c"]  # best first; without the metric, last
    b = seen.rows[0]["metrics"]
    assert b["val_loss"] == {"last": 0.6, "last_step": 300, "best": 0.5, "best_step": 200, "mode": "min", "points": 3}
    assert b["val_acc"]["best"] == 0.9 and b["val_acc"]["mode"] == "max"
    assert seen.rows[1]["metrics"]["val_acc"] is None
    by_acc = compare(jobs, variables, points, metrics=["val_acc"], sort="val_acc")
    assert by_acc.metrics == ["val_acc"] and [r["job_id"] for r in by_acc.rows] == ["b", "a", "c"]
    assert [r["job_id"] for r in compare(jobs, variables, points, sort="val_loss", mode="max").rows] == ["a", "b", "c"]
    json.dumps(seen.rows)  # what --json prints
    store.close()


def test_a_run_compares_its_own_workflows_jobs_and_variables_fall_back_to_the_runs(tmp_path: Path):
    store = Store(tmp_path / "lanpool.db")
    _job(store, "prep1", "run-a", workflow="train", inputs=None)  # the run was created for `train`
    store.create_job("dep1", "run-a", "prepare", RUNNER, {})
    _job(store, "x1", "run-b", inputs={"variables": {"lr": "0.5"}})
    store.conn.execute("UPDATE jobs SET cache_inputs = '{not json' WHERE id = 'x1'")  # a damaged row
    runs = Runs(store, ControllerHome(tmp_path / "home"))
    seen = runs.compared(["run-a", "run-b", "prep1"])  # a job named twice is one row
    assert [r["job_id"] for r in seen.rows] == ["prep1", "x1"]  # `prepare`'s job is a dependency: left out
    assert seen.rows[0]["variables"] == {"lr": "run-level", "epochs": 3}  # no inputs recorded: the run's
    assert seen.rows[1]["variables"] == {"lr": "run-level", "epochs": 3}  # unreadable inputs: the run's too
    assert runs.compared(["dep1"]).rows[0]["workflow"] == "prepare"  # by job id: that job
    assert store.job_variables("nosuch") == {}
    store.close()
