"""The digits autoencoder recipe: its command line, its model, and a real DDP run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lanpool.training.autoencoder import AutoencoderConfig, LitAutoencoder, main, parse_config
from lanpool.training.runtime import run_cli

REPO_ROOT = Path(__file__).resolve().parents[2]
EPOCH_LINE = re.compile(r"^epoch (\d+) train_loss (\d+\.\d{4}) val_loss (\d+\.\d{4})$", re.MULTILINE)
# Set by a surrounding distributed launcher, they would make Lightning join
# that run instead of starting its own processes (with LOCAL_RANK set it starts
# no others and waits for them until it times out).
LAUNCHER_VARS = (
    "LOCAL_RANK",
    "NODE_RANK",
    "GROUP_RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "LANPOOL_NUM_NODES",
)


def test_no_flags_give_the_dataclass_defaults():
    assert parse_config([]) == AutoencoderConfig()


def test_nodes_default_to_lanpool_num_nodes_and_resume_takes_an_explicit_path(monkeypatch):
    monkeypatch.delenv("LANPOOL_NUM_NODES", raising=False)
    assert parse_config([]).num_nodes == 1
    monkeypatch.setenv("LANPOOL_NUM_NODES", "2")
    config = parse_config(["--ckpt-path", "ck/autoencoder.ckpt"])
    assert config.num_nodes == 2 and config.resolved_strategy() == "ddp"
    assert config.ckpt_path == "ck/autoencoder.ckpt"
    assert parse_config(["--num-nodes", "1"]).num_nodes == 1


@pytest.mark.parametrize(
    ("env", "argv", "message"),
    [
        ({"LANPOOL_NUM_NODES": "two"}, [], "LANPOOL_NUM_NODES must be a whole number, got 'two'"),
        ({"LANPOOL_DDP_TIMEOUT": "0"}, ["--devices", "2"], "LANPOOL_DDP_TIMEOUT must be at least 1, got 0"),
        ({}, ["--ckpt-path", "last"], "--ckpt-path needs an explicit checkpoint file, not 'last'"),
    ],
)
def test_bad_settings_are_one_line_and_exit_2(env, argv, message, monkeypatch, capsys):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert run_cli(main, argv) == 2
    assert capsys.readouterr().err == f"error: {message}\n"


def test_flags_are_parsed_into_typed_fields():
    config = parse_config(
        [
            "--max-epochs",
            "7",
            "--lr",
            "0.01",
            "--devices",
            "1",
            "--strategy",
            "ddp",
            "--out",
            "ck",
            "--val-fraction",
            "0.2",
        ]
    )
    assert config.max_epochs == 7 and isinstance(config.max_epochs, int)
    assert config.lr == 0.01 and isinstance(config.lr, float)
    assert config.devices == 1
    assert config.strategy == "ddp"
    assert config.out == "ck"
    assert config.val_fraction == 0.2


def test_a_bad_value_exits_with_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        parse_config(["--lr", "abc"])
    assert exited.value.code == 2
    assert "--lr" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("devices", "num_nodes", "strategy", "expected"),
    [(2, 1, "auto", "ddp"), (1, 2, "auto", "ddp"), (1, 1, "auto", "auto"), (1, 1, "ddp", "ddp")],
)
def test_auto_strategy_means_ddp_when_several_processes_take_part(devices, num_nodes, strategy, expected):
    config = AutoencoderConfig(devices=devices, num_nodes=num_nodes, strategy=strategy)
    assert config.resolved_strategy() == expected


def test_model_reconstructs_64_pixels_through_a_3_dim_latent():
    model = LitAutoencoder()
    x = torch.rand(5, 64)
    assert model.encoder(x).shape == (5, 3)
    assert model(x).shape == (5, 64)


@pytest.mark.slow
def test_the_demo_run_cuts_val_loss_5x_and_writes_a_loadable_checkpoint(tmp_path, capsys, monkeypatch):
    # The demo's settings (the defaults, as .lanpool/variables.yaml gives them): two DDP processes.
    epochs_n = AutoencoderConfig().max_epochs
    out = tmp_path / "ck"
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    metrics = tmp_path / "metrics.jsonl"
    env["LANPOOL_METRICS_FILE"] = str(metrics)
    result = subprocess.run(
        [sys.executable, "-m", "training.autoencoder", "--devices", "2", "--out", str(out)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr

    epochs = [(int(e), float(t), float(v)) for e, t, v in EPOCH_LINE.findall(result.stdout)]
    # One line per epoch, from rank zero only.
    assert [e for e, _, _ in epochs] == list(range(1, epochs_n + 1)), result.stdout
    assert re.search(r"^epoch 0 val_loss \d+\.\d{4}$", result.stdout, re.MULTILINE), result.stdout
    assert epochs[-1][2] < epochs[0][2], result.stdout

    checkpoint = out / "autoencoder.ckpt"
    assert f"saved checkpoint to {checkpoint}" in result.stdout
    model = LitAutoencoder.load_from_checkpoint(checkpoint)
    assert model.hparams.latent == 3
    assert model(torch.rand(2, 64)).shape == (2, 64)

    # Rank zero's metrics: one line per epoch mean, at increasing steps.
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert lines[0]["hparams"] == {"hidden": 32, "latent": 3, "lr": 0.01}
    val = [(r["epoch"], r["step"], r["value"]) for r in lines[1:] if r["name"] == "val_loss"]
    # First the untrained model's point (step 0, no epoch), then one per epoch.
    assert [e for e, _, _ in val] == [None, *range(epochs_n)]
    assert val[0][1] == 0 and [s for _, s, _ in val] == sorted({s for _, s, _ in val})
    # Real learning, what the demo shows: the validation loss falls at least 5x.
    assert val[0][2] / val[-1][2] >= 5, val
    assert [r["value"] for r in lines[1:] if r["name"] == "train_loss"] == pytest.approx(
        [t for _, t, _ in epochs], abs=1e-4
    )

    # Resumed in one process from the 2-process checkpoint: epoch 3 follows epoch 2.
    monkeypatch.setenv("LANPOOL_METRICS_FILE", str(tmp_path / "resumed.jsonl"))
    assert (
        run_cli(
            main,
            [
                "--max-epochs",
                str(epochs_n + 1),
                "--devices",
                "1",
                "--num-nodes",
                "1",
                "--out",
                str(tmp_path / "resumed"),
                "--ckpt-path",
                str(checkpoint),
            ],
        )
        == 0
    )
    stdout = capsys.readouterr().out
    assert [int(e) for e, _, _ in EPOCH_LINE.findall(stdout)] == [epochs_n + 1], stdout
    assert "epoch 0 val_loss" not in stdout  # a resumed run's curve already has its start
    resumed_ckpt = torch.load(tmp_path / "resumed" / "autoencoder.ckpt", weights_only=False)
    assert resumed_ckpt["global_step"] > torch.load(checkpoint, weights_only=False)["global_step"]
