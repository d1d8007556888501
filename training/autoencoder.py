"""Train a small autoencoder on scikit-learn's 8x8 digits with Lightning.

The autoencoder of the Lightning tutorial (64 -> 32 -> 3 -> 32 -> 64), fed
real offline data, so a lanpool job can run it on any machine without a
download. Single process or DDP across devices and nodes:

    python -m training.autoencoder --max-epochs 2 --devices 2 --out ckpts
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
import warnings
from dataclasses import dataclass
from datetime import timedelta

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

from lightning.pytorch import (
    Callback,
    LightningDataModule,
    LightningModule,
    Trainer,
    seed_everything,
)
from lightning.pytorch.strategies import DDPStrategy

CHECKPOINT_NAME = "autoencoder.ckpt"


@dataclass(frozen=True)
class AutoencoderConfig:
    max_epochs: int = 5
    max_steps: int = -1
    batch_size: int = 64
    lr: float = 1e-3
    hidden: int = 32
    latent: int = 3
    devices: int = 2
    accelerator: str = "cpu"
    # "auto" means "ddp" when more than one process takes part, else "auto".
    strategy: str = "auto"
    num_nodes: int = 1
    seed: int = 42
    out: str = "checkpoints"
    val_fraction: float = 0.1

    def resolved_strategy(self) -> str:
        if self.strategy == "auto" and self.devices * self.num_nodes > 1:
            return "ddp"
        return self.strategy


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m training.autoencoder",
        description="Train an autoencoder on the 8x8 digits of scikit-learn.",
    )
    # Field annotations are strings under `from __future__ import annotations`.
    types = typing.get_type_hints(AutoencoderConfig)
    for field in dataclasses.fields(AutoencoderConfig):
        parser.add_argument(
            "--" + field.name.replace("_", "-"),
            dest=field.name,
            type=types[field.name],
            default=field.default,
            help=f"default: {field.default}",
        )
    return parser


def parse_config(argv: list[str] | None = None) -> AutoencoderConfig:
    return AutoencoderConfig(**vars(build_parser().parse_args(argv)))


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
        self.train_set, self.val_set = random_split(
            dataset, [len(dataset) - n_val, n_val], generator=generator
        )

    def train_dataloader(self) -> DataLoader:
        # The whole data set is one small in-memory tensor: workers only add start-up time.
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=0)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size, num_workers=0)


class LitAutoencoder(LightningModule):
    """Encoder 64 -> hidden -> latent and decoder back, MSE reconstruction loss."""

    def __init__(self, hidden: int = 32, latent: int = 3, lr: float = 1e-3):
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

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


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


def _default_torch_threads(devices: int) -> None:
    # Processes sharing a machine each take every core by default and then run
    # ~8x slower (../shared/FINDINGS.md). An explicit OMP_NUM_THREADS wins: the
    # agent sets it when several nodes share one machine.
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, devices)))


def build_trainer(config: AutoencoderConfig) -> Trainer:
    strategy: str | DDPStrategy = config.resolved_strategy()
    if strategy == "ddp":
        strategy = DDPStrategy(
            # Bounds how long a rank waits for a frozen or missing peer (default 1800 s).
            timeout=timedelta(seconds=int(os.environ.get("LANPOOL_DDP_TIMEOUT", "300"))),
            process_group_backend="gloo" if config.accelerator == "cpu" else None,
        )
    return Trainer(
        accelerator=config.accelerator,
        devices=config.devices,
        num_nodes=config.num_nodes,
        strategy=strategy,
        max_epochs=config.max_epochs,
        max_steps=config.max_steps,
        enable_checkpointing=False,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=5,
        callbacks=[PrintEpochLosses()],
    )


def main(argv: list[str] | None = None) -> int:
    config = parse_config(argv)
    # The data is one in-memory tensor, so num_workers=0 is the right choice and
    # Lightning's advice to add workers is noise that reads like a problem.
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    # Lightning 2.6 still uses torch's LeafSpec, which torch 2.13 deprecates;
    # nothing a user of this recipe can act on.
    warnings.filterwarnings(
        "ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning
    )
    _default_torch_threads(config.devices)
    seed_everything(config.seed, workers=True, verbose=False)

    model = LitAutoencoder(hidden=config.hidden, latent=config.latent, lr=config.lr)
    data = DigitsDataModule(config.batch_size, config.val_fraction, config.seed)
    trainer = build_trainer(config)
    trainer.fit(model, datamodule=data)

    path = os.path.join(config.out, CHECKPOINT_NAME)
    # Collective under DDP: every rank must call it; only global rank zero writes.
    trainer.save_checkpoint(path, weights_only=False)
    if trainer.is_global_zero:
        print(f"saved checkpoint to {path}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
