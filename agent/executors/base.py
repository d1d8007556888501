"""The executor interface the job manager talks to."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class OutputSink(Protocol):
    """Takes a stream name ("out", "err", or "sys" for the agent's own lines)
    and whole lines ending in b"\\n".

    `cut` is True when the executor added the final newline itself (a line cut
    at the length limit, or a last line the job ended without one), so the
    byte count of what the job wrote can be told from what was spooled.
    """

    def __call__(self, stream: str, data: bytes, cut: bool = False) -> None: ...


class ExecutorError(Exception):
    """A job that cannot be started; the message is one line for the job's log and status."""


@dataclass(frozen=True)
class Launch:
    job_id: str
    commands: list[str]
    workspace: Path
    working_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    run_name: str = ""
    # Containers only (the process executor runs on the host as it is):
    image: str = ""
    pull: str = "missing"  # never | missing | always
    gpus: tuple[int, ...] = ()  # host GPU indices assigned to the job
    memory_mb: int | None = None
    cpus: float | None = None
    shm_size: str | None = None  # as Docker takes it: "8g", "512m"


class Execution(Protocol):
    pid: int | None  # the host process group to kill, if there is one

    async def wait(self) -> int:
        """Wait for the end and for all output to be delivered; the exit code
        (128 + N when killed by signal N, as shells report it)."""
        ...

    def send_signal(self, sig: int) -> None:
        """Signal the job's whole process tree; no-op once it has exited."""
        ...


class Executor(Protocol):
    name: str

    async def start(self, launch: Launch, sink: OutputSink) -> Execution:
        """Start the job; raises ExecutorError (one line) when it cannot."""
        ...
