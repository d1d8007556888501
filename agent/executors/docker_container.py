"""A started (or re-adopted) job container: its output, its exit and outcome,
signals (through Docker: there is no host process group), its removal."""

import asyncio
import contextlib
import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

import docker.errors
from docker.models.containers import Container

from lanpool.agent.executors.base import ExecutorError, Handle, Outcome, OutputSink
from lanpool.agent.executors.docker_engine import ENGINE_ERRORS, in_thread, reason, remove_quietly
from lanpool.agent.executors.docker_logs import ContainerLog
from lanpool.agent.executors.docker_stdio import StdioFiles
from lanpool.agent.workspace.abs_artifacts import keep_copied

log = logging.getLogger(__name__)

_STREAMS_END_S = 3.0  # after the exit, how long live log streams get to end on their own


class DockerExecution:
    """A started (or re-adopted) container: its output, its exit, signals (through Docker: no host process group)."""

    def __init__(
        self,
        container: Container,
        sink: OutputSink,
        delivered: dict[str, int] | None = None,
        stdio: Path | None = None,
        fds: dict[str, int] | None = None,
    ) -> None:
        """`stdio`: the job's stdio/ dir its output is read from (docker_stdio.py); None for a
        container an older agent started, read through the engine's log API (docker_logs.py)."""
        self.container = container
        self.container_id = container.id
        self.log: StdioFiles | ContainerLog = (
            StdioFiles(stdio, sink, delivered, fds) if stdio is not None else ContainerLog(container, sink, delivered)
        )
        self._exit = in_thread(self._wait_exit)
        self._live = asyncio.create_task(self.log.follow(self._exit.done))

    def describe(self) -> Handle:
        return Handle(container_id=self.container_id)

    async def wait(self) -> Outcome:
        code = await self._exit
        # The live reading ends by itself soon after the exit; one more read
        # then delivers what it missed (for the log API: dockerd 20.10 was seen
        # to drop a last line without a newline from a following stream).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._live), _STREAMS_END_S)
        await self._stop_following()  # the files stay open: catch_up reads on from the same ones
        try:
            await self.log.catch_up()
        finally:
            self.log.close()
        try:
            state, memory_limit = await in_thread(self._state)
        except ENGINE_ERRORS as exc:
            log.warning("container %s: cannot read its final state: %s", self.container_id[:12], reason(exc))
            return Outcome(code)
        return Outcome(code, bool(state.get("OOMKilled")), memory_limit)

    def send_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name

        def kill() -> None:
            try:
                self.container.kill(signal=name)
            except docker.errors.APIError as exc:
                if exc.status_code not in (404, 409):  # gone, or not running: nothing to signal
                    log.warning("container %s: %s failed: %s", self.container_id[:12], name, reason(exc))
            except ENGINE_ERRORS as exc:
                log.warning("container %s: %s failed: %s", self.container_id[:12], name, reason(exc))

        threading.Thread(target=kill, daemon=True, name=f"docker-kill-{self.container_id[:12]}").start()

    async def detach(self) -> None:
        """Stop streaming logs; the container itself keeps running."""
        await self._stop_following()
        self.log.close()

    async def _stop_following(self) -> None:
        self._live.cancel()  # a log API pass closes its streams as it ends
        with contextlib.suppress(asyncio.CancelledError):
            await self._live

    async def remove(self) -> None:
        await in_thread(remove_quietly, self.container)

    async def copy_out(self, paths: list[str], workspace: Path) -> list[str]:
        """Copy each absolute artifact out of the ended container into the workspace (its
        tar, checked: agent/workspace/abs_artifacts.py); lines for the job's log. A path the
        job did not make is left to the artifact listing to say."""
        return await in_thread(self._copy_out, paths, workspace)

    def _copy_out(self, paths: list[str], workspace: Path) -> list[str]:
        lines: list[str] = []
        for path in paths:
            try:
                stream, _stat = self.container.get_archive(path)
                lines += keep_copied(workspace, path, stream)
            except docker.errors.NotFound:
                continue
            except ENGINE_ERRORS as exc:
                lines.append(f"artifact {path!r} could not be copied out of the container: {reason(exc)}")
        return lines

    # -- internals --------------------------------------------------------------------

    def _wait_exit(self) -> int:
        while True:
            try:
                return int(self.container.wait()["StatusCode"])
            except docker.errors.NotFound:
                raise ExecutorError(f"container {self.container_id[:12]} was removed while the job ran") from None
            except ENGINE_ERRORS as exc:  # engine restarting, connection dropped: ask again
                log.warning("container %s: waiting failed (%s); retrying", self.container_id[:12], reason(exc))
                time.sleep(2)

    def _state(self) -> tuple[dict[str, Any], int]:
        """The container's final State, and its memory limit in bytes (0: none)."""
        self.container.reload()
        return (
            self.container.attrs.get("State", {}),
            int(self.container.attrs.get("HostConfig", {}).get("Memory") or 0),
        )
