"""The executor interface the job manager talks to."""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

# Called with a stream name ("out"/"err") and whole lines ending in b"\n".
OutputSink = Callable[[str, bytes], None]


@dataclass(frozen=True)
class Launch:
    job_id: str
    commands: list[str]
    workspace: Path
    working_dir: Path
    env: dict[str, str] = field(default_factory=dict)


class Execution(Protocol):
    pid: int

    async def wait(self) -> int:
        """Wait for the end and for all output to be delivered; the exit code
        (128 + N when killed by signal N, as shells report it)."""
        ...

    def send_signal(self, sig: int) -> None:
        """Signal the job's whole process tree; no-op once it has exited."""
        ...


class Executor(Protocol):
    name: str

    async def start(self, launch: Launch, sink: OutputSink) -> Execution: ...
