"""The environment a job runs with: the request's env, and what lanpool adds to it.

LANPOOL_* name the run and job and where metrics go; MASTER_PORT is picked here
for node 0 of a multi-node job; GLOO/NCCL_SOCKET_IFNAME name the interface that
carries the node's LAN address; the GPU variables make the job see exactly its GPUs.
"""

import dataclasses
import shlex
import socket
from pathlib import Path

from lanpool.agent.host.gpus import gpu_env
from lanpool.agent.workspace.metrics_tail import METRICS_REL, metrics_env
from lanpool.protocol import SubmitJob


def job_env(
    req: SubmitJob, workspace: Path, in_container: bool, gpus: list[int], asked_gpus: bool, master_port: int = 0
) -> dict[str, str]:
    """The job's env; `master_port` (when not 0) is its MASTER_PORT. Creates the metrics file's directory."""
    (workspace / METRICS_REL).parent.mkdir(parents=True, exist_ok=True)
    env = {
        **metrics_env(workspace, in_container),
        **req.env,
        "LANPOOL_RUN_NAME": req.run_name,
        "LANPOOL_JOB_ID": req.job_id,
    }
    if master_port:
        env["MASTER_PORT"] = str(master_port)
    env.update(_socket_ifname_env(env))
    if asked_gpus or in_container:  # a process that did not ask sees every GPU, as before
        env.update(gpu_env(gpus, in_container))
    return env


def container_commands(req: SubmitJob) -> list[str]:
    """A container job's commands: its requirements installed first, pip's progress in its log
    (a process job gets its own environment instead: agent.python.job_envs)."""
    if not req.requirements:
        return list(req.commands)
    install = f"pip install --disable-pip-version-check --no-input -r {shlex.quote(req.requirements)}"
    return [install, *req.commands]


def free_port() -> int:
    """A TCP port free now, for torch.distributed's rendezvous on this node."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("0.0.0.0", 0))
        port: int = sock.getsockname()[1]
        return port


def with_picked_ports(req: SubmitJob) -> SubmitJob:
    """`ports: N`: N free ports picked now, given to the job as $PORT_0... (lanpool's, over any the
    workflow set) and declared, so they are forwarded like listed ones. Picked once, at submit: the
    request kept for a restart names them. A port taken again before the job listens makes its bind
    fail, as any port would."""
    if not req.port_count:
        return req
    picked: list[int] = []
    while len(picked) < req.port_count:
        port = free_port()
        if port not in picked and port not in req.ports:
            picked.append(port)
    env = {**req.env, **{f"PORT_{i}": str(p) for i, p in enumerate(picked)}}
    return dataclasses.replace(req, env=env, ports=sorted({*req.ports, *picked}), port_count=0)


def _socket_ifname_env(env: dict[str, str]) -> dict[str, str]:
    """GLOO/NCCL_SOCKET_IFNAME: the interface that carries this node's LAN address."""
    addr = env.get("LANPOOL_NODE_ADDR")
    if not addr:
        return {}
    import ifaddr  # only multi-node jobs need it

    for adapter in ifaddr.get_adapters():
        if any(ip.ip == addr for ip in adapter.ips):
            return {k: env.get(k) or adapter.nice_name for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")}
    return {}
