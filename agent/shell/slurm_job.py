"""A command or shell on one node of a Slurm job, for the exec door (agent/shell/into_job.py).

It is a job step of its own in the job's allocation, `srun --jobid ID --overlap --relative K`:
on node K beside the job's own step, whatever host that is, so no path to the compute node is
needed but Slurm's. It runs in the job's working directory (storage every node sees), with
the environment lanpool gave the job (the agent's, as sbatch --export=ALL passes it, and the
job's own, secrets included) and its node's lanpool variables (NODE_RANK: K). A terminal is
srun's `--pty`, on the PTY the agent gives srun; its exit code is the command's.
"""

import os
from pathlib import Path

import asyncssh

from lanpool.agent.executors import ExecutorError
from lanpool.agent.executors.slurm import GPU_ENV
from lanpool.agent.executors.slurm_cli import node_count
from lanpool.agent.executors.slurm_job import SlurmExecution
from lanpool.agent.jobs.env import job_env
from lanpool.agent.jobs.job import Job
from lanpool.agent.shell.process_job import run_in_job
from lanpool.protocol.messages import SubmitJob


def srun_argv(slurm_id: str, node: int, cwd: Path, argv: list[str], terminal: bool) -> list[str]:
    return [
        "srun",
        f"--jobid={slurm_id}",
        "--overlap",  # beside the job's own step, sharing its node's resources
        "--nodes=1",
        "--ntasks=1",
        f"--relative={node}",
        f"--chdir={cwd}",
        "--export=ALL",
        "--quiet",
        *(["--pty"] if terminal else []),
        *argv,
    ]


def node_environment(job: Job, req: SubmitJob, node: int, nodes: int) -> tuple[dict[str, str], Path]:
    """The environment and working directory of node `node` of the job, as its commands have them."""
    workspace = job.dir / "workspace"
    env = {k: v for k, v in os.environ.items() if k not in GPU_ENV}  # Slurm sets the step's GPUs
    env.update(job_env(req, workspace, False, [], False))
    rank = str(node)
    env.update(NODE_RANK=rank, LANPOOL_NODE_RANK=rank, LANPOOL_NUM_NODES=str(nodes))
    return env, (workspace / req.working_dir).resolve()


async def exec_in_slurm_job(
    process: asyncssh.SSHServerProcess[bytes], job: Job, req: SubmitJob, argv: tuple[str, ...], node: int | None
) -> int:
    execution = job.execution
    if not isinstance(execution, SlurmExecution):
        raise ExecutorError("the job does not run through Slurm")
    nodes = node_count(req.resources)
    k = node or 0
    if not 0 <= k < nodes:
        raise ExecutorError(f"the job runs on {nodes} Slurm node(s): node {k} is not one of them (0 to {nodes - 1})")
    env, cwd = node_environment(job, req, k, nodes)
    terminal = bool(process.term_type)
    shell = ["bash", "-i"] if terminal else ["bash"]
    command = srun_argv(execution.slurm_id, k, cwd, list(argv) or shell, terminal)
    # srun itself runs here, on the agent's host: in the job's dir, which the agent can reach.
    return await run_in_job(process, job, command, env, job.dir)
