"""A lanpool job running as a Slurm job: its output files tailed into the spool, its end
read from the wrapper's exit-code file, its signals sent with scancel.

Output is read from byte offsets and delivered as whole lines, so an agent
restart resumes exactly after what the spool holds (Adoption.delivered): no line
lost or repeated. Slurm is polled (`sbatch --wait` returns seconds late).
"""

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from pathlib import Path

from lanpool.agent.executors.base import ExecutorError, Handle, Outcome, OutputSink
from lanpool.agent.executors.slurm_cli import cancel, job_state
from lanpool.agent.executors.slurm_script import ERR_FILE, EXIT_FILE, OUT_FILE

log = logging.getLogger(__name__)

POLL_S = 0.1  # the output files and the exit-code file: a line reaches the spool this fast
STATE_POLL_S = 1.0  # squeue, for a job that ended without its wrapper (killed, node lost)
_READ_SIZE = 256 * 1024
_MAX_LINE = 64 * 1024  # as the process executor: one runaway line cannot hold memory
# Slurm says the job ended but no exit file yet: shared storage may show it late.
_EXIT_FILE_WAIT_S = 3.0
_SETTLE_WAIT_S = 5.0  # for Slurm to say whether its time limit ended a job that exited non-zero
_TIME_LIMIT = "Slurm time limit (--time)"
_ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL"}


class _Tail:
    """One output file read from an offset; whole lines out, the partial one kept for later."""

    def __init__(self, path: Path, stream: str, offset: int) -> None:
        self.path, self.stream, self.offset = path, stream, offset
        self.partial = b""

    def read(self) -> bytes:
        """New bytes (blocking; called in a thread: shared storage may be slow)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(_READ_SIZE)
        except FileNotFoundError:
            return b""
        self.offset += len(data)
        return data

    def deliver(self, data: bytes, sink: OutputSink, final: bool) -> None:
        data = self.partial + data
        cut = data.rfind(b"\n") + 1
        if cut:
            sink(self.stream, data[:cut])
            data = data[cut:]
        if len(data) > _MAX_LINE or (final and data):
            sink(self.stream, data + b"\n", True)
            data = b""
        self.partial = data


class SlurmExecution:
    def __init__(
        self,
        slurm_id: str,
        slurm_dir: Path,
        sink: OutputSink,
        delivered: dict[str, int] | None = None,
        on_pending: Callable[[str], None] | None = None,
    ):
        self.slurm_id = slurm_id
        # A re-adopted job may still be pending in Slurm: wait() says so (it shows QUEUED) until it runs.
        self._on_pending = on_pending
        self._pending = ""
        self.dir = slurm_dir
        self._sink = sink
        done = delivered or {}
        self._tails = [
            _Tail(slurm_dir / OUT_FILE, "out", done.get("out", 0)),
            _Tail(slurm_dir / ERR_FILE, "err", done.get("err", 0)),
        ]
        self._tasks: set[asyncio.Task[None]] = set()
        self.state = ""  # Slurm's, as last polled

    def describe(self) -> Handle:
        # The journal's container_id field holds it; re-adoption reads the job's id file (slurm_script.ID_FILE).
        return Handle(container_id=f"slurm-{self.slurm_id}")

    async def wait(self) -> Outcome:
        loop = asyncio.get_running_loop()
        next_state = 0.0
        ended_at: float | None = None
        while True:
            await self._drain(final=False)
            code = await asyncio.to_thread(self._exit_code)
            if code is not None:
                await self._drain(final=True)
                return Outcome(code, ended_by=await self._time_limit_hit() if code else "")
            now = loop.time()
            if now >= next_state:
                next_state = now + STATE_POLL_S
                state, reason = await job_state(self.slurm_id)
                self.state = state
                self._note_pending(f"Slurm: {reason}" if state == "PENDING" else "")
                if (not state or state in _ENDED) and ended_at is None:
                    ended_at = now
                    log.info("Slurm job %s ended (%s, %s); waiting for its exit file", self.slurm_id, state, reason)
            if ended_at is not None and now - ended_at > _EXIT_FILE_WAIT_S:
                await self._drain(final=True)
                why = f"Slurm job {self.slurm_id} ended ({self.state or 'gone'}) without its exit code"
                self._sink("sys", f"lanpool: {why}; counted as killed\n".encode())
                return Outcome(128 + signal.SIGKILL, ended_by=_TIME_LIMIT if self.state == "TIMEOUT" else "")
            await asyncio.sleep(POLL_S)

    def _note_pending(self, reason: str) -> None:
        if reason != self._pending and self._on_pending is not None:
            self._pending = reason
            self._on_pending(reason)

    async def _time_limit_hit(self) -> str:
        """_TIME_LIMIT when Slurm's --time (the backstop past max_duration) ended the job, else "".
        The wrapper's exit file may come before Slurm settles the job's state (COMPLETING)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _SETTLE_WAIT_S
        while True:
            try:
                state, reason = await job_state(self.slurm_id)
            except ExecutorError:
                return ""
            if state == "TIMEOUT" or reason == "TimeLimit":
                return _TIME_LIMIT
            if state != "COMPLETING" or loop.time() >= deadline:
                return ""
            await asyncio.sleep(STATE_POLL_S / 4)

    def send_signal(self, sig: int) -> None:
        name = "TERM" if sig == signal.SIGTERM else "KILL" if sig == signal.SIGKILL else signal.Signals(sig).name[3:]
        task = asyncio.get_running_loop().create_task(self._signal(name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _signal(self, name: str) -> None:
        try:
            await cancel(self.slurm_id, name)
            if name == "KILL":
                await cancel(self.slurm_id, None)  # and the allocation itself
        except ExecutorError as exc:
            self._sink("sys", f"lanpool: could not signal Slurm job {self.slurm_id}: {exc}\n".encode())

    async def detach(self) -> None:
        pass  # the Slurm job keeps running; the next agent re-adopts it by its id

    async def remove(self) -> None:
        pass  # its files are in the job's directory, which is the job's

    async def _drain(self, final: bool) -> None:
        for tail in self._tails:
            while True:
                data = await asyncio.to_thread(tail.read)
                tail.deliver(data, self._sink, final=False)
                if len(data) < _READ_SIZE:
                    break
            if final:  # a last line the job ended without a newline
                tail.deliver(b"", self._sink, final=True)

    def _exit_code(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            text = (self.dir / EXIT_FILE).read_text().strip()
            code = int(text)
            return 128 - code if code < 0 else code
        return None
