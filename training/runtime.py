"""How a recipe runs inside a lanpool job: nodes, DDP, threads, resume.

On every node of a multi-node job the agent sets MASTER_ADDR, MASTER_PORT and
NODE_RANK (read by Lightning itself), LANPOOL_NUM_NODES (the default of each
recipe's --num-nodes) and LANPOOL_DDP_TIMEOUT (seconds a rank waits for a
missing or frozen peer before failing). It never sets LOCAL_RANK, WORLD_SIZE or
TORCHELASTIC_RUN_ID: with LOCAL_RANK set Lightning does not start its local
processes and waits until it times out, it ignores WORLD_SIZE (the world is
num_nodes x devices), and TORCHELASTIC_RUN_ID switches it to another cluster
environment. LANPOOL_DATA_DIR, if a workflow sets it, is where
scripts/fetch-data put the corpora (`data` without it).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable
from datetime import timedelta

import torch
from lightning.pytorch.strategies import DDPStrategy

from .errors import TrainingError
from .metrics import LanpoolMetrics
from .progress import PrintProgress

# Lightning's own default is 1800 s: a vanished peer would hang the others for
# half an hour before the job could fail.
DEFAULT_DDP_TIMEOUT_S = 300


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name) or str(default)
    try:
        value = int(text)
    except ValueError:
        raise TrainingError(f"{name} must be a whole number, got {text!r}") from None
    if value < 1:
        raise TrainingError(f"{name} must be at least 1, got {value}")
    return value


def data_dir() -> str:
    """Where scripts/fetch-data puts corpora and recipes cache fetched data."""
    return os.environ.get("LANPOOL_DATA_DIR") or "data"


def default_data() -> str:
    """The default corpus: the Shakespeare plays that scripts/fetch-data writes."""
    return os.path.join(data_dir(), "shakespeare.txt")


def default_num_nodes() -> int:
    return _env_int("LANPOOL_NUM_NODES", 1)


def ddp_timeout() -> timedelta:
    return timedelta(seconds=_env_int("LANPOOL_DDP_TIMEOUT", DEFAULT_DDP_TIMEOUT_S))


def resolve_strategy(strategy: str, devices: int, num_nodes: int) -> str:
    """ "auto" means "ddp" when more than one process takes part."""
    if strategy == "auto" and devices * num_nodes > 1:
        return "ddp"
    return strategy


def build_strategy(strategy: str, accelerator: str, devices: int, num_nodes: int) -> str | DDPStrategy:
    resolved = resolve_strategy(strategy, devices, num_nodes)
    if resolved != "ddp":
        return resolved
    return DDPStrategy(
        # Also bounds start-up when a peer never arrives.
        timeout=ddp_timeout(),
        # None lets Lightning pick NCCL on GPUs, gloo elsewhere.
        process_group_backend="gloo" if accelerator == "cpu" else None,
    )


def default_torch_threads(devices: int) -> None:
    # Processes sharing a machine each take every core by default: two DDP
    # "nodes" on one 2-core machine trained ~8x slower so. An explicit OMP_NUM_THREADS wins: the
    # agent sets it when several nodes share one machine.
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, devices)))


def _not_an_advert(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("💡 Tip")


def quiet_known_warnings() -> None:
    """Hide warnings and adverts that no user of these recipes can act on."""
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_not_an_advert)
    # The data sets are in-memory tensors: workers would only add start-up time.
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    # Lightning 2.6 still uses torch's LeafSpec, which torch 2.13 deprecates.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)


def resume_path(explicit: str | None) -> str | None:
    """The checkpoint to resume from: --ckpt-path, else the one lanpool placed in the
    workspace for `app headless run --resume JOB` (LANPOOL_RESUME_CKPT, same on every node)."""
    return explicit or os.environ.get("LANPOOL_RESUME_CKPT") or None


def check_checkpoint(path: str | None) -> None:
    """Fail early and clearly when an explicit resume checkpoint is missing.

    Every node must be given the same present file: "last" without shared
    storage resumed one node from step 0 and another from step 300.
    """
    if path is None:
        return
    if path in ("last", "best", "hpc", "registry"):
        raise TrainingError(f"--ckpt-path needs an explicit checkpoint file, not {path!r}")
    if "://" not in path and not os.path.isfile(path):
        raise TrainingError(f"checkpoint {path} does not exist")


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run a recipe's main; a TrainingError becomes one line on stderr and exit 2."""
    try:
        return main(argv)
    except TrainingError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2


def step_trainer_kwargs(config, tokens_per_step: int) -> dict:
    """Trainer settings shared by the step-based language-model recipes (chargpt, gpt2):
    `config` has accelerator, devices, num_nodes, strategy, precision, max_steps,
    eval_every, eval_batches and log_every."""
    return {
        "accelerator": config.accelerator,
        "devices": config.devices,
        "num_nodes": config.num_nodes,
        "strategy": build_strategy(config.strategy, config.accelerator, config.devices, config.num_nodes),
        "precision": config.precision,
        "max_steps": config.max_steps,
        "max_epochs": -1,
        # Validation every N steps across epoch boundaries, capped in size.
        "val_check_interval": config.eval_every,
        "check_val_every_n_epoch": None,
        "limit_val_batches": config.eval_batches,
        "num_sanity_val_steps": 0,
        "gradient_clip_val": 1.0,
        "logger": LanpoolMetrics(),
        "log_every_n_steps": config.log_every,
        "callbacks": [PrintProgress(config.log_every, tokens_per_step)],
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
