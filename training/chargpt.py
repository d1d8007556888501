"""Train a character-level GPT on any text, with snapshots and resume; sample from it.

The model of minGPT and of the PyTorch DDP tutorial (training.gpt_model),
trained with Lightning on one process or DDP across devices and nodes
(--num-nodes defaults to $LANPOOL_NUM_NODES). The data is a text file path or
an fsspec URL; the default is the Shakespeare corpus that scripts/fetch-data
writes to $LANPOOL_DATA_DIR/shakespeare.txt (data/shakespeare.txt without it).

Every --snapshot-every steps the model, optimizer and loop state go to
--out/step-N.ckpt (the last --keep-snapshots kept) and --out/snapshot.ckpt
(the latest; also written when training ends). --ckpt-path resumes from one,
continuing the global step. Metrics go to $LANPOOL_METRICS_FILE
(training.metrics); rank zero prints `step N train_loss X tokens/s Y`.

    python -m training.chargpt train --max-steps 2000 --devices 2 --out ckpts
    python -m training.chargpt train --max-steps 4000 --out ckpts --ckpt-path ckpts/snapshot.ckpt
    python -m training.chargpt sample --ckpt ckpts/snapshot.ckpt --prompt "ROMEO:" --max-new-tokens 200

`train` may be left out: `python -m training.chargpt --max-steps 100`.
"""

from __future__ import annotations

import hashlib
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

import fsspec
import torch
from lightning.pytorch import LightningDataModule, LightningModule, Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from . import cli_config
from .errors import TrainingError
from .gpt_model import GPT, GPTConfig
from .runtime import (
    check_checkpoint,
    data_dir,
    default_data,
    default_num_nodes,
    default_torch_threads,
    quiet_known_warnings,
    resume_path,
    run_cli,
    step_trainer_kwargs,
)

SNAPSHOT_NAME = "snapshot"


def is_remote(path: str) -> bool:
    protocol, _ = fsspec.core.split_protocol(path)
    return protocol not in (None, "file")


@dataclass(frozen=True)
class CharGPTConfig:
    data: str = field(default_factory=default_data, metadata={"help": "text file or fsspec URL"})
    out: str = os.path.join("checkpoints", "chargpt")
    block_size: int = 128
    batch_size: int = 32
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    lr: float = 1e-3
    weight_decay: float = 0.1
    max_steps: int = 2000
    val_fraction: float = 0.1
    eval_every: int = field(default=250, metadata={"help": "validate every N steps"})
    eval_batches: int = 20
    log_every: int = field(default=50, metadata={"help": "print and log every N steps"})
    snapshot_every: int = 500
    keep_snapshots: int = 3
    accelerator: str = "auto"
    devices: int = 1
    strategy: str = "auto"
    num_nodes: int = field(default_factory=default_num_nodes)
    precision: str = field(default="32-true", metadata={"help": "e.g. bf16-mixed on GPUs"})
    seed: int = 42
    ckpt_path: str | None = field(default=None, metadata={"help": "explicit checkpoint to resume"})


@dataclass(frozen=True)
class SampleConfig:
    ckpt: str = os.path.join("checkpoints", "chargpt", SNAPSHOT_NAME + ".ckpt")
    prompt: str = "\n"
    max_new_tokens: int = 200
    temperature: float = 0.8
    top_k: int = field(default=0, metadata={"help": "sample from the k likeliest only; 0: all"})
    seed: int | None = None
    device: str = "cpu"


class CharDataset(Dataset):
    """Windows of block_size + 1 characters starting every `stride`: input and next-char target."""

    def __init__(self, ids: torch.Tensor, block_size: int, stride: int = 1):
        self.ids, self.block_size, self.stride = ids, block_size, stride

    def __len__(self) -> int:
        return max(0, (len(self.ids) - self.block_size - 1) // self.stride + 1)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.ids[i * self.stride : i * self.stride + self.block_size + 1]
        return chunk[:-1], chunk[1:]


class TextDataModule(LightningDataModule):
    """A text split into a head for training and a tail for validation, char by char."""

    def __init__(self, data: str, block_size: int, batch_size: int, val_fraction: float, seed: int = 42):
        super().__init__()
        self.data, self.block_size = data, block_size
        self.batch_size, self.val_fraction, self.seed = batch_size, val_fraction, seed
        self.vocab = ""

    @property
    def local_path(self) -> str:
        if not is_remote(self.data):
            return fsspec.core.split_protocol(self.data)[1]
        digest = hashlib.sha256(self.data.encode()).hexdigest()[:12]
        return os.path.join(data_dir(), "cache", f"{digest}-{os.path.basename(self.data)}")

    def prepare_data(self) -> None:
        # Runs on one process per node: nodes share no storage.
        path = self.local_path
        if os.path.isfile(path):
            return
        if not is_remote(self.data):
            raise TrainingError(f"no text at {path}: run scripts/fetch-data or pass --data")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # Written aside, then renamed: a reader never sees half a file.
        part = f"{path}.{os.getpid()}.part"
        with fsspec.open(self.data, "rb") as src, open(part, "wb") as dst:
            dst.write(src.read())
        os.replace(part, path)

    def setup(self, stage: str | None = None) -> None:
        with open(self.local_path, encoding="utf-8") as file:
            text = file.read()
        # Sorted, so every rank and every run numbers the characters alike.
        self.vocab = "".join(sorted(set(text)))
        index = {ch: i for i, ch in enumerate(self.vocab)}
        ids = torch.tensor([index[ch] for ch in text], dtype=torch.long)
        n_val = int(len(ids) * self.val_fraction)
        self.train_set = CharDataset(ids[: len(ids) - n_val], self.block_size)
        # Non-overlapping windows: the capped validation sees distinct text.
        self.val_set = CharDataset(ids[len(ids) - n_val :], self.block_size, stride=self.block_size)
        if len(self.train_set) < self.batch_size or len(self.val_set) == 0:
            raise TrainingError(
                f"{self.data} is too short ({len(text)} characters) for block size {self.block_size}"
                f" and batch size {self.batch_size}"
            )

    def train_dataloader(self) -> DataLoader:
        # The loader has no position to save, so a run resumed mid-epoch would
        # replay the windows its epoch began with; seeding the shuffle with the
        # step it starts from draws new ones instead.
        trainer = self.trainer
        sampler = DistributedSampler(
            self.train_set,
            num_replicas=trainer.world_size,
            rank=trainer.global_rank,
            shuffle=True,
            seed=self.seed + trainer.global_step,
            drop_last=True,
        )
        return DataLoader(self.train_set, batch_size=self.batch_size, sampler=sampler, drop_last=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)


class LitCharGPT(LightningModule):
    """The GPT, built once the data's character set (`vocab`) is known."""

    def __init__(
        self,
        block_size: int = 128,
        n_layer: int = 4,
        n_head: int = 4,
        n_embd: int = 128,
        dropout: float = 0.0,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        vocab: str | None = None,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.gpt: GPT | None = None
        if vocab is not None:  # loading a checkpoint
            self._build(vocab)

    def _build(self, vocab: str) -> None:
        # Stored with the hyperparameters, so a checkpoint can decode its own samples.
        self.hparams.vocab = vocab
        h = self.hparams
        self.gpt = GPT(GPTConfig(len(vocab), h.block_size, h.n_layer, h.n_head, h.n_embd, h.dropout))

    def configure_model(self) -> None:
        if self.gpt is None:
            self._build(self.trainer.datamodule.vocab)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if checkpoint["hyper_parameters"].get("vocab") != self.hparams.vocab:
            raise TrainingError("the checkpoint was trained on text with other characters than --data")

    def _step(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> torch.Tensor:
        x, y = batch
        _, loss = self.gpt(x, y)
        train = stage == "train"
        # Validation means are synced once per validation run, not per step.
        self.log(f"{stage}_loss", loss, on_step=train, on_epoch=not train, sync_dist=not train)
        return loss

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._step(batch, "val")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # Weight decay on matrices only, not on biases and norms (nanoGPT).
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": self.hparams.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=self.hparams.lr, betas=(0.9, 0.99))


def build_trainer(config: CharGPTConfig) -> Trainer:
    snapshots = ModelCheckpoint(
        dirpath=config.out,
        filename="step-{step}",
        auto_insert_metric_name=False,
        every_n_train_steps=config.snapshot_every,
        # The latest K by step; save_last keeps snapshot.ckpt as the newest.
        monitor="step",
        mode="max",
        save_top_k=config.keep_snapshots,
        save_last=True,
        enable_version_counter=False,
        verbose=True,
    )
    snapshots.CHECKPOINT_NAME_LAST = SNAPSHOT_NAME
    kwargs = step_trainer_kwargs(config, config.batch_size * config.block_size)
    kwargs["callbacks"].append(snapshots)
    return Trainer(**kwargs, default_root_dir=config.out)


def train(argv: list[str] | None) -> int:
    config = cli_config.parse_config(
        CharGPTConfig,
        argv,
        prog="python -m training.chargpt train",
        description="Train a character-level GPT on a text file or URL.",
    )
    for name in ("max_steps", "log_every", "eval_every", "snapshot_every", "keep_snapshots"):
        if getattr(config, name) < 1:
            raise TrainingError(f"--{name.replace('_', '-')} must be at least 1")
    ckpt_path = resume_path(config.ckpt_path)
    check_checkpoint(ckpt_path)
    if not is_remote(config.data) and not os.path.isfile(config.data):
        raise TrainingError(f"no text at {config.data}: run scripts/fetch-data or pass --data")
    quiet_known_warnings()
    # Handled by TextDataModule.train_dataloader's reseeding.
    warnings.filterwarnings("ignore", message=r".*resuming from a checkpoint that ended before the epoch ended.*")
    default_torch_threads(config.devices)
    seed_everything(config.seed, workers=True, verbose=False)

    model = LitCharGPT(
        config.block_size, config.n_layer, config.n_head, config.n_embd, config.dropout, config.lr, config.weight_decay
    )
    data = TextDataModule(config.data, config.block_size, config.batch_size, config.val_fraction, config.seed)
    trainer = build_trainer(config)
    trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)

    path = os.path.join(config.out, SNAPSHOT_NAME + ".ckpt")
    # Collective under DDP: every rank calls it, global rank zero writes.
    trainer.save_checkpoint(path, weights_only=False)
    if trainer.is_global_zero:
        print(f"saved checkpoint to {path} at step {trainer.global_step}", flush=True)
    return 0


def sample(argv: list[str] | None) -> int:
    config = cli_config.parse_config(
        SampleConfig,
        argv,
        prog="python -m training.chargpt sample",
        description="Generate text from a char-GPT checkpoint.",
    )
    check_checkpoint(config.ckpt)
    if not config.prompt:
        raise TrainingError("--prompt must hold at least one character")
    model = LitCharGPT.load_from_checkpoint(config.ckpt, map_location=config.device).eval()
    vocab = model.hparams.vocab
    unknown = sorted(set(config.prompt) - set(vocab))
    if unknown:
        raise TrainingError(f"the prompt has characters the model never saw: {''.join(unknown)!r}")
    idx = torch.tensor([[vocab.index(ch) for ch in config.prompt]], device=config.device)
    generator = None
    if config.seed is not None:
        generator = torch.Generator(device=config.device).manual_seed(config.seed)
    out = model.gpt.generate(idx, config.max_new_tokens, config.temperature, config.top_k or None, generator)
    sys.stdout.write("".join(vocab[i] for i in out[0].tolist()) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sample"]:
        return sample(argv[1:])
    return train(argv[1:] if argv[:1] == ["train"] else argv)


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
