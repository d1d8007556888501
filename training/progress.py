"""The plain progress lines that the recipes print on global rank zero.

One line per interval and one per validation, for the job's streamed log:

    step 50 train_loss 2.7100 tokens/s 12345
    step 250 val_loss 2.0412

The numbers also go to the metrics file (training.metrics) as tokens_per_s.
"""

from __future__ import annotations

import time
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer


class PrintProgress(Callback):
    """Prints every `every` steps; `tokens_per_batch` is one rank's tokens per step."""

    def __init__(self, every: int, tokens_per_batch: int):
        self.every, self.tokens_per_batch = every, tokens_per_batch

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.losses: list[float] = []
        self.since, self.since_step = time.perf_counter(), trainer.global_step

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not trainer.is_global_zero:
            return
        self.losses.append(outputs["loss"].item())
        step = trainer.global_step
        if step % self.every:
            return
        now = time.perf_counter()
        tokens = (step - self.since_step) * self.tokens_per_batch * trainer.world_size
        rate = tokens / (now - self.since)
        # The mean over the interval, on rank zero's batches: one batch's loss is noisy.
        loss = sum(self.losses) / len(self.losses)
        print(f"step {step} train_loss {loss:.4f} tokens/s {rate:.0f}", flush=True)
        pl_module.log("tokens_per_s", rate, rank_zero_only=True)
        self.losses, self.since, self.since_step = [], now, step

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.is_global_zero and "val_loss" in trainer.callback_metrics:
            val = trainer.callback_metrics["val_loss"].item()
            print(f"step {trainer.global_step} val_loss {val:.4f}", flush=True)
