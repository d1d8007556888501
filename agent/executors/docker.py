"""Run a job in a Docker container: the job's image, its workspace bind-mounted
at /workspace, host networking, the GPUs the agent assigned, the agent's uid.

Every blocking SDK call runs in a daemon thread (`_in_thread`), so the event
loop never waits on Docker and an agent that exits is never held up by a call
that blocks. The container's output is read by `docker_logs.ContainerLog`.
"""

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container
from docker.types import DeviceRequest, LogConfig, Mount

from agent.executors.base import Adoption, ExecutorError, Handle, Launch, Outcome, OutputSink
from agent.executors.docker_logs import ContainerLog

log = logging.getLogger(__name__)

WORKSPACE = "/workspace"  # where the job's workspace is mounted in its container
DEFAULT_SHM_SIZE = "1g"  # Docker's own 64m starves DataLoader workers
PING_TIMEOUT_S = 3.0
API_TIMEOUT_S = 120.0
LABEL_JOB = "lanpool.job"
LABEL_RUN = "lanpool.run"
LABEL_AGENT = "lanpool.agent"  # the agent's data dir: agents sharing an engine keep to their own

_STREAMS_END_S = 3.0  # after the exit, how long live log streams get to end on their own
_PULL_PROGRESS_EVERY_S = 2.0
_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException, OSError)

# The container's command: this wrapper runs the job's script ($1) with `sh`.
# PID 1 is tini (init=True), which passes signals on to the wrapper's whole
# process group (TINI_KILL_PROCESS_GROUP), as the process executor's killpg
# does. SIGTERM ends the job's `sh` at once, while a program it started
# (python) may take a while to shut down; once the wrapper exited, tini would
# end the container and so SIGKILL that program. The wrapper therefore outlives
# SIGTERM and, after one, waits until every process of the job has exited
# (SIGKILL after the grace period still ends it all).
_WRAPPER = """\
trap 'stopping=1; interrupted=1' TERM INT
sh -c "$1" &
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
      case "${p#/proc/}" in 1|"$$") ;; *) [ -e "$p" ] && left=1 ;; esac
    done
    [ "$left" = 0 ] && break
    sleep 0.1
  done
fi
exit "$code"
"""


class DockerUnavailable(Exception):
    """No Docker engine answers; the message says where it was looked for."""


def docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


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
        except _ERRORS as exc:
            raise DockerUnavailable(f"no Docker engine answers at {docker_host()}: {_reason(exc)}") from None
        client.api.timeout = API_TIMEOUT_S
        return cls(client, agent_label, volumes, user)

    # -- starting ----------------------------------------------------------------

    async def start(self, launch: Launch, sink: OutputSink) -> "DockerExecution":
        loop = asyncio.get_running_loop()

        def say(text: str) -> None:  # a "sys" line, from any thread
            with contextlib.suppress(RuntimeError):  # loop closed: the agent is exiting
                loop.call_soon_threadsafe(sink, "sys", text.encode(errors="replace") + b"\n")

        await _in_thread(self._ensure_image, launch.image, launch.pull, say)
        spec = self.container_spec(launch)
        pending = _in_thread(self._create_and_start, spec)
        try:
            container = await asyncio.shield(pending)
        except asyncio.CancelledError:
            # Stopped while Docker was creating it: whenever that finishes, remove it.
            pending.add_done_callback(_remove_when_done)
            raise
        return DockerExecution(container, sink)

    def container_spec(self, launch: Launch) -> dict:
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
            "mounts": [Mount(WORKSPACE, str(launch.workspace.resolve()), type="bind"), *self.volumes],
            "network_mode": "host",  # multi-node DDP reaches its peers as on the host
            "init": True,  # PID 1 that forwards signals: `sh` as PID 1 ignores SIGTERM
            "environment": env,
            "user": self.user,
            "labels": {LABEL_JOB: launch.job_id, LABEL_RUN: launch.run_name, LABEL_AGENT: self.agent_label},
            "shm_size": launch.shm_size or DEFAULT_SHM_SIZE,
            # Logs are read back after the exit and after an agent restart: a driver that keeps them all.
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
            return self.client.containers.create(**self.container_spec(launch))
        except _ERRORS as exc:
            raise ExecutorError(f"could not create the container: {_reason(exc)}") from None

    def _create_and_start(self, spec: dict) -> Container:
        try:
            container = self.client.containers.create(**spec)
        except _ERRORS as exc:
            raise ExecutorError(f"could not create the container: {_reason(exc)}") from None
        try:
            container.start()
        except _ERRORS as exc:
            _remove_quietly(container)
            raise ExecutorError(f"could not start the container: {_reason(exc)}") from None
        return container

    def _ensure_image(self, image: str, pull: str, say: Callable[[str], None]) -> None:
        if pull != "always":
            try:
                self.client.images.get(image)
                return
            except docker.errors.ImageNotFound:
                if pull == "never":
                    raise ExecutorError(
                        f"image {image!r} not found locally and the job's pull policy is 'never'"
                    ) from None
            except _ERRORS as exc:
                raise ExecutorError(f"cannot look up image {image!r}: {_reason(exc)}") from None
        try:
            self._pull(image, say)
        except _ERRORS as exc:
            if pull == "always":
                raise ExecutorError(f"could not pull image {image!r} (pull: always): {_reason(exc)}") from None
            raise ExecutorError(f"image {image!r} not found locally and could not be pulled: {_reason(exc)}") from None

    def _pull(self, image: str, say: Callable[[str], None]) -> None:
        """Pull with progress as log lines: each layer's status changes, and its bytes every few seconds."""
        say(f"lanpool: pulling image {image}")
        seen: dict[str, tuple[str, float]] = {}
        for event in self.client.api.pull(image, stream=True, decode=True):
            if "error" in event:
                raise docker.errors.APIError(str(event["error"]))
            status, layer = event.get("status", ""), event.get("id", "")
            now = time.monotonic()
            last_status, last_time = seen.get(layer, ("", 0.0))
            if status == last_status and now - last_time < _PULL_PROGRESS_EVERY_S:
                continue
            seen[layer] = (status, now)
            detail = event.get("progressDetail") or {}
            progress = ""
            if detail.get("total"):
                progress = f" {detail.get('current', 0) / 1e6:.1f}/{detail['total'] / 1e6:.1f} MB"
            say(f"lanpool: pull: {layer + ': ' if layer else ''}{status}{progress}")
        say(f"lanpool: pulled image {image}")

    # -- finding containers again ------------------------------------------------------

    def containers(self, job_id: str | None = None) -> list[Container]:
        """This agent's containers (of one job, or all), running or not (blocking)."""
        labels = [f"{LABEL_AGENT}={self.agent_label}"]
        if job_id is not None:
            labels.append(f"{LABEL_JOB}={job_id}")
        return self.client.containers.list(all=True, filters={"label": labels}, ignore_removed=True)

    async def adopt(self, job: Adoption, sink: OutputSink) -> "DockerExecution":
        """Re-attach to a job's container after an agent restart; streaming resumes
        right after the bytes the spool holds (`job.delivered`).

        ExecutorError when no container of the job ever ran (one that was only
        created is removed) or the engine cannot be asked.
        """
        try:
            found = await _in_thread(self.containers, job.job_id)
            container = found[0] if found else None
            if container is not None and container.status == "created":  # the agent died between create and start
                await _in_thread(_remove_quietly, container)
                container = None
        except _ERRORS as exc:
            reason = _reason(exc)
            raise ExecutorError(f"the agent restarted and could not re-adopt the job's container: {reason}") from None
        if container is None:
            raise ExecutorError(
                "the agent restarted and the job's container was gone"
                if job.started
                else "the agent restarted before the job's container started"
            )
        return DockerExecution(container, sink, dict(job.delivered))

    def leftovers(self, active: set[str]) -> list[Container]:
        """This agent's containers that no running job of `active` is using (blocking)."""
        try:
            return [c for c in self.containers() if c.labels.get(LABEL_JOB) not in active]
        except _ERRORS as exc:
            raise ExecutorError(f"cannot list containers: {_reason(exc)}") from None

    def remove(self, container: Container) -> None:
        _remove_quietly(container)

    async def remove_leftovers(self, active: set[str]) -> list[str]:
        """Remove the leftovers (see `leftovers`); their ids."""

        def run() -> list[str]:
            found = self.leftovers(active)
            for container in found:
                _remove_quietly(container)
            return [c.id for c in found]

        return await _in_thread(run)


class DockerExecution:
    """A started (or re-adopted) container: its output, its exit, signals (through Docker: no host process group)."""

    def __init__(self, container: Container, sink: OutputSink, delivered: dict[str, int] | None = None) -> None:
        self.container = container
        self.container_id = container.id
        self.log = ContainerLog(container, sink, delivered)
        self._exit = _in_thread(self._wait_exit)
        self._live = asyncio.create_task(self.log.follow(self._exit.done))

    def describe(self) -> Handle:
        return Handle(container_id=self.container_id)

    async def wait(self) -> Outcome:
        code = await self._exit
        # The live streams end by themselves soon after the exit; one more
        # read of the whole log then delivers what they missed (dockerd 20.10
        # was seen to drop a last line without a newline from a following stream).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._live), _STREAMS_END_S)
        await self.detach()
        await self.log.catch_up()
        try:
            state, memory_limit = await _in_thread(self._state)
        except _ERRORS as exc:
            log.warning("container %s: cannot read its final state: %s", self.container_id[:12], _reason(exc))
            return Outcome(code)
        return Outcome(code, bool(state.get("OOMKilled")), memory_limit)

    def send_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name

        def kill() -> None:
            try:
                self.container.kill(signal=name)
            except docker.errors.APIError as exc:
                if exc.status_code not in (404, 409):  # gone, or not running: nothing to signal
                    log.warning("container %s: %s failed: %s", self.container_id[:12], name, _reason(exc))
            except _ERRORS as exc:
                log.warning("container %s: %s failed: %s", self.container_id[:12], name, _reason(exc))

        threading.Thread(target=kill, daemon=True, name=f"docker-kill-{self.container_id[:12]}").start()

    async def detach(self) -> None:
        """Stop streaming logs; the container itself keeps running."""
        self._live.cancel()
        self.log.close()
        with contextlib.suppress(asyncio.CancelledError):
            await self._live

    async def remove(self) -> None:
        await _in_thread(_remove_quietly, self.container)

    # -- internals --------------------------------------------------------------------

    def _wait_exit(self) -> int:
        while True:
            try:
                return int(self.container.wait()["StatusCode"])
            except docker.errors.NotFound:
                raise ExecutorError(f"container {self.container_id[:12]} was removed while the job ran") from None
            except _ERRORS as exc:  # engine restarting, connection dropped: ask again
                log.warning("container %s: waiting failed (%s); retrying", self.container_id[:12], _reason(exc))
                time.sleep(2)

    def _state(self) -> tuple[dict, int]:
        """The container's final State, and its memory limit in bytes (0: none)."""
        self.container.reload()
        return (
            self.container.attrs.get("State", {}),
            int(self.container.attrs.get("HostConfig", {}).get("Memory") or 0),
        )


def _in_thread(fn: Callable, *args) -> asyncio.Future:
    """Run a blocking call in a daemon thread (never holds up the agent's exit)."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(ok: bool, value) -> None:
        if not future.done():
            future.set_result(value) if ok else future.set_exception(value)

    def run() -> None:
        try:
            result = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            outcome = (False, exc)
        else:
            outcome = (True, result)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, daemon=True, name=f"docker-{getattr(fn, '__name__', 'call')}").start()
    return future


def _remove_quietly(container: Container) -> None:
    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        pass
    except _ERRORS as exc:
        log.warning("cannot remove container %s: %s", container.id[:12], _reason(exc))


def _remove_when_done(future: asyncio.Future) -> None:
    if not future.cancelled() and future.exception() is None:
        threading.Thread(target=_remove_quietly, args=(future.result(),), daemon=True).start()


def _reason(exc: BaseException) -> str:
    """One line: the engine's explanation when it gave one."""
    text = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return " ".join(str(text).split())
