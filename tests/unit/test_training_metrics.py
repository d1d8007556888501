"""The JSON-lines metrics logger the agent tails: its lines, its path, and a real fit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_only
from torch.utils.data import DataLoader, TensorDataset

from lanpool.training.metrics import DEFAULT_FILE, ENV_VAR, LanpoolMetrics


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_one_line_per_metric_with_step_epoch_name_value_time(tmp_path):
    path = tmp_path / "m.jsonl"
    logger = LanpoolMetrics(str(path))
    logger.log_metrics({"train_loss": 2.5, "tokens_per_s": 1000.0, "epoch": 3.0}, step=49)
    # Readable before the logger is finalized or dropped: a tail sees it at once.
    lines = read_lines(path)
    assert [(r["step"], r["epoch"], r["name"], r["value"]) for r in lines] == [
        (49, 3, "train_loss", 2.5),
        (49, 3, "tokens_per_s", 1000.0),
    ]
    assert set(lines[0]) == {"step", "epoch", "name", "value", "time"}
    assert lines[0]["time"] == lines[1]["time"] and lines[0]["time"] > 1.6e9


def test_calls_append_and_a_missing_epoch_is_null(tmp_path):
    path = tmp_path / "sub" / "m.jsonl"
    logger = LanpoolMetrics(str(path))
    logger.log_metrics({"val_loss": torch.tensor(1.25)}, step=10)
    LanpoolMetrics(str(path)).log_metrics({"val_loss": 1.0}, step=20)
    assert [(r["step"], r["epoch"], r["value"]) for r in read_lines(path)] == [(10, None, 1.25), (20, None, 1.0)]


def test_a_value_that_is_not_finite_is_written_as_null(tmp_path):
    path = tmp_path / "m.jsonl"
    LanpoolMetrics(str(path)).log_metrics({"loss": math.nan, "grad": math.inf}, step=1)
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert [r["value"] for r in read_lines(path)] == [None, None]


def test_hyperparameters_are_one_line_of_their_own(tmp_path):
    path = tmp_path / "m.jsonl"
    LanpoolMetrics(str(path)).log_hyperparams({"lr": 1e-3, "n_layer": 4, "data": None, "dims": (2, 3)})
    (line,) = read_lines(path)
    assert line["hparams"] == {"lr": 1e-3, "n_layer": 4, "data": None, "dims": [2, 3]}
    assert isinstance(line["time"], float)


def test_path_comes_from_the_environment_else_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert LanpoolMetrics().path == DEFAULT_FILE
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env.jsonl"))
    LanpoolMetrics().log_metrics({"x": 1.0}, step=0)
    assert (tmp_path / "env.jsonl").exists() and not (tmp_path / DEFAULT_FILE).exists()


def test_only_global_rank_zero_writes(tmp_path, monkeypatch):
    path = tmp_path / "m.jsonl"
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    logger = LanpoolMetrics(str(path))
    logger.log_metrics({"x": 1.0}, step=0)
    logger.log_hyperparams({"lr": 1.0})
    assert not path.exists()


class TinyRegression(LightningModule):
    def __init__(self, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, on_step=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


@pytest.mark.filterwarnings("ignore:.*LeafSpec:FutureWarning")
def test_a_real_fit_logs_hyperparameters_then_increasing_steps_of_falling_loss(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(256, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    path = tmp_path / "m.jsonl"
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=40,
        logger=LanpoolMetrics(str(path)),
        log_every_n_steps=5,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(TinyRegression(), DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True))

    first, *rest = read_lines(path)
    assert first["hparams"] == {"lr": 0.1}
    losses = [r for r in rest if r["name"] == "train_loss"]
    steps = [r["step"] for r in losses]
    assert len(steps) == 8 and steps == sorted(set(steps)), steps
    assert losses[-1]["value"] < losses[0]["value"] / 4
    assert {r["epoch"] for r in losses} == {0, 1, 2}
