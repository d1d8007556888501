"""Run a job through Slurm (`app agent serve --executor slurm`, on a login node or any host
with the Slurm client): a batch script submitted with `sbatch --parsable`, from the
job's directory on storage the compute nodes share (its workspace and artifacts are there).

Resources map to sbatch options: gpu N -> --gres=gpu:N, cpu -> --cpus-per-task,
memory -> --mem, nodes N -> -N N with one task per node, max_duration -> --time
(a backstop: lanpool's own limit stops the job first and reports TIMEOUT). The
partition, account, QoS and constraint come from the agent's options or the job's
`slurm_*` resources (the workflow's `slurm:`). While Slurm keeps the job pending
the start waits, and the job shows QUEUED with Slurm's reason; a stop cancels it.

Plain processes only: a container started from a job would escape scancel.
"""

import asyncio
import contextlib
import logging
import math
import os
import re
from pathlib import Path

from lanpool.agent.executors.base import Adoption, ExecutorError, Launch, OutputSink
from lanpool.agent.executors.slurm_cli import (
    SlurmOptions,
    cancel,
    check_env,
    job_state,
    last_line,
    node_count,
    run,
    time_limit,
)
from lanpool.agent.executors.slurm_job import SlurmExecution
from lanpool.agent.executors.slurm_script import ERR_FILE, EXIT_FILE, ID_FILE, OUT_FILE, write_scripts
from lanpool.protocol.resources import Resources, ResourcesError

log = logging.getLogger(__name__)

PENDING_POLL_S = 0.2
# Slurm sets the GPU variables of the GPUs it allocates (--gres); the agent's would be wrong on a compute node.
GPU_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
_SLURM_ID = re.compile(r"^[0-9]{1,12}$")


class SlurmExecutor:
    name = "slurm"
    in_container = False
    outlives_agent = True  # a Slurm job does not need the agent: the next start re-adopts it
    cancellable_start = True  # a start waits while the job is pending: a stop gives that up (scancel)

    def __init__(self, jobs_root: Path, options: SlurmOptions, grace_s: float) -> None:
        self.jobs_root = jobs_root
        self.options = options
        self.grace_s = grace_s

    def sbatch_args(self, launch: Launch, slurm_dir: Path, batch: Path) -> list[str]:
        """sbatch's argv for the job; ExecutorError (one line) for a name or count Slurm must not see."""
        options = self.options.merged(launch.resources)
        nodes = node_count(launch.resources)
        try:
            res = Resources.parse(launch.resources)
        except ResourcesError as exc:
            raise ExecutorError(str(exc)) from None
        args = [
            "sbatch",
            "--parsable",
            f"--job-name=lanpool-{launch.job_id}",
            f"--output={slurm_dir / OUT_FILE}",
            f"--error={slurm_dir / ERR_FILE}",
            # a retry's output follows the earlier attempts' (see _prepare)
            "--open-mode=append",
            f"--chdir={launch.working_dir}",
            "--export=ALL",
            f"--nodes={nodes}",
            "--ntasks-per-node=1",
            *options.args(),
        ]
        if res.gpu:
            args.append(f"--gres=gpu:{res.gpu}")
        if res.cpu:
            args.append(f"--cpus-per-task={math.ceil(res.cpu)}")
        if res.memory_mb:
            args.append(f"--mem={res.memory_mb}M")
        if launch.max_duration_s > 0:
            args.append(f"--time={time_limit(launch.max_duration_s, self.grace_s)}")
        return [*args, str(batch), str(slurm_dir), f"{self.grace_s:g}", str(nodes)]

    async def start(self, launch: Launch, sink: OutputSink) -> SlurmExecution:
        if launch.image:
            raise ExecutorError("this runner runs jobs through Slurm as plain processes; drop the job's image")
        check_env(launch.env)
        slurm_dir = launch.workspace.parent / "slurm"
        batch, offsets = await asyncio.to_thread(_prepare, slurm_dir, launch)
        args = self.sbatch_args(launch, slurm_dir, batch)
        env = {**os.environ, **{k: v for k, v in launch.env.items() if k not in GPU_ENV}}
        for name in GPU_ENV:
            env.pop(name, None)
        rc, out, err = await run(*args, env=env)
        slurm_id = out.strip().split(";")[0]
        if rc != 0 or not _SLURM_ID.match(slurm_id):
            raise ExecutorError(f"sbatch refused the job: {last_line(err) or last_line(out) or f'exit status {rc}'}")
        await asyncio.to_thread((slurm_dir / ID_FILE).write_text, slurm_id + "\n")
        nodes = node_count(launch.resources)
        many = f" ({nodes} nodes, one allocation; lines tagged [node K])" if nodes > 1 else ""
        sink("sys", f"lanpool: Slurm job {slurm_id} submitted{many}\n".encode())
        try:
            await self._until_started(slurm_id, launch, sink)
        except asyncio.CancelledError:
            # A stop while pending: the job leaves Slurm's queue. An agent that exits leaves it
            # there, and its next start re-adopts it by its id.
            if launch.stop_requested is not None and launch.stop_requested():
                with contextlib.suppress(ExecutorError):
                    await asyncio.shield(cancel(slurm_id, None))
            raise
        return SlurmExecution(slurm_id, slurm_dir, sink, offsets)

    async def _until_started(self, slurm_id: str, launch: Launch, sink: OutputSink) -> None:
        said = ""
        while True:
            state, reason = await job_state(slurm_id)
            if state != "PENDING":
                if said and launch.on_pending is not None:
                    launch.on_pending("")
                return
            if reason != said:
                said = reason
                sink("sys", f"lanpool: Slurm job {slurm_id} pending ({reason})\n".encode())
                if launch.on_pending is not None:
                    launch.on_pending(f"Slurm: {reason}")
            await asyncio.sleep(PENDING_POLL_S)

    async def adopt(self, job: Adoption, sink: OutputSink) -> SlurmExecution:
        """Take the job back by the Slurm job id kept in its directory; output resumes right
        after the bytes the spool holds."""
        slurm_dir = self.jobs_root / job.job_id / "slurm"
        try:
            slurm_id = (slurm_dir / ID_FILE).read_text().strip()
        except OSError:
            slurm_id = ""
        if not _SLURM_ID.match(slurm_id):
            # The agent may have died between sbatch and writing the id: Slurm knows the job by name.
            slurm_id = await self._submitted_as(job.job_id)
            if not slurm_id:
                raise ExecutorError("the agent restarted before the job was submitted to Slurm")
            await asyncio.to_thread((slurm_dir / ID_FILE).write_text, slurm_id + "\n")
            sink("sys", f"lanpool: Slurm job {slurm_id} found by its name after a restart\n".encode())
        return SlurmExecution(slurm_id, slurm_dir, sink, dict(job.delivered), on_pending=job.on_pending)

    async def remove_leftovers(self, active: set[str]) -> list[str]:
        """Slurm jobs of this agent's jobs that are not running here any more (lost, or ended
        while their Slurm job was left) are cancelled: nothing would watch them."""
        cancelled = []
        for job_id, slurm_id in (await self._ours()).items():
            if job_id not in active:
                log.warning("cancelling Slurm job %s: lanpool job %s is not running here", slurm_id, job_id)
                await cancel(slurm_id, None)
                cancelled.append(f"slurm-{slurm_id}")
        return cancelled

    async def _submitted_as(self, job_id: str) -> str:
        return (await self._ours(job_id)).get(job_id, "")

    async def _ours(self, job_id: str = "") -> dict[str, str]:
        """{lanpool job id: Slurm job id} of the jobs in Slurm's queue that this agent submitted:
        named lanpool-<id> AND running this agent's batch script for that id (another agent on
        the cluster may use the same job id; a user may name a job anything)."""
        args = ["squeue", "-h", "-o", "%i|%j|%o"]
        if job_id:
            args[2:2] = ["-t", "all", "-n", f"lanpool-{job_id}"]  # one that ended meanwhile left its exit file
        rc, out, err = await run(*args)
        if rc != 0:
            log.warning("squeue: %s", last_line(err))
            return {}
        found = {}
        for line in out.splitlines():
            slurm_id, _, rest = line.strip().partition("|")
            name, _, command = rest.partition("|")
            if not name.startswith("lanpool-") or not _SLURM_ID.match(slurm_id):
                continue
            ours = name.removeprefix("lanpool-")
            slurm_dir = self.jobs_root / ours / "slurm"
            if command.split(" ")[:2] == [str(slurm_dir / "batch.sh"), str(slurm_dir)]:
                found[ours] = slurm_id
        return found


def _prepare(slurm_dir: Path, launch: Launch) -> tuple[Path, dict[str, int]]:
    """The job's scripts, and where this attempt's output starts in the output files.

    A previous attempt's (a retry's) exit and id go; its output stays, and this one is
    appended (--open-mode=append): the spool holds every attempt's bytes, so after a
    restart the count of them (Adoption.delivered) is where to resume in the file."""
    for name in (EXIT_FILE, ID_FILE):
        with contextlib.suppress(FileNotFoundError):
            (slurm_dir / name).unlink()
    offsets = {}
    for stream, name in (("out", OUT_FILE), ("err", ERR_FILE)):
        try:
            offsets[stream] = (slurm_dir / name).stat().st_size
        except FileNotFoundError:
            offsets[stream] = 0
    return write_scripts(slurm_dir, launch.working_dir, launch.commands), offsets
