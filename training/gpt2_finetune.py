"""Fine-tune a GPT-2 causal LM on a text file, in the shape of the FlexAI and dstack tutorials.

Three steps, each its own command:

    python -m training.gpt2_finetune prepare --data data/shakespeare.txt --out data/gpt2-blocks
    python -m training.gpt2_finetune train --dataset data/gpt2-blocks --out checkpoints/gpt2
    python -m training.gpt2_finetune predict --ckpt-dir checkpoints/gpt2 --input_str "ROMEO:" --max_new_tokens 50

`prepare` tokenizes a text file or fsspec URL with the real GPT-2 BPE
(training.gpt2_tokenizer, offline), groups the ids into blocks of
--block-size tokens and saves train.pt, val.pt, meta.json and the tokenizer
into --out: an artifact that the train step reuses.

`train` starts from --model_name_or_path (a hub name, for machines with
internet, or a local save_pretrained folder) or, without it, from a small
random GPT-2 (--n-layer, --n-head, --n-embd); Lightning trains it on one
process or DDP across devices and nodes (--num-nodes defaults to
$LANPOOL_NUM_NODES), logging to $LANPOOL_METRICS_FILE. It writes --out as a
save_pretrained folder (model and tokenizer) plus lightning.ckpt (model,
optimizer, step) that --ckpt-path resumes from.

`predict` loads that folder and prints the prompt and its continuation.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field

import fsspec
import torch
from lightning.pytorch import LightningDataModule, LightningModule, Trainer, seed_everything
from torch.utils.data import DataLoader, TensorDataset
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast
from transformers.utils import logging as hf_logging

from . import cli_config
from .errors import TrainingError
from .gpt2_tokenizer import GPT2_VOCAB_SIZE, load_gpt2_tokenizer
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

LIGHTNING_CHECKPOINT = "lightning.ckpt"


def default_blocks() -> str:
    return os.path.join(data_dir(), "gpt2-blocks")


@dataclass(frozen=True)
class PrepareConfig:
    data: str = field(default_factory=default_data, metadata={"help": "text file or fsspec URL"})
    out: str = field(default_factory=default_blocks)
    block_size: int = 128
    val_fraction: float = 0.05
    tokenizer_dir: str | None = field(default=None, metadata={"help": "folder with encoder.json and vocab.bpe"})


@dataclass(frozen=True)
class TrainConfig:
    dataset: str = field(default_factory=default_blocks, metadata={"help": "the folder `prepare` wrote"})
    out: str = os.path.join("checkpoints", "gpt2")
    model_name_or_path: str | None = field(default=None, metadata={"help": "hub name or local folder"})
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 64
    batch_size: int = 8
    lr: float = field(default=5e-4, metadata={"help": "use ~5e-5 to fine-tune a pretrained model"})
    weight_decay: float = 0.01
    max_steps: int = 500
    eval_every: int = 100
    eval_batches: int = 20
    log_every: int = 20
    accelerator: str = "auto"
    devices: int = 1
    strategy: str = "auto"
    num_nodes: int = field(default_factory=default_num_nodes)
    precision: str = "32-true"
    seed: int = 42
    ckpt_path: str | None = None


@dataclass(frozen=True)
class PredictConfig:
    ckpt_dir: str = os.path.join("checkpoints", "gpt2")
    input_str: str = "ROMEO:"
    max_new_tokens: int = 50
    temperature: float = 0.8
    top_k: int = 50
    seed: int | None = None
    device: str = "cpu"


def prepare(argv: list[str] | None) -> int:
    config = cli_config.parse_config(
        PrepareConfig,
        argv,
        prog="python -m training.gpt2_finetune prepare",
        description="Tokenize a text file with GPT-2's BPE and group it into blocks.",
    )
    tokenizer = load_gpt2_tokenizer(config.tokenizer_dir)
    try:
        with fsspec.open(config.data, "rt", encoding="utf-8") as file:
            text = file.read()
    except FileNotFoundError:
        raise TrainingError(f"no text at {config.data}: run scripts/fetch-data or pass --data") from None
    ids = tokenizer(text)["input_ids"]
    # As run_clm's group_texts: one stream cut into equal blocks, the remainder dropped.
    n_blocks = len(ids) // config.block_size
    n_val = max(1, int(n_blocks * config.val_fraction))
    if n_blocks - n_val < 1:
        raise TrainingError(f"{config.data} has {len(ids)} tokens: too few for blocks of {config.block_size}")
    blocks = torch.tensor(ids[: n_blocks * config.block_size], dtype=torch.int32).view(n_blocks, -1)

    os.makedirs(config.out, exist_ok=True)
    torch.save(blocks[: n_blocks - n_val].clone(), os.path.join(config.out, "train.pt"))
    torch.save(blocks[n_blocks - n_val :].clone(), os.path.join(config.out, "val.pt"))
    tokenizer.save_pretrained(os.path.join(config.out, "tokenizer"))
    meta = {
        "source": config.data,
        "block_size": config.block_size,
        "tokens": len(ids),
        "train_blocks": n_blocks - n_val,
        "val_blocks": n_val,
        "vocab_size": len(tokenizer),
    }
    with open(os.path.join(config.out, "meta.json"), "w", encoding="utf-8") as file:
        json.dump(meta, file, indent=2)
    print(
        f"prepared {n_blocks - n_val} train and {n_val} val blocks of {config.block_size} tokens"
        f" ({len(ids)} tokens) in {config.out}",
        flush=True,
    )
    return 0


class BlocksDataModule(LightningDataModule):
    """The token blocks that `prepare` saved."""

    def __init__(self, dataset: str, batch_size: int):
        super().__init__()
        self.dataset, self.batch_size = dataset, batch_size

    def prepare_data(self) -> None:
        # Nothing to fetch: `prepare` made the folder, the workflow carries it to each node.
        pass

    def setup(self, stage: str | None = None) -> None:
        load = lambda name: torch.load(os.path.join(self.dataset, name), weights_only=True).long()  # noqa: E731
        self.train_set, self.val_set = TensorDataset(load("train.pt")), TensorDataset(load("val.pt"))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, drop_last=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)


class LitCausalLM(LightningModule):
    """A HuggingFace causal LM: pretrained from a name or folder, else a small random GPT-2."""

    def __init__(
        self,
        model_name_or_path: str | None = None,
        n_layer: int = 2,
        n_head: int = 2,
        n_embd: int = 64,
        lr: float = 5e-4,
        weight_decay: float = 0.01,
    ):
        super().__init__()
        self.save_hyperparameters()
        if model_name_or_path:
            self.model = AutoModelForCausalLM.from_pretrained(model_name_or_path)
        else:
            self.model = GPT2LMHeadModel(
                GPT2Config(
                    vocab_size=GPT2_VOCAB_SIZE,
                    n_layer=n_layer,
                    n_head=n_head,
                    n_embd=n_embd,
                )
            )
        if getattr(self.model, "loss_type", "") is None:
            # transformers 5 finds no loss named in "GPT2LMHeadModel", warns on
            # every run, then falls back to this same causal-LM loss.
            self.model.loss_type = "ForCausalLM"

    def _step(self, batch: list[torch.Tensor], stage: str) -> torch.Tensor:
        (ids,) = batch
        # The model shifts the labels itself: each token predicts the next.
        loss = self.model(input_ids=ids, labels=ids).loss
        train = stage == "train"
        self.log(f"{stage}_loss", loss, on_step=train, on_epoch=not train, sync_dist=not train)
        return loss

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self._step(batch, "val")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)


def train(argv: list[str] | None) -> int:
    config = cli_config.parse_config(
        TrainConfig,
        argv,
        prog="python -m training.gpt2_finetune train",
        description="Train a GPT-2 causal LM on the blocks that `prepare` saved.",
    )
    for name in ("max_steps", "log_every", "eval_every", "batch_size"):
        if getattr(config, name) < 1:
            raise TrainingError(f"--{name.replace('_', '-')} must be at least 1")
    ckpt_path = resume_path(config.ckpt_path)
    check_checkpoint(ckpt_path)
    meta_path = os.path.join(config.dataset, "meta.json")
    if not os.path.isfile(meta_path):
        raise TrainingError(f"no prepared data in {config.dataset}: run `prepare` first")
    with open(meta_path, encoding="utf-8") as file:
        block_size = json.load(file)["block_size"]
    quiet_known_warnings()
    default_torch_threads(config.devices)
    seed_everything(config.seed, workers=True, verbose=False)

    model = LitCausalLM(
        config.model_name_or_path, config.n_layer, config.n_head, config.n_embd, config.lr, config.weight_decay
    )
    if block_size > model.model.config.n_positions:
        raise TrainingError(f"blocks of {block_size} tokens exceed the model's {model.model.config.n_positions}")
    trainer = Trainer(**step_trainer_kwargs(config, config.batch_size * block_size), enable_checkpointing=False)
    trainer.fit(model, datamodule=BlocksDataModule(config.dataset, config.batch_size), ckpt_path=ckpt_path)

    # Collective under DDP: every rank calls it, global rank zero writes.
    trainer.save_checkpoint(os.path.join(config.out, LIGHTNING_CHECKPOINT), weights_only=False)
    if trainer.is_global_zero:
        model.model.save_pretrained(config.out)
        GPT2TokenizerFast.from_pretrained(os.path.join(config.dataset, "tokenizer")).save_pretrained(config.out)
        print(f"saved model to {config.out} at step {trainer.global_step}", flush=True)
    return 0


def predict(argv: list[str] | None) -> int:
    config = cli_config.parse_config(
        PredictConfig,
        argv,
        prog="python -m training.gpt2_finetune predict",
        description="Continue --input_str with the model that `train` saved.",
    )
    if not os.path.isfile(os.path.join(config.ckpt_dir, "config.json")):
        raise TrainingError(f"no saved model in {config.ckpt_dir}: run `train` first")
    if not config.input_str:
        raise TrainingError("--input_str must not be empty")
    tokenizer = GPT2TokenizerFast.from_pretrained(config.ckpt_dir)
    model = AutoModelForCausalLM.from_pretrained(config.ckpt_dir).to(config.device).eval()
    inputs = tokenizer(config.input_str, return_tensors="pt").to(config.device)
    if config.seed is not None:
        torch.manual_seed(config.seed)
    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=config.max_new_tokens,
            do_sample=True,
            temperature=config.temperature,
            top_k=config.top_k or None,
            pad_token_id=tokenizer.eos_token_id,
        )
    sys.stdout.write(tokenizer.decode(out[0], skip_special_tokens=True) + "\n")
    return 0


COMMANDS = {"prepare": prepare, "train": train, "predict": predict}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Progress bars for loading and saving a few files only clutter the job log.
    hf_logging.disable_progress_bar()
    if not argv or argv[0] not in COMMANDS:
        print("usage: python -m training.gpt2_finetune {prepare,train,predict} [--help]", file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
