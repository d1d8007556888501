"""The digits autoencoder recipe: its command line, its model, and a real DDP run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from training.autoencoder import AutoencoderConfig, LitAutoencoder, parse_config

REPO_ROOT = Path(__file__).resolve().parents[1]
EPOCH_LINE = re.compile(
    r"^epoch (\d+) train_loss (\d+\.\d{4}) val_loss (\d+\.\d{4})$", re.MULTILINE
)
# Set by a surrounding distributed launcher, they would make Lightning join
# that run instead of starting its own processes (../shared/FINDINGS.md).
LAUNCHER_VARS = (
    "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
)


def test_no_flags_give_the_dataclass_defaults():
    assert parse_config([]) == AutoencoderConfig()


def test_flags_are_parsed_into_typed_fields():
    config = parse_config([
        "--max-epochs", "7", "--lr", "0.01", "--devices", "1",
        "--strategy", "ddp", "--out", "ck", "--val-fraction", "0.2",
    ])
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
def test_auto_strategy_means_ddp_when_several_processes_take_part(
    devices, num_nodes, strategy, expected
):
    config = AutoencoderConfig(devices=devices, num_nodes=num_nodes, strategy=strategy)
    assert config.resolved_strategy() == expected


def test_model_reconstructs_64_pixels_through_a_3_dim_latent():
    model = LitAutoencoder()
    x = torch.rand(5, 64)
    assert model.encoder(x).shape == (5, 3)
    assert model(x).shape == (5, 64)


@pytest.mark.slow
def test_two_process_ddp_run_lowers_val_loss_and_writes_a_loadable_checkpoint(tmp_path):
    out = tmp_path / "ck"
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    result = subprocess.run(
        [sys.executable, "-m", "training.autoencoder",
         "--max-epochs", "2", "--devices", "2", "--out", str(out)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr

    epochs = [(int(e), float(t), float(v)) for e, t, v in EPOCH_LINE.findall(result.stdout)]
    # One line per epoch, from rank zero only.
    assert [e for e, _, _ in epochs] == [1, 2], result.stdout
    assert epochs[-1][2] < epochs[0][2], result.stdout

    checkpoint = out / "autoencoder.ckpt"
    assert f"saved checkpoint to {checkpoint}" in result.stdout
    model = LitAutoencoder.load_from_checkpoint(checkpoint)
    assert model.hparams.latent == 3
    assert model(torch.rand(2, 64)).shape == (2, 64)
