"""Snapshots of the TUI's main screens (pytest-textual-snapshot), on a store filled
here with fixed ids, names and times, a fixed clock, and no discovery or probing:
the same screens on every machine. After a deliberate change to the look:
`pytest tests/integration/test_tui_snapshots.py --snapshot-update`, then look at the SVGs in
tests/integration/__snapshots__/test_tui_snapshots/ before committing them."""

import base64
import hashlib
import json
from pathlib import Path

import pytest

pytest.importorskip("pytest_textual_snapshot")

from lanpool.app.controller import Controller  # noqa: E402
from lanpool.app.home import ControllerHome  # noqa: E402
from lanpool.app.tui.app import LanpoolApp  # noqa: E402
from lanpool.app.tui.widgets.log_view import LogView  # noqa: E402
from lanpool.app.views.overview import LogLine  # noqa: E402
from tests.harness import REPO  # noqa: E402

NOW = 1_780_000_000.0  # the screens' "now"
SIZE = (140, 42)
# Relative to the repo root (the tests chdir there), so the header reads the same everywhere.
PROJECT = Path("tests/data/tui_project")
DONE_JOB = "a1b2c3d4e5f6"  # the job the Logs, Metrics and Artifacts screens show (third row)


def _host_key(name: str) -> str:
    """A valid ed25519 public key, the same on every machine (an unreadable one shows UNPAIRED)."""
    blob = b"".join(
        len(part).to_bytes(4, "big") + part for part in (b"ssh-ed25519", hashlib.sha256(name.encode()).digest())
    )
    return "ssh-ed25519 " + base64.b64encode(blob).decode()


def _runner(store, name: str, address: str, source: str, state: str, props: dict, last_seen: float) -> None:
    host, port = address.split(":")
    store.upsert_runner(name, host, int(port), _host_key(name), source=source)
    # Trusted (paired or added) unless shown UNPAIRED: found by mDNS is not enough (app/runners/pool.py).
    store.set_runner(
        name,
        state=state,
        paired=int(state != "UNPAIRED"),
        trusted=int(state != "UNPAIRED"),
        trusted_at=NOW - 86400,
        props=json.dumps(props),
        last_seen=last_seen,
    )


def _job(
    store,
    job_id: str,
    run: str,
    workflow: str,
    runner: str,
    status: str,
    submitted: float,
    started: float | None = None,
    finished: float | None = None,
    exit_code: int | None = None,
    error: str | None = None,
    cache_key: str | None = None,
) -> None:
    row = store.runner(runner)
    store.create_job(job_id, run, workflow, row, {"artifacts": []}, cache_key=cache_key)
    # synced: everything is known, so the app never asks a runner (none answers here).
    store.set_job_status(
        job_id,
        status,
        submitted_at=submitted,
        started_at=started,
        finished_at=finished,
        exit_code=exit_code,
        error=error,
        synced=1,
    )


def fill(ctl: Controller) -> None:
    store = ctl.store
    _runner(
        store,
        "gpu-box-1",
        "192.168.1.20:7422",
        "mdns",
        "LIVE",
        {"gpus": "2", "gpus_free": "1", "gpu_name": "NVIDIA A100", "executor": "docker", "gpu_util": "37,0"},
        NOW - 2,
    )
    _runner(
        store,
        "gpu-box-2",
        "192.168.1.21:7422",
        "manual",
        "OFFLINE",
        {"gpus": "4", "gpus_free": "4", "gpu_name": "RTX 4090", "executor": "docker"},
        NOW - 1800,
    )
    _runner(store, "laptop", "192.168.1.35:7422", "mdns", "UNPAIRED", {"executor": "process"}, NOW - 5)

    store.create_run("wild-lynx-1", "train", str(PROJECT), variables={"lr": "0.01", "epochs": "3"})
    _job(
        store,
        "f00dfeed0001",
        "wild-lynx-1",
        "train",
        "gpu-box-2",
        "FAILED",
        NOW - 7200,
        NOW - 7190,
        NOW - 7100,
        1,
        "exit code 1",
    )
    store.create_run(
        "calm-heron-2", "train", str(PROJECT), tag="v1", variables={"lr": "0.0003", "epochs": "3", "model": "small"}
    )
    # The Run dialog's plan for train reuses this prepare job: same inputs, artifacts at hand.
    prepare_key = ctl.plan(ctl.load_project(PROJECT), "train").jobs[0].key
    _job(
        store,
        "0d9e8f7a6b5c",
        "calm-heron-2",
        "prepare",
        "gpu-box-1",
        "DONE",
        NOW - 3800,
        NOW - 3795,
        NOW - 3760,
        0,
        cache_key=prepare_key,
    )
    tokens = ctl.home.job_artifacts("0d9e8f7a6b5c") / "data" / "tokens.txt"
    tokens.parent.mkdir(parents=True)
    tokens.write_text("tokens\n")
    _job(store, DONE_JOB, "calm-heron-2", "train", "gpu-box-1", "DONE", NOW - 3700, NOW - 3690, NOW - 2790, 0)
    store.create_run("brave-otter-3", "train", str(PROJECT), variables={"lr": "0.001", "epochs": "10"})
    _job(store, "7c41d09e2f18", "brave-otter-3", "train", "gpu-box-1", "RUNNING", NOW - 320, NOW - 300)
    store.create_run("quick-fox-4", "evaluate", str(PROJECT))
    store.queue_job("5e1f0c2a9b33", "quick-fox-4", "evaluate", "no runner has room: gpu-box-1 has 1 GPU free")
    store.set_job_status("5e1f0c2a9b33", "QUEUED", submitted_at=NOW - 20)

    store.set_artifacts("0d9e8f7a6b5c", [("data/tokens.txt", 7)])
    store.set_artifacts(
        DONE_JOB,
        [
            ("checkpoints/epoch=2-step=150.ckpt", 1_234_567),
            ("checkpoints/last.ckpt", 1_234_567),
            ("checkpoints/hparams.yaml", 96),
        ],
    )

    lines = [
        ("sys", "lanpool: job a1b2c3d4e5f6 on gpu-box-1 (process), 1 GPU: 0"),
        ("out", "train lr=0.0003 epochs=3 model=small"),
        ("err", "GPU available: True (cuda), used: True"),
        ("out", "Epoch 0: 100%|██████████| 50/50 [00:05<00:00, 9.81it/s, loss=1.93]"),
    ]
    lines += [("out", f"step {s:3d}  train_loss {2.0 * 0.97**s:.4f}") for s in range(0, 150, 10)]
    lines += [("err", "`Trainer.fit` stopped: `max_epochs=3` reached."), ("sys", "lanpool: exit code 0")]
    chunks, seq = [], 0
    for stream, text in lines:
        chunks.append((DONE_JOB, 0, seq, 1, stream, (text + "\n").encode()))
        seq += 1
    points = [{"step": s, "name": "train_loss", "value": round(2.0 * 0.97**s, 4)} for s in range(0, 150, 5)]
    points += [{"step": s, "name": "val_loss", "value": round(2.1 * 0.975**s + 0.05, 4)} for s in range(49, 150, 50)]
    data = "".join(json.dumps(p) + "\n" for p in points).encode()
    chunks.append((DONE_JOB, 0, seq, len(points), "met", data))
    store.add_log_chunks(chunks)


@pytest.fixture
def screen_app(tmp_path, monkeypatch) -> LanpoolApp:
    monkeypatch.chdir(REPO)
    ctl = Controller(ControllerHome(tmp_path / "home"))
    fill(ctl)
    return LanpoolApp(project_dir=PROJECT, controller=ctl, clock=lambda: NOW, discover=False, probe_every_s=0)


async def _on_done_job(pilot) -> None:
    """Highlight the DONE train job (third row), as a user moving down the list does."""
    await pilot.press("down", "down")
    await _until(pilot, lambda: pilot.app.job_id == DONE_JOB)


async def _logs_of_done_job(pilot, lines: int):
    """The DONE job's Logs tab with `lines` lines of its own (line-0, line-1, ...): its LogView."""
    await _on_done_job(pilot)
    await pilot.press("3")
    view = pilot.app.query_one(LogView)
    view.set_lines([LogLine(f"line-{i}", "out") for i in range(lines)], at_start=True)
    return view


async def _until(pilot, check, tries: int = 200) -> None:
    for _ in range(tries):
        if check():
            return
        await pilot.pause(0.02)
    raise AssertionError("the screen never got ready for its snapshot")


def test_runs_screen(snap_compare, screen_app):
    assert snap_compare(screen_app, terminal_size=SIZE)


def test_runners_screen(snap_compare, screen_app):
    assert snap_compare(screen_app, press=["2"], terminal_size=SIZE)


def test_logs_screen(snap_compare, screen_app):
    async def open_log(pilot):
        await _on_done_job(pilot)
        await pilot.press("enter")

    assert snap_compare(screen_app, terminal_size=SIZE, run_before=open_log)


def test_metrics_screen(snap_compare, screen_app):
    async def show_metrics(pilot):
        await _on_done_job(pilot)
        await pilot.press("4")

    assert snap_compare(screen_app, terminal_size=SIZE, run_before=show_metrics)


def test_artifacts_screen(snap_compare, screen_app):
    async def show_artifacts(pilot):
        await _on_done_job(pilot)
        await pilot.press("5")

    assert snap_compare(screen_app, terminal_size=SIZE, run_before=show_artifacts)


def test_run_dialog(snap_compare, screen_app):
    async def open_dialog(pilot):
        await pilot.press("r")
        pilot.app.screen.query_one("#workflow").value = "train"
        # The plan comes from a worker a moment later: wait for it.
        await _until(pilot, lambda: "REUSE" in str(pilot.app.screen.query_one("#plan").render()))

    assert snap_compare(screen_app, terminal_size=SIZE, run_before=open_dialog)


def test_help_screen(snap_compare, screen_app):
    assert snap_compare(screen_app, press=["question_mark"], terminal_size=SIZE)


# 80x24: the smallest usual terminal. STATUS stays on screen (other columns hide first),
# the key bar keeps `? Help` and `q Quit`, the Run dialog's runner field and buttons show.
SMALL = (80, 24)


def test_runs_screen_80x24(snap_compare, screen_app):
    assert snap_compare(screen_app, terminal_size=SMALL)


def test_runners_screen_80x24(snap_compare, screen_app):
    assert snap_compare(screen_app, press=["2"], terminal_size=SMALL)


def test_logs_screen_80x24(snap_compare, screen_app):
    async def open_log(pilot):
        await _on_done_job(pilot)
        await pilot.press("enter")

    assert snap_compare(screen_app, terminal_size=SMALL, run_before=open_log)


def test_metrics_screen_80x24(snap_compare, screen_app):
    async def show_metrics(pilot):
        await _on_done_job(pilot)
        await pilot.press("4")

    assert snap_compare(screen_app, terminal_size=SMALL, run_before=show_metrics)


def test_run_dialog_80x24(snap_compare, screen_app):
    async def open_dialog(pilot):
        await pilot.press("r")
        pilot.app.screen.query_one("#workflow").value = "train"
        await _until(pilot, lambda: "REUSE" in str(pilot.app.screen.query_one("#plan").render()))

    assert snap_compare(screen_app, terminal_size=SMALL, run_before=open_dialog)
