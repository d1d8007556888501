"""A queued job's start: its request read back from the journal, and what the executor is given.

The request is kept beside the job (request.json, without its file list: the
workspace was staged at submit), so a job that waited in the queue across an
agent restart starts exactly as it was asked to.
"""

import asyncio
import json
from pathlib import Path

from lanpool.agent.executors import Executor, Launch
from lanpool.agent.jobs.env import container_commands, job_env
from lanpool.agent.jobs.job import Job
from lanpool.agent.jobs.limits import newest_checkpoint
from lanpool.agent.jobs.request import parse_resources
from lanpool.protocol import SubmitJob
from lanpool.protocol.messages import to_wire
from lanpool.protocol.schema import build

REQUEST_FILE = "request.json"


def save_request(job_dir: Path, req: SubmitJob) -> None:
    (job_dir / REQUEST_FILE).write_text(json.dumps(to_wire(req)))


def read_request(job_dir: Path) -> SubmitJob:
    """The request as saved, checked again like one off the wire (the journal is disk, not trust)."""
    req = build(SubmitJob, json.loads((job_dir / REQUEST_FILE).read_text()), REQUEST_FILE)
    assert isinstance(req, SubmitJob)
    return req


async def launch_of(job: Job, executor: Executor, req: SubmitJob) -> Launch:
    """What the executor starts; a retry gets LANPOOL_RESUME_CKPT (the workspace's newest checkpoint)."""
    record, workspace = job.record, job.dir / "workspace"
    resources = parse_resources(req.resources)
    env = job_env(req, workspace, executor.in_container, record.gpus, resources.gpu is not None, record.master_port)
    if record.attempt:
        ckpt = await asyncio.to_thread(newest_checkpoint, workspace)
        if ckpt is not None:
            rel = ckpt.relative_to(workspace).as_posix()
            env["LANPOOL_RESUME_CKPT"] = f"/workspace/{rel}" if executor.in_container else str(ckpt)
            job.system_line(f"lanpool: resuming from {rel} (LANPOOL_RESUME_CKPT)")
    return Launch(
        req.job_id,
        container_commands(req) if executor.in_container else list(req.commands),
        workspace,
        (workspace / req.working_dir).resolve(),  # checked when staged
        env,
        run_name=req.run_name,
        python=req.python,
        requirements=req.requirements,
        hold_base=req.hold_base,
        image=record.image,
        pull=req.pull,
        gpus=tuple(record.gpus),
        memory_mb=resources.memory_mb,
        cpus=resources.cpu,
        shm_size=resources.shm_size,
        resources=dict(req.resources),
        max_duration_s=req.max_duration_s,
        on_pending=job.set_pending,
        stop_requested=lambda: record.stop_requested,
    )
