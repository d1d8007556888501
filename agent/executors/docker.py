"""Run a job in a Docker container: the job's image, its workspace bind-mounted
at /workspace, host networking, the GPUs the agent assigned, the agent's uid.

Every blocking SDK call runs in a daemon thread (`docker_engine.in_thread`), so
the event loop never waits on Docker and an agent that exits is never held up
by a call that blocks. The image is found or pulled by docker_images.py; a
started container is a `docker_container.DockerExecution`.
"""

import asyncio
import contextlib
import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import docker
import requests
from docker.models.containers import Container
from docker.types import DeviceRequest, LogConfig, Mount

from lanpool.agent.executors.base import Adoption, ExecutorError, Launch, OutputSink
from lanpool.agent.executors.docker_container import DockerExecution
from lanpool.agent.executors.docker_engine import (
    ENGINE_ERRORS,
    docker_host,
    in_thread,
    reason,
    remove_quietly,
    remove_when_done,
)
from lanpool.agent.executors.docker_images import ensure_image
from lanpool.agent.executors.docker_stdio import STDIO_DIR, STDIO_MOUNT, close_all, fresh_stdio_dir
from lanpool.agent.workspace.abs_artifacts import TarRefused, checked_for_put, staged_tars

log = logging.getLogger(__name__)

WORKSPACE = "/workspace"  # where the job's workspace is mounted in its container
DEFAULT_SHM_SIZE = "1g"  # Docker's own 64m starves DataLoader workers
PING_TIMEOUT_S = 3.0
API_TIMEOUT_S = 120.0
LABEL_JOB = "lanpool.job"
LABEL_RUN = "lanpool.run"
LABEL_AGENT = "lanpool.agent"  # the agent's data dir: agents sharing an engine keep to their own

# The container's command: this wrapper runs the job's script ($1) with `sh`.
# PID 1 is tini (init=True), which passes signals on to the wrapper's whole
# process group (TINI_KILL_PROCESS_GROUP), as the process executor's killpg
# does. SIGTERM ends the job's `sh` at once, while a program it started
# (python) may take a while to shut down; once the wrapper exited, tini would
# end the container and so SIGKILL that program. The wrapper therefore outlives
# SIGTERM and, after one, waits until every process of the job has exited
# (SIGKILL after the grace period still ends it all). The job's output goes to
# files the agent reads by offset (docker_stdio.py), not to the engine's log.
_WRAPPER = f"""\
trap 'stopping=1; interrupted=1' TERM INT
sh -c "$1" >>{STDIO_MOUNT}/out 2>>{STDIO_MOUNT}/err &
job=$!
code=
while :; do
  interrupted=
  wait "$job"; status=$?
  # 127: collected by the wait before, which a signal then made look interrupted
  if [ "$status" = 127 ] && [ -n "$code" ] && ! kill -0 "$job" 2>/dev/null; then break; fi
  code=$status
  [ -z "$interrupted" ] && break
done
if [ -n "$stopping" ]; then
  while :; do
    left=0
    for p in /proc/[0-9]*; do
      case "${{p#/proc/}}" in 1|"$$") ;; *) [ -e "$p" ] && left=1 ;; esac
    done
    [ "$left" = 0 ] && break
    sleep 0.1
  done
fi
exit "$code"
"""


class DockerUnavailable(Exception):
    """No Docker engine answers; the message says where it was looked for."""


def parse_volume(spec: str) -> Mount:
    """HOST:CONTAINER[:ro|rw] (an agent's --docker-volume) as a bind mount."""
    parts = spec.split(":")
    mode = "rw"
    if len(parts) == 3 and parts[2] in ("ro", "rw"):
        mode = parts.pop()
    if len(parts) != 2 or not parts[0].startswith("/") or not parts[1].startswith("/"):
        raise ValueError(f"bad volume {spec!r}: use /HOST/PATH:/CONTAINER/PATH[:ro]")
    if not Path(parts[0]).exists():
        raise ValueError(f"bad volume {spec!r}: {parts[0]} does not exist")
    return Mount(parts[1], parts[0], type="bind", read_only=mode == "ro")


class DockerExecutor:
    name = "docker"
    in_container = True
    outlives_agent = True
    cancellable_start = True

    def __init__(
        self, client: docker.DockerClient, agent_label: str, volumes: list[Mount] | None = None, user: str | None = None
    ) -> None:
        self.client = client
        self.agent_label = agent_label
        self.volumes = list(volumes or [])
        # The agent's own uid: files the job writes in the workspace belong to
        # the agent's user, not to root.
        self.user = user or f"{os.getuid()}:{os.getgid()}"

    @classmethod
    def connect(
        cls,
        agent_label: str,
        volumes: list[Mount] | None = None,
        user: str | None = None,
        timeout: float = PING_TIMEOUT_S,
    ) -> "DockerExecutor":
        """The executor on the engine of DOCKER_HOST; raises DockerUnavailable when none answers."""
        try:
            client = docker.from_env(timeout=timeout, max_pool_size=64)
            client.ping()
        except ENGINE_ERRORS as exc:
            raise DockerUnavailable(f"no Docker engine answers at {docker_host()}: {reason(exc)}") from None
        client.api.timeout = API_TIMEOUT_S
        return cls(client, agent_label, volumes, user)

    # -- starting ----------------------------------------------------------------

    async def start(self, launch: Launch, sink: OutputSink) -> DockerExecution:
        loop = asyncio.get_running_loop()

        def say(text: str) -> None:  # a "sys" line, from any thread
            with contextlib.suppress(RuntimeError):  # loop closed: the agent is exiting
                loop.call_soon_threadsafe(sink, "sys", text.encode(errors="replace") + b"\n")

        await in_thread(ensure_image, self.client, launch.image, launch.pull, say)
        spec = self.container_spec(launch)
        try:
            fds = await in_thread(fresh_stdio_dir, _job_dir(launch), self.user)
        except OSError as exc:
            raise ExecutorError(f"could not make the job's output files: {exc}") from None
        pending = in_thread(self._create_and_start, spec, launch, say)
        try:
            container = await asyncio.shield(pending)
        except asyncio.CancelledError:
            close_all(fds)
            # Stopped while Docker was creating it: whenever that finishes, remove it.
            pending.add_done_callback(remove_when_done)
            raise
        except BaseException:
            close_all(fds)
            raise
        return DockerExecution(container, sink, stdio=_job_dir(launch) / STDIO_DIR, fds=fds)

    def container_spec(self, launch: Launch) -> dict[str, Any]:
        """The keyword arguments of `containers.create` for this job."""
        rel = launch.working_dir.resolve().relative_to(launch.workspace.resolve()).as_posix()
        workdir = WORKSPACE if rel == "." else str(PurePosixPath(WORKSPACE) / rel)
        env = dict(launch.env)
        env["TINI_KILL_PROCESS_GROUP"] = "1"  # see _WRAPPER
        if not self.user.startswith("0:") and "HOME" not in env:
            env["HOME"] = "/tmp"  # a uid unknown to the image gets HOME=/, which it cannot write
        spec = {
            "image": launch.image,
            # sh, not bash: small images have no bash. set -e as in the process executor.
            "command": ["sh", "-c", _WRAPPER, "lanpool-job", "set -e\n" + "\n".join(launch.commands) + "\n"],
            "working_dir": workdir,
            "mounts": [
                Mount(WORKSPACE, str(launch.workspace.resolve()), type="bind"),
                Mount(STDIO_MOUNT, str(_job_dir(launch) / STDIO_DIR), type="bind"),
                *self.volumes,
            ],
            "network_mode": "host",  # multi-node DDP reaches its peers as on the host
            "init": True,  # PID 1 that forwards signals: `sh` as PID 1 ignores SIGTERM
            # No device nodes: one made in /workspace (a bind mount) would be a device file on the host.
            "cap_drop": ["MKNOD"],
            "environment": env,
            "user": self.user,
            "labels": {LABEL_JOB: launch.job_id, LABEL_RUN: launch.run_name, LABEL_AGENT: self.agent_label},
            "shm_size": launch.shm_size or DEFAULT_SHM_SIZE,
            # Only the wrapper's own lines (the job's output goes to stdio/): kept for `docker logs`.
            "log_config": LogConfig(type=LogConfig.types.JSON),
        }
        if launch.memory_mb:
            spec["mem_limit"] = spec["memswap_limit"] = f"{launch.memory_mb}m"  # no swap: OOM is OOM
        if launch.cpus:
            spec["nano_cpus"] = int(launch.cpus * 1e9)
        if launch.gpus:
            spec["device_requests"] = [DeviceRequest(device_ids=[str(i) for i in launch.gpus], capabilities=[["gpu"]])]
        return spec

    def create(self, launch: Launch) -> Container:
        """Create the job's container without starting it (blocking)."""
        try:
            close_all(fresh_stdio_dir(_job_dir(launch), self.user))  # read by whoever starts it
        except OSError as exc:
            raise ExecutorError(f"could not make the job's output files: {exc}") from None
        try:
            return self.client.containers.create(**self.container_spec(launch))
        except ENGINE_ERRORS as exc:
            raise ExecutorError(f"could not create the container: {reason(exc)}") from None

    def _create_and_start(self, spec: dict[str, Any], launch: Launch, say: Callable[[str], None]) -> Container:
        try:
            container = self.client.containers.create(**spec)
        except ENGINE_ERRORS as exc:
            raise ExecutorError(f"could not create the container: {reason(exc)}") from None
        try:
            self._put_staged(container, launch, say)
        except BaseException:
            remove_quietly(container)
            raise
        try:
            container.start()
        except ENGINE_ERRORS as exc:
            remove_quietly(container)
            raise ExecutorError(f"could not start the container: {reason(exc)}") from None
        return container

    def _put_staged(self, container: Container, launch: Launch, say: Callable[[str], None]) -> None:
        """Each absolute artifact staged in the workspace (a dependency's, as `.lanpool-abs/opt/x.tar`:
        agent/workspace/abs_artifacts.py) put at its path in the created container, before it
        starts: checked again and owned by the job's user, through a copy in the job's dir."""
        for rel, path in staged_tars(launch.workspace):
            copy = _job_dir(launch) / f"put-{secrets.token_hex(4)}.tar"  # the agent's dir, not the job's
            try:
                with copy.open("x+b") as out:
                    for line in checked_for_put(launch.workspace, rel, path, out, self._owner()):
                        say(f"lanpool: {line}")
                    out.seek(0)
                    if not container.put_archive("/", out):
                        raise ExecutorError(f"the engine did not put the artifact {path!r} into the container")
            except TarRefused as exc:
                raise ExecutorError(f"the artifact {path!r} staged for this job was refused: {exc}") from None
            except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
                raise ExecutorError(f"could not put the artifact {path!r} into the container: {reason(exc)}") from None
            except OSError as exc:
                raise ExecutorError(f"could not read the artifact {path!r} staged as {rel!r}: {exc}") from None
            finally:
                copy.unlink(missing_ok=True)
            say(f"lanpool: artifact {path!r} put into the container")

    def _owner(self) -> tuple[int, int]:
        """The uid and gid jobs run as (files put into a container belong to them): 0 where
        `user` names a user rather than ids."""
        uid, _, gid = self.user.partition(":")
        return (int(uid), int(gid or 0)) if uid.isdigit() and (gid or "0").isdigit() else (0, 0)

    # -- finding containers again ------------------------------------------------------

    def containers(self, job_id: str | None = None) -> list[Container]:
        """This agent's containers (of one job, or all), running or not (blocking)."""
        labels = [f"{LABEL_AGENT}={self.agent_label}"]
        if job_id is not None:
            labels.append(f"{LABEL_JOB}={job_id}")
        found: list[Container] = self.client.containers.list(all=True, filters={"label": labels}, ignore_removed=True)
        return found

    async def adopt(self, job: Adoption, sink: OutputSink) -> DockerExecution:
        """Re-attach to a job's container after an agent restart; streaming resumes
        right after the bytes the spool holds (`job.delivered`).

        ExecutorError when no container of the job ever ran (one that was only
        created is removed) or the engine cannot be asked.
        """
        try:
            found = await in_thread(self.containers, job.job_id)
            container = found[0] if found else None
            if container is not None and container.status == "created":  # the agent died between create and start
                await in_thread(remove_quietly, container)
                container = None
        except ENGINE_ERRORS as exc:
            why = reason(exc)
            raise ExecutorError(f"the agent restarted and could not re-adopt the job's container: {why}") from None
        if container is None:
            raise ExecutorError(
                "the agent restarted and the job's container was gone"
                if job.started
                else "the agent restarted before the job's container started"
            )
        return DockerExecution(container, sink, dict(job.delivered), stdio=_stdio_of(container))

    def leftovers(self, active: set[str]) -> list[Container]:
        """This agent's containers that no running job of `active` is using (blocking)."""
        try:
            return [c for c in self.containers() if c.labels.get(LABEL_JOB) not in active]
        except ENGINE_ERRORS as exc:
            raise ExecutorError(f"cannot list containers: {reason(exc)}") from None

    def remove(self, container: Container) -> None:
        remove_quietly(container)

    async def remove_leftovers(self, active: set[str]) -> list[str]:
        """Remove the leftovers (see `leftovers`); their ids."""

        def run() -> list[str]:
            found = self.leftovers(active)
            for container in found:
                remove_quietly(container)
            return [c.id for c in found]

        return await in_thread(run)


def _job_dir(launch: Launch) -> Path:
    return launch.workspace.resolve().parent  # jobs/<id>/workspace


def _stdio_of(container: Container) -> Path | None:
    """The host dir of the container's stdio/ mount; None for a container an older agent
    started, whose output is in the engine's log only."""
    for mount in container.attrs.get("Mounts") or []:
        if mount.get("Destination") == STDIO_MOUNT and mount.get("Source"):
            return Path(mount["Source"])
    return None
