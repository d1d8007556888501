"""bench-ddp --probe: timestamps of a trainer's start (exec, imports, rendezvous) into probe.json, then the recipe.

Run in place of `python -m training.chargpt` (same arguments) in both of bench-ddp's arms, so
what differs between a trainer lanpool started and one started by hand shows per phase: the
interpreter's start, `import torch`, `import lightning`, the rendezvous (init_process_group).
probe.json also keeps sys.path, the interpreter, the env and the scheduling (nice, autogroup,
CPUs), which decide how fast the same imports run.
"""

import json
import os
import sys
import time

_OUT = {"exec": 0.0}


def _proc_start() -> float:
    """When this process was forked, on time.time()'s clock (/proc/stat's btime is whole seconds: not used)."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


def _sched() -> str:
    """What decides this process's share of the CPUs: its nice value, autogroup, affinity."""
    try:
        with open("/proc/self/autogroup") as f:
            group = f.read().strip()
    except OSError:
        group = "-"
    return f"nice {os.nice(0)}, {group}, cpus {sorted(os.sched_getaffinity(0))}"


def mark(name: str) -> None:
    _OUT[name] = time.time()
    seen = {"path": sys.path, "executable": sys.executable, "env": dict(os.environ), "sched": _sched()}
    with open("probe.json", "w") as f:
        json.dump({**_OUT, **seen}, f)


_OUT["exec"] = _proc_start()
mark("main")
import torch  # noqa: E402, F401

mark("torch")
import lightning  # noqa: E402
import lightning.pytorch  # noqa: E402

mark("lightning")
import runpy  # noqa: E402

import torch.distributed as dist  # noqa: E402

_init = dist.init_process_group


def _timed_init(*args, **kwargs):  # type: ignore[no-untyped-def]
    mark("rendezvous_start")
    try:
        return _init(*args, **kwargs)
    finally:
        mark("rendezvous_done")


dist.init_process_group = _timed_init


class _Phases(lightning.pytorch.Callback):
    """After the rendezvous: Lightning's setup, the first batch's start and end."""

    def on_train_start(self, trainer, module):  # type: ignore[no-untyped-def]
        mark("train_start")

    def on_train_batch_start(self, trainer, module, batch, index):  # type: ignore[no-untyped-def]
        if index == 0 and "batch0_start" not in _OUT:
            mark("batch0_start")

    def on_train_batch_end(self, trainer, module, outputs, batch, index):  # type: ignore[no-untyped-def]
        if index == 0 and "batch0_end" not in _OUT:
            mark("batch0_end")


_trainer_init = lightning.pytorch.Trainer.__init__


def _with_phases(self, *args, **kwargs):  # type: ignore[no-untyped-def]
    kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), _Phases()]
    _trainer_init(self, *args, **kwargs)


lightning.pytorch.Trainer.__init__ = _with_phases
runpy.run_module("training.chargpt", run_name="__main__", alter_sys=True)
