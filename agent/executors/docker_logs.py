"""A container's output as whole lines, each byte delivered exactly once, through the
engine's log API: only for containers an older agent started (before their output
went to stdio/ files, docker_stdio.py), which a restarted agent re-adopts.

Docker can only stream a container's log from its start, so every pass over
it (live while the container runs, one more after it exited, and the first one
after an agent restart) reads from byte 0 and skips what was already delivered:
`delivered` counts the bytes of each stream that went to the sink, and a
restarted agent sets it from its spool. A line without its newline yet is held
back (not counted) and read again by the next pass if this one ends first.

The SDK's stream blocks, so each stream (out, err) is read by a daemon thread
that feeds an asyncio.Queue; counting and delivering happen on the event loop.
"""

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from docker.models.containers import Container

from lanpool.agent.executors.base import OutputSink

log = logging.getLogger(__name__)

STREAMS = ("out", "err")
# What a stream's reader thread hands the loop: a chunk, the error that ended it, or None at its end.
_Item = tuple[str, bytes | Exception | None]
_MAX_LINE = 64 * 1024  # a longer line is cut, so one runaway line cannot hold memory
_REOPEN_AFTER_S = 1.0


class ContainerLog:
    def __init__(self, container: Container, sink: OutputSink, delivered: dict[str, int] | None = None) -> None:
        self._container = container
        self._sink = sink
        self.delivered = {s: (delivered or {}).get(s, 0) for s in STREAMS}
        self._pos = {s: 0 for s in STREAMS}  # bytes of each stream seen by the current pass
        self._partial = {s: b"" for s in STREAMS}  # seen by this pass, not delivered: no newline yet
        self._readers: list[_LogReader] = []

    async def follow(self, ended: Callable[[], bool]) -> None:
        """Deliver the output live until the streams end; one that broke is opened
        again (from where it was) while `ended()` is false."""
        while True:
            failed = await self._pass(follow=True)
            if not failed or ended():
                return
            await asyncio.sleep(_REOPEN_AFTER_S)

    async def catch_up(self) -> None:
        """After the container exited: one full read delivers whatever the live
        streams missed, a last line without a newline included."""
        await self._pass(follow=False)
        for stream in STREAMS:
            if self._partial[stream]:
                self._deliver(stream, self._partial[stream], cut=True)
                self._partial[stream] = b""

    def close(self) -> None:
        """Close the streams being read (their threads end)."""
        for reader in self._readers:
            reader.close()

    async def _pass(self, follow: bool) -> bool:
        """Read both streams from their start, delivering what is new; True if a stream failed."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._pos = {s: 0 for s in STREAMS}
        self._partial = {s: b"" for s in STREAMS}
        self._readers = [_LogReader(self._container, s, follow, loop, queue) for s in STREAMS]
        for reader in self._readers:
            reader.start()
        failed = False
        open_streams = len(self._readers)
        try:
            while open_streams:
                stream, item = await queue.get()
                if item is None:
                    open_streams -= 1
                elif isinstance(item, BaseException):
                    log.warning("container %s: %s log stream: %s", self._container.id[:12], stream, item)
                    failed = True
                else:
                    self._take(stream, item)
        finally:
            self.close()
        return failed

    def _take(self, stream: str, chunk: bytes) -> None:
        # Bytes before `held` were delivered, or are held in `partial` already.
        held = self.delivered[stream] + len(self._partial[stream])
        start = held - self._pos[stream]
        self._pos[stream] += len(chunk)
        if start >= len(chunk):
            return
        buf = self._partial[stream] + chunk[max(start, 0) :]
        cut = buf.rfind(b"\n") + 1
        if cut:
            self._deliver(stream, buf[:cut])
            buf = buf[cut:]
        while len(buf) > _MAX_LINE:
            self._deliver(stream, buf[:_MAX_LINE], cut=True)
            buf = buf[_MAX_LINE:]
        self._partial[stream] = buf

    def _deliver(self, stream: str, data: bytes, cut: bool = False) -> None:
        self._sink(stream, data + b"\n" if cut else data, cut)
        self.delivered[stream] += len(data)


class _LogReader(threading.Thread):
    """One stream of a container's log, pushed to the loop's queue; None marks its end."""

    def __init__(
        self,
        container: Container,
        stream: str,
        follow: bool,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[_Item],
    ) -> None:
        super().__init__(daemon=True, name=f"docker-logs-{container.id[:12]}-{stream}")
        self._container = container
        self._stream = stream
        self._follow = follow
        self._loop = loop
        self._queue = queue
        self._source = None
        self._closed = False

    def run(self) -> None:
        try:
            source = self._source = self._container.logs(
                stream=True, follow=self._follow, stdout=self._stream == "out", stderr=self._stream == "err"
            )
            for chunk in source:
                if self._closed:
                    break
                self._put(chunk)
        except Exception as exc:  # any: reported to the loop, which decides
            if not self._closed:
                self._put(exc)
        finally:
            self._put(None)

    def _put(self, item: bytes | Exception | None) -> None:
        with contextlib.suppress(RuntimeError):  # loop closed: the agent is exiting
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (self._stream, item))

    def close(self) -> None:
        self._closed = True
        if self._source is not None:
            with contextlib.suppress(Exception):
                self._source.close()
