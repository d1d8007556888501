"""Train a small autoencoder on scikit-learn's 8x8 digits with Lightning.

The autoencoder of the Lightning tutorial (64 -> 32 -> 3 -> 32 -> 64), fed
real offline data, so a lanpool job can run it on any machine without a
download. Single process or DDP across devices and nodes (--num-nodes defaults
to $LANPOOL_NUM_NODES); metrics go to $LANPOOL_METRICS_FILE (training.metrics):

    python -m training.autoencoder --max-epochs 2 --devices 2 --out ckpts
    python -m training.autoencoder --max-epochs 4 --devices 2 --out ckpts \
        --ckpt-path ckpts/autoencoder.ckpt
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch
from lightning.pytorch import (
    Callback,
    LightningDataModule,
    LightningModule,
    Trainer,
    seed_everything,
)
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

from . import cli_config
from .metrics import LanpoolMetrics
from .runtime import (
    build_strategy,
    check_checkpoint,
    default_num_nodes,
    default_torch_threads,
    quiet_known_warnings,
    resolve_strategy,
    resume_path,
    run_cli,
)

CHECKPOINT_NAME = "autoencoder.ckpt"


@dataclass(frozen=True)
class AutoencoderConfig:
    # With the cosine schedule, enough for the validation loss to fall ~6x from the
    # untrained model's (0.24 -> 0.036) in ~20 s on two CPU processes.
    max_epochs: int = 40
    max_steps: int = -1
    batch_size: int = 64
    lr: float = 1e-2
    hidden: int = 32
    latent: int = 3
    devices: int = 2
    accelerator: str = "cpu"
    # "auto" means "ddp" when more than one process takes part, else "auto".
    strategy: str = "auto"
    num_nodes: int = field(default_factory=default_num_nodes)
    seed: int = 42
    out: str = "checkpoints"
    val_fraction: float = 0.1
    # An explicit checkpoint to resume from, present on every node.
    ckpt_path: str | None = None

    def resolved_strategy(self) -> str:
        return resolve_strategy(self.strategy, self.devices, self.num_nodes)


def parse_config(argv: list[str] | None = None) -> AutoencoderConfig:
    return cli_config.parse_config(
        AutoencoderConfig,
        argv,
        prog="python -m training.autoencoder",
        description="Train an autoencoder on the 8x8 digits of scikit-learn.",
    )


class DigitsDataModule(LightningDataModule):
    """The 1797 digits of `sklearn.datasets.load_digits`, pixels in [0, 1]."""

    def __init__(self, batch_size: int = 64, val_fraction: float = 0.1, seed: int = 42):
        super().__init__()
        self.batch_size = batch_size
        self.val_fraction = val_fraction
        self.seed = seed

    def prepare_data(self) -> None:
        # Nothing to fetch: load_digits reads a file shipped inside scikit-learn.
        pass

    def setup(self, stage: str | None = None) -> None:
        from sklearn.datasets import load_digits

        images = torch.tensor(load_digits().data, dtype=torch.float32) / 16.0
        dataset = TensorDataset(images)
        n_val = int(len(dataset) * self.val_fraction)
        # A seeded generator gives every rank and every run the same split.
        generator = torch.Generator().manual_seed(self.seed)
        self.train_set, self.val_set = random_split(dataset, [len(dataset) - n_val, n_val], generator=generator)

    def train_dataloader(self) -> DataLoader:
        # The whole data set is one small in-memory tensor: workers only add start-up time.
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=0)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size, num_workers=0)


class LitAutoencoder(LightningModule):
    """Encoder 64 -> hidden -> latent and decoder back, MSE reconstruction loss."""

    def __init__(self, hidden: int = 32, latent: int = 3, lr: float = 1e-2):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, latent))
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))

    def _step(self, batch: list[torch.Tensor], stage: str) -> torch.Tensor:
        (x,) = batch
        loss = F.mse_loss(self(x), x)
        # Epoch means only; sync_dist then costs one all-reduce per epoch, not
        # one per step, and the printed numbers are averages over all ranks.
        self.log(f"{stage}_loss", loss, prog_bar=True, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self._step(batch, "val")

    def on_train_start(self) -> None:
        # The untrained model's validation loss, as the first point of the curve:
        # without it the curve starts after a whole epoch of learning and hides
        # most of it. The val set is 179 images: every rank scores all of it (the
        # weights are the same everywhere), so no collective is needed, and only
        # rank zero reports. Skipped when resuming: the curve already has its start.
        if self.trainer.global_step > 0:
            return
        images = self.trainer.datamodule.val_set  # type: ignore[attr-defined]
        x = torch.stack([images[i][0] for i in range(len(images))]).to(self.device)
        with torch.no_grad():
            loss = F.mse_loss(self(x), x).item()
        if self.trainer.is_global_zero:
            if self.logger is not None:
                self.logger.log_metrics({"val_loss": loss}, step=0)
            print(f"epoch 0 val_loss {loss:.4f}", flush=True)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        # Cosine decay to zero over the whole run: the large early steps learn fast,
        # the small late ones settle into the minimum instead of bouncing around it.
        total = max(1, int(self.trainer.estimated_stepping_batches))
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class PrintEpochLosses(Callback):
    """One plain line per epoch on rank zero, for the streamed job log."""

    # on_train_epoch_end runs after that epoch's validation, so both losses are in.
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        metrics = trainer.callback_metrics
        parts = [f"epoch {trainer.current_epoch + 1}"]
        for name in ("train_loss", "val_loss"):
            if name in metrics:
                parts.append(f"{name} {metrics[name].item():.4f}")
        print(" ".join(parts), flush=True)


def build_trainer(config: AutoencoderConfig) -> Trainer:
    return Trainer(
        accelerator=config.accelerator,
        devices=config.devices,
        num_nodes=config.num_nodes,
        strategy=build_strategy(config.strategy, config.accelerator, config.devices, config.num_nodes),
        max_epochs=config.max_epochs,
        max_steps=config.max_steps,
        enable_checkpointing=False,
        logger=LanpoolMetrics(),
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=5,
        callbacks=[PrintEpochLosses()],
    )


def main(argv: list[str] | None = None) -> int:
    config = parse_config(argv)
    ckpt_path = resume_path(config.ckpt_path)
    check_checkpoint(ckpt_path)
    quiet_known_warnings()
    default_torch_threads(config.devices)
    seed_everything(config.seed, workers=True, verbose=False)

    model = LitAutoencoder(hidden=config.hidden, latent=config.latent, lr=config.lr)
    data = DigitsDataModule(config.batch_size, config.val_fraction, config.seed)
    trainer = build_trainer(config)
    trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)

    path = os.path.join(config.out, CHECKPOINT_NAME)
    # Collective under DDP: every rank must call it; only global rank zero writes.
    trainer.save_checkpoint(path, weights_only=False)
    if trainer.is_global_zero:
        print(f"saved checkpoint to {path}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
