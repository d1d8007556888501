"""A sweep in the TUI (issue #36), driven by Textual's pilot over a store filled here: its points
grouped under their run in Runs, each named by its variables; Metrics overlaying one metric across
the points (or the jobs marked with space), a colour and a legend entry each, a table best first,
`o` cycling the metric; and what a hostile job writes (escapes, 10k-character values, a thousand
jobs marked) kept out of the layout. Asserts on what the widgets were given, not only that
nothing crashed. In-process: no agent, no network (every job is synced: nothing is asked of a
runner)."""

import asyncio
import functools
import json
from pathlib import Path

import pytest

pytest.importorskip("textual")

from lanpool.app.controller import Controller  # noqa: E402
from lanpool.app.home import ControllerHome  # noqa: E402
from lanpool.app.tui.app import LanpoolApp  # noqa: E402
from lanpool.app.tui.panes.runs import RunsPane  # noqa: E402
from lanpool.app.tui.widgets.metrics_chart import MetricsChart  # noqa: E402
from lanpool.app.tui.widgets.overlay_chart import OverlayChart, OverlayTable  # noqa: E402
from lanpool.app.tui.widgets.tables import RunsTable  # noqa: E402
from lanpool.app.views import overlay  # noqa: E402

NOW = 1_780_000_000.0
SIZE = (160, 45)
RUNNER = {"name": "gpu-box", "host": "10.0.0.5", "port": 2222}
SWEEP = "wise-owl-1"
# job id -> (its point, its val_loss curve): the best val_loss is 0.9, 0.5, 0.7, 0.3 in turn.
POINTS = {
    "aaaa00000001": ({"lr": "0.0001", "batch": "32"}, [2.0, 1.2, 0.9]),
    "aaaa00000002": ({"lr": "0.0003", "batch": "32"}, [2.0, 0.5, 0.6]),
    "aaaa00000003": ({"lr": "0.0001", "batch": "64"}, [2.0, 0.7, 0.8]),
    "aaaa00000004": ({"lr": "0.0003", "batch": "64"}, [2.0, 1.0, 0.3]),
}
BY_BEST = ["aaaa00000004", "aaaa00000002", "aaaa00000003", "aaaa00000001"]
SINGLE = "bbbb00000001"  # a run of one train job


def pilot_test(test):
    @functools.wraps(test)
    def run(*args, **kwargs) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def _job(ctl: Controller, job_id: str, run: str, variables: dict, at: float, workflow: str = "train") -> None:
    store = ctl.store
    store.create_job(job_id, run, workflow, RUNNER, {"artifacts": []}, cache_key="k" + job_id,
                     cache_inputs={"variables": variables})  # fmt: skip
    # synced: everything is known, so the app never asks a runner (none answers in the unit tier).
    store.set_job_status(job_id, "DONE", submitted_at=at, started_at=at, finished_at=at + 60, exit_code=0, synced=1)


def _met(ctl: Controller, job_id: str, points: list[dict]) -> None:
    """The points as one "met" chunk, as a follower stores them."""
    data = "".join(json.dumps(p) + "\n" for p in points).encode()
    ctl.store.add_log_chunks([(job_id, 0, 0, len(points), "met", data)])


def _curve(name: str, values: list[float]) -> list[dict]:
    return [{"step": 10 * (k + 1), "name": name, "value": v} for k, v in enumerate(values)]


def fill(ctl: Controller) -> None:
    ctl.store.create_run(SINGLE[:4] + "-run", "train", "/p", variables={"lr": "0.01", "batch": "16"})
    _job(ctl, SINGLE, SINGLE[:4] + "-run", {"lr": "0.01", "batch": "16"}, NOW - 7200)
    _met(ctl, SINGLE, _curve("val_loss", [1.5, 0.8]) + _curve("train_loss", [1.4, 0.7]))
    # A sweep's run holds each swept variable as its list of values; each point's own are its job's.
    ctl.store.create_run(SWEEP, "train", "/p", variables={"lr": ["0.0001", "0.0003"], "batch": ["32", "64"]})
    for k, (job_id, (point, val)) in enumerate(POINTS.items()):
        _job(ctl, job_id, SWEEP, {**point, "epochs": 3}, NOW - 600 + k)
        train = [2.0, 1.5 - min(val)]  # the other way round: ranked by train_loss the order turns
        gpu = [{"step": 1, "name": "gpu0_util", "value": 90}]
        _met(ctl, job_id, _curve("val_loss", val) + _curve("train_loss", train) + gpu)


def make_app(project: Path, ctl: Controller) -> LanpoolApp:
    return LanpoolApp(project_dir=project, controller=ctl, clock=lambda: NOW, discover=False, probe_every_s=0)


@pytest.fixture
def app(tmp_path: Path, make_project) -> LanpoolApp:
    project = make_project("workflows:\n  - name: train\n    commands: ['echo ${{ lr }} ${{ batch }}']\n")
    ctl = Controller(ControllerHome(tmp_path / "home"))
    fill(ctl)
    return make_app(project, ctl)


async def until(pilot, check, what: str, tries: int = 300):
    for _ in range(tries):
        value = check()
        if value:
            return value
        await pilot.pause(0.02)
    raise AssertionError(f"never: {what}")


async def highlight(pilot, job_id: str) -> None:
    app = pilot.app
    await until(pilot, lambda: job_id in app.runs.table.rows, f"{job_id}'s row")
    app.runs.move_to(job_id)
    await until(pilot, lambda: app.job_id == job_id, f"{job_id} shown")


def run_cells(app: LanpoolApp) -> dict[str, str]:
    table = app.query_one(RunsTable)
    return {key.value: str(table.get_cell(key.value, "run")) for key in table.rows}


def overlay_of(app: LanpoolApp) -> OverlayChart:
    return app.query_one(OverlayChart)


def table_order(app: LanpoolApp) -> list[str]:
    return [key.value for key in app.query_one(OverlayTable).rows]


@pilot_test
async def test_a_sweep_is_grouped_under_its_run_and_overlaid_in_metrics(app):
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.runs.table.rows) == 5, "the runs list")
        # Runs: the points together under their run, newest first, each named by what differs.
        keys = [key.value for key in app.runs.table.rows]
        assert keys == [*reversed(POINTS), SINGLE]
        cells = run_cells(app)
        assert cells["aaaa00000004"] == f"{SWEEP} ┬ lr=0.0003 batch=64"
        pad = " " * len(SWEEP)
        assert cells["aaaa00000003"] == f"{pad} ├ lr=0.0001 batch=64"
        assert cells["aaaa00000001"] == f"{pad} └ lr=0.0001 batch=32"
        assert cells[SINGLE] == SINGLE[:4] + "-run"  # a job alone: as before

        await highlight(pilot, "aaaa00000002")
        await pilot.press("4")
        chart = overlay_of(app)
        await until(pilot, lambda: chart.display and len(chart.data.curves) == 4, "4 curves")
        assert not app.query_one(MetricsChart).display
        assert app.focused is app.query_one("#overlay-picker")
        data = chart.data
        assert data.metric == "val_loss"  # a validation loss first; never the GPU samples
        assert data.metrics[-1] == "gpu0_util" and "train_loss" in data.metrics
        labels = [c.label for c in data.curves]
        assert labels == [" ".join(f"{k}={v}" for k, v in POINTS[j][0].items()) for j in BY_BEST]
        assert len({c.colour for c in data.curves}) == 4  # one colour each
        assert [c.values for c in data.curves][0] == POINTS[BY_BEST[0]][1]
        assert table_order(app) == BY_BEST  # best val_loss first
        table = app.query_one(OverlayTable)
        assert str(table.get_cell(BY_BEST[0], "best")) == "0.3"
        assert str(table.get_cell(BY_BEST[0], "step")) == "30"
        assert str(table.get_cell(BY_BEST[0], "point")) == "lr=0.0003 batch=64"
        assert f"sweep {SWEEP} (4 points)" in data.title and data.note == ""

        # o: the next metric (train_loss), ranked by it; O back; the picker says which.
        await pilot.press("o")
        await until(pilot, lambda: chart.data.metric == "train_loss", "train_loss overlaid")
        assert table_order(app) == list(reversed(BY_BEST))
        assert app.query_one("#overlay-picker").selected == ["train_loss"]
        await pilot.press("O")
        await until(pilot, lambda: chart.data.metric == "val_loss", "back to val_loss")
        assert table_order(app) == BY_BEST

        # Nothing new: a tick gives the chart nothing again.
        given = chart.data
        app.metrics.refresh_metrics()
        await pilot.pause()
        assert chart.data is given

        # New points for one point: only they are read; the ranking follows.
        _met_more = [{"step": 40, "name": "val_loss", "value": 0.1}]
        data_bytes = "".join(json.dumps(p) + "\n" for p in _met_more).encode()
        app.ctl.store.add_log_chunks([("aaaa00000001", 0, 10, 1, "met", data_bytes)])
        app.metrics.refresh_metrics()
        await until(pilot, lambda: table_order(app)[0] == "aaaa00000001", "the new best first")
        reader = app.metrics.overlay.readers["aaaa00000001"]
        assert len(reader.points) == 7  # 6 read at first, the new one after them


@pilot_test
async def test_marked_jobs_of_different_runs_are_overlaid_and_a_job_alone_is_as_before(app):
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.runs.table.rows) == 5, "the runs list")
        # A job alone, nothing marked: its own metrics, every one, as before.
        await highlight(pilot, SINGLE)
        await pilot.press("4")
        chart = app.query_one(MetricsChart)
        await until(pilot, lambda: chart.display and sorted(chart._wanted[0]) == ["train_loss", "val_loss"], "own")
        assert not overlay_of(app).display

        await pilot.press("1")
        await highlight(pilot, "aaaa00000003")
        await pilot.press("space")
        await highlight(pilot, SINGLE)
        await pilot.press("space")
        await until(pilot, lambda: list(app.runs.marked) == ["aaaa00000003", SINGLE], "two marked")
        cells = run_cells(app)
        assert cells[SINGLE].startswith("● ") and cells["aaaa00000001"].startswith("  ")
        await pilot.press("4")
        over = overlay_of(app)
        await until(pilot, lambda: over.display and len(over.data.curves) == 2, "the two marked overlaid")
        labels = {c.label for c in over.data.curves}
        # Of two runs: each after its run's name, with the values that differ (epochs: one has none).
        assert labels == {f"{SWEEP} lr=0.0001 batch=64 epochs=3", "bbbb-run lr=0.01 batch=16"}
        assert table_order(app) == ["aaaa00000003", SINGLE]  # 0.7 before 0.8
        assert "2 marked jobs" in over.data.title

        # space again unmarks; u unmarks all: the highlighted job alone is shown as before.
        await pilot.press("1")
        await pilot.press("u")
        await until(pilot, lambda: not app.runs.marked, "none marked")
        await pilot.press("4")
        await until(pilot, lambda: chart.display and not over.display, "the job's own chart again")


def _hostile(ctl: Controller, n: int) -> list[str]:
    bad = "\x1b[2J\x1b]0;owned\x07" + "x" * 10_000
    ctl.store.create_run("evil-run-1", "train", "/p", variables={"lr": "list"})
    ids = []
    for k in range(n):
        job_id = f"eeee{k:08d}"
        ids.append(job_id)
        _job(ctl, job_id, "evil-run-1", {"lr": f"{bad}{k}", "\x1b[31mkey": "v"}, NOW - 100 + k)
        names = ["\x1b[31mval_loss\r\n" + "y" * 5000, "loss"]
        _met(ctl, job_id, [{"step": s, "name": nm, "value": 1.0 / (k + s + 1)} for s in range(3) for nm in names])
    return ids


@pilot_test
async def test_hostile_sweep_values_and_names_and_many_jobs_stay_in_the_layout(tmp_path, make_project):
    project = make_project("workflows:\n  - name: train\n    commands: ['true']\n")
    ctl = Controller(ControllerHome(tmp_path / "home"))
    ids = _hostile(ctl, 40)
    app = make_app(project, ctl)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(app.runs.table.rows) == 40, "the runs list")
        for cell in run_cells(app).values():
            assert "\x1b" not in cell and "\x07" not in cell and len(cell) < 80
        await highlight(pilot, ids[5])
        await pilot.press("4")
        over = overlay_of(app)
        await until(pilot, lambda: over.display and over.data.curves, "the overlay")
        data = over.data
        assert len(data.curves) == overlay.MAX_SERIES == 12
        assert "12 of 40 shown" in data.note and "12 of 40 shown" in data.title
        assert len(data.rows) == 40
        texts = [c.label for c in data.curves] + [data.title] + [str(cell) for _, row in data.rows for cell in row]
        for text in texts:
            assert "\x1b" not in text and "\x07" not in text and "\n" not in text and "\r" not in text
        assert all(len(c.label) <= overlay.LABEL_WIDTH for c in data.curves)
        assert len(data.title) < 200
        # The best 12 are drawn (the later jobs' values are lower: best for a loss).
        assert [r[0] for r in data.rows[:12]] == list(reversed(ids))[:12]
        # The hostile name reads as a validation loss: the default; shown safe and clipped.
        assert data.metric is not None and data.metric.startswith("\x1b[31mval_loss")
        assert data.title.startswith("val_loss^Myyy") and "…" in data.title  # colour dropped, the break shown
        await pilot.press("o")
        await until(pilot, lambda: over.data.metric == "loss", "the other metric")
        for option in app.query_one("#overlay-picker").options:
            assert "\x1b" not in str(option.prompt) and len(str(option.prompt)) <= overlay.NAME_WIDTH
        assert app.screen.size == (80, 24)


@pilot_test
async def test_a_thousand_marked_jobs_are_read_a_hundred_and_drawn_twelve(tmp_path, make_project):
    project = make_project("workflows:\n  - name: train\n    commands: ['true']\n")
    ctl = Controller(ControllerHome(tmp_path / "home"))
    ids = _hostile(ctl, 1000)
    app = make_app(project, ctl)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.runs.table.rows) > 0, "the runs list")
        app.runs.marked.update(dict.fromkeys(ids))
        app.runs.post_message(RunsPane.MarksChanged(ids))
        await pilot.press("4")
        over = overlay_of(app)
        await until(pilot, lambda: over.display and over.data.curves, "the overlay")
        assert len(over.data.curves) == 12
        assert len(app.metrics.overlay.readers) == overlay.MAX_JOBS
        assert f"the first {overlay.MAX_JOBS} of 1000 jobs read" in over.data.note
        assert "1000 marked jobs" in over.data.title


def test_overlay_read_model_pure_parts():
    assert overlay.metric_order(["gpu0_util", "lr", "train_loss", "val_loss", "acc"]) == [
        "val_loss",
        "train_loss",
        "acc",
        "lr",
        "gpu0_util",
    ]
    assert overlay.next_metric(["a", "b", "c"], "c") == "a"
    assert overlay.next_metric(["a", "b", "c"], "a", -1) == "c"
    assert overlay.next_metric([], None) is None
    labels = overlay.point_labels({"j1": {"lr": 1, "b": 2}, "j2": {"lr": 1, "b": 3}}, {"j1": "r", "j2": "r"})
    assert labels == {"j1": "b=2", "j2": "b=3"}
    same = overlay.point_labels({"j1": {"lr": 1}, "j2": {"lr": 1}}, {})
    assert same == {"j1": "j1", "j2": "j2"}  # nothing tells them apart: their ids
    rows = [
        {"job_id": "a", "metrics": {"acc": {"best": 0.5}}},
        {"job_id": "b", "metrics": {"acc": None}},
        {"job_id": "c", "metrics": {"acc": {"best": 0.9}}},
    ]
    assert [r["job_id"] for r in overlay.ranked(rows, "acc")] == ["c", "a", "b"]  # a score: highest first
