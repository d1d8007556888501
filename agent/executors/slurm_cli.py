"""Slurm's client commands (sbatch, squeue, scancel, sinfo) as the Slurm executor calls them.

Every argument is one argv element (never a shell line), and every name that
comes from a workflow (partition, account, QoS, constraint) is checked against
Slurm's own spelling first: a value like "x --wrap=rm -rf ~" is refused with one
line rather than passed on.
"""

import asyncio
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from lanpool.agent.executors.base import ExecutorError

log = logging.getLogger(__name__)

CLI_TIMEOUT_S = 30.0
# sinfo at the agent's start: with an unusable SLURM_CONF (no slurmctld answering) it retries
# for about 30 s before refusing; a start-up check says so sooner.
SINFO_TIMEOUT_S = 5.0
# Slurm's partition/account/QoS names: letters, digits, _ . - (no leading '-': it would read as an option).
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
# A constraint is feature names joined by & | , with optional [ ] ( ) and *count.
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.&|,:*\[\]()]{0,255}$")
SLURM_FIELDS = ("partition", "account", "qos", "constraint")
# How a workflow's `slurm:` reaches the runner: flat keys of SubmitJob.resources.
RESOURCE_PREFIX = "slurm_"
MAX_NODES = 1024
# Job env names Slurm's clients read as options (SBATCH_WRAP...) or set themselves.
_RESERVED_ENV = ("SBATCH_", "SLURM_", "SRUN_", "SALLOC_")


@dataclass(frozen=True)
class SlurmOptions:
    partition: str = ""
    account: str = ""
    qos: str = ""
    constraint: str = ""

    def merged(self, resources: Mapping[str, object]) -> "SlurmOptions":
        """These (the agent's --partition...) overridden by the job's `slurm_*` resources; checked."""
        values = {f: getattr(self, f) for f in SLURM_FIELDS}
        for f in SLURM_FIELDS:
            given = resources.get(RESOURCE_PREFIX + f)
            if given is not None:
                values[f] = str(given)
        for f, value in values.items():
            check_name(f, value)
        return SlurmOptions(**values)

    def args(self) -> list[str]:
        return [f"--{f}={getattr(self, f)}" for f in SLURM_FIELDS if getattr(self, f)]


def check_name(field: str, value: str) -> None:
    """ExecutorError (one line) unless `value` is a name Slurm could have for `field`."""
    if not value:
        return
    pattern = _CONSTRAINT if field == "constraint" else _NAME
    if not pattern.match(value):
        raise ExecutorError(
            f"slurm {field} {value[:60]!r} is not a Slurm name: use letters, digits, '_', '.', '-'"
            + (" and & | , [ ] ( ) * :" if field == "constraint" else "")
            + " (no spaces, no leading '-')"
        )


def check_env(env: Mapping[str, str]) -> None:
    for name in env:
        if name.startswith(_RESERVED_ENV):
            raise ExecutorError(
                f"env {name[:40]!r}: names starting with {', '.join(_RESERVED_ENV)} are Slurm's; "
                "under Slurm set its options with the workflow's `slurm:` and `resources:`"
            )


def node_count(resources: Mapping[str, object]) -> int:
    nodes = resources.get("nodes", 1)
    try:
        count = int(str(nodes))
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_NODES:
        raise ExecutorError(f"resources.nodes {str(nodes)[:20]!r}: give a whole number from 1 to {MAX_NODES}")
    return count


def time_limit(max_duration_s: float, grace_s: float) -> str:
    """--time: lanpool's own max_duration stops the job (and reports TIMEOUT); Slurm's limit is a
    backstop a minute past it and its grace, in whole minutes as Slurm counts."""
    return str(max(1, math.ceil((max_duration_s + grace_s + 60) / 60)))


async def run(
    *args: str, env: Mapping[str, str] | None = None, timeout_s: float = CLI_TIMEOUT_S
) -> tuple[int, str, str]:
    """Run a Slurm client; (exit status, stdout, stderr). ExecutorError if it cannot be run or hangs."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env) if env is not None else None,
        )
    except OSError as exc:
        raise ExecutorError(f"cannot run {args[0]}: {exc.strerror or exc} (is the Slurm client installed?)") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise ExecutorError(f"{args[0]} did not answer in {timeout_s:g}s") from None
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


async def job_state(slurm_id: str) -> tuple[str, str]:
    """(state, reason) of a Slurm job: ("PENDING", "Resources"), ("RUNNING", "None"), ...;
    ("", "") once Slurm has forgotten it (after MinJobAge)."""
    rc, out, err = await run("squeue", "-h", "-t", "all", "-j", slurm_id, "-o", "%T|%r")
    if rc != 0:
        if "Invalid job id" in err:
            return "", ""
        raise ExecutorError(f"squeue: {last_line(err) or f'exit status {rc}'}")
    line = last_line(out)
    if not line:
        return "", ""
    state, _, reason = line.partition("|")
    return state, reason


async def cancel(slurm_id: str, signal_name: str | None) -> None:
    """scancel --full --signal=NAME (the batch script and all its children), or a plain scancel."""
    args = ["scancel", "--full", f"--signal={signal_name}", slurm_id] if signal_name else ["scancel", slurm_id]
    rc, _, err = await run(*args)
    if rc != 0 and signal_name:  # a pending job cannot take a signal: it just leaves the queue
        rc, _, err = await run("scancel", slurm_id)
    if rc != 0:
        log.warning("scancel %s: %s", slurm_id, last_line(err))


async def cluster_resources(default_partition: str = "") -> dict[str, int | str]:
    """What the agent reports (Hello): the cluster's partitions, nodes and GPUs from sinfo, and
    the partition a job naming none goes to (the agent's --partition, else the cluster's default)."""
    try:
        rc, out, err = await run("sinfo", "-h", "-N", "-o", "%N|%P|%T|%c|%m|%G", timeout_s=SINFO_TIMEOUT_S)
    except ExecutorError as exc:
        raise ExecutorError(f"{exc}: is SLURM_CONF right and its slurmctld reachable from here?") from None
    if rc != 0:
        raise ExecutorError(f"sinfo: {last_line(err) or f'exit status {rc}'} (is SLURM_CONF right?)")
    nodes: dict[str, tuple[str, int, int, int]] = {}
    default = ""  # sinfo marks the cluster's default partition with '*'
    partitions: dict[str, list[int]] = {}  # name: [nodes, idle nodes, gpus, gpus on idle nodes]
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 6:
            continue
        name, partition, state, cpus, memory, gres = parts
        gpus = sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:,()]+)?:(\d+)", gres))
        nodes[name] = (state, _int(cpus), _int(memory), gpus)
        idle = state.rstrip("*~#") == "idle"
        if partition.endswith("*"):
            default = default or partition.rstrip("*")
        row = partitions.setdefault(partition.rstrip("*"), [0, 0, 0, 0])
        row[0] += 1
        row[1] += idle
        row[2] += gpus
        row[3] += gpus if idle else 0
    summary = ",".join(f"{p}:{r[1]}/{r[0]}n:{r[3]}/{r[2]}g" for p, r in sorted(partitions.items()))
    return {
        "cpus": sum(n[1] for n in nodes.values()),
        "memory_mb": sum(n[2] for n in nodes.values()),
        "gpus": sum(n[3] for n in nodes.values()),
        "slurm_nodes": len(nodes),
        "slurm_nodes_idle": sum(1 for n in nodes.values() if n[0].rstrip("*~#") == "idle"),
        # partition:idle/total nodes:free/total GPUs, within Hello's bound on a value
        "slurm_partitions": summary[:250],
        "slurm_default_partition": (default_partition or default)[:64],
    }


def _int(text: str) -> int:
    try:
        return int(text.rstrip("+"))
    except ValueError:
        return 0
