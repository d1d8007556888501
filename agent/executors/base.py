"""The executor interface the job manager talks to: all it knows of how a job runs."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable


class OutputSink(Protocol):
    """Takes a stream name ("out", "err", or "sys" for the agent's own lines)
    and whole lines ending in b"\\n".

    `cut` is True when the executor added the final newline itself (a line cut
    at the length limit, or a last line the job ended without one), so the
    byte count of what the job wrote can be told from what was spooled.
    """

    def __call__(self, stream: str, data: bytes, cut: bool = False) -> None: ...


class ExecutorError(Exception):
    """A job that cannot be started (or taken back); the message is one line for the job's log and status."""


@dataclass(frozen=True)
class Launch:
    job_id: str
    commands: list[str]
    workspace: Path
    working_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    run_name: str = ""
    python: str = ""  # "3.10": the interpreter a process job runs with; "" = the runner's base
    requirements: str = ""  # a requirements file (relative to working_dir) installed before the commands
    hold_base: bool = True  # pip holds the base's torch/Lightning (agent/python/job_envs.py)
    # Containers only (the process executor runs on the host as it is):
    image: str = ""
    pull: str = "missing"  # never | missing | always
    gpus: tuple[int, ...] = ()  # host GPU indices assigned to the job
    memory_mb: int | None = None
    cpus: float | None = None
    shm_size: str | None = None  # as Docker takes it: "8g", "512m"
    # Slurm only: the request's resources map (nodes, slurm_* names) and time limit; a start
    # that waits in Slurm's queue says why (the job then shows QUEUED with it) and asks if it was stopped.
    resources: Mapping[str, int | str] = field(default_factory=dict)
    max_duration_s: float = 0.0
    on_pending: Callable[[str], None] | None = None
    stop_requested: Callable[[], bool] | None = None


@dataclass(frozen=True)
class Adoption:
    """What the journal kept of a job that was running (or starting) when the agent stopped."""

    job_id: str
    pid: int | None  # its host process group, if it had one
    started: bool  # False: the agent stopped while the job was still starting
    # Bytes of each stream ("out", "err") already spooled: output resumes after them.
    delivered: Mapping[str, int] = field(default_factory=dict)
    # As Launch.on_pending: a job re-adopted while its executor's queue (Slurm's) still holds it.
    on_pending: Callable[[str], None] | None = None


@dataclass(frozen=True)
class Outcome:
    """How a job ended."""

    exit_code: int  # 128 + N when killed by signal N, as shells report it
    oom_killed: bool = False  # the kernel killed it for exceeding its memory limit
    memory_limit: int = 0  # bytes; 0 = none
    # A limit outside lanpool that ended the job, named for its error ("Slurm time limit"); "" = none.
    ended_by: str = ""

    def oom_error(self) -> str:
        """The job's error when it was killed for memory, else ""."""
        if self.exit_code == 0 or not self.oom_killed:
            return ""
        limit = f" (limit {self.memory_limit / 2**20:g} MiB)" if self.memory_limit else ""
        return f"killed: out of memory{limit}"


@dataclass(frozen=True)
class Handle:
    """Where a job runs, as the journal keeps it: a host process group or a container."""

    pid: int | None = None
    container_id: str = ""

    def __str__(self) -> str:
        return f"container {self.container_id[:12]}" if self.container_id else f"pid {self.pid}"


class Execution(Protocol):
    def describe(self) -> Handle:
        """Where the job runs (for the journal and log lines)."""
        ...

    async def wait(self) -> Outcome:
        """Wait for the end and for all output to be delivered."""
        ...

    def send_signal(self, sig: int) -> None:
        """Signal the job's whole process tree; no-op once it has exited."""
        ...

    async def detach(self) -> None:
        """Stop following the job, which keeps running (the agent is exiting)."""
        ...

    async def remove(self) -> None:
        """Free what is left of an ended job (its output is spooled, its artifacts packed)."""
        ...


@runtime_checkable
class CopiesOut(Protocol):
    """An execution whose job's absolute artifacts are copied out of it once it ended (a container)."""

    async def copy_out(self, paths: list[str], workspace: Path) -> list[str]:
        """Each absolute path's files into the workspace (agent/workspace/abs_artifacts.py); log lines."""
        ...


class Executor(Protocol):
    name: str  # kept in the journal: the executor that takes the job back after a restart
    in_container: bool  # the job sees the container's paths and devices, not the host's
    # Its jobs keep running when the agent exits, and the next start adopts them;
    # the others are stopped with the agent.
    outlives_agent: bool
    # start() may take long (an image pull) and may be cancelled: a stop then gives it up.
    cancellable_start: bool

    async def start(self, launch: Launch, sink: OutputSink) -> Execution:
        """Start the job; raises ExecutorError (one line) when it cannot."""
        ...

    async def adopt(self, job: Adoption, sink: OutputSink) -> Execution:
        """Take a job back after an agent restart; ExecutorError (the reason, one line) when it cannot be."""
        ...

    async def remove_leftovers(self, active: set[str]) -> list[str]:
        """Remove what ended jobs (or jobs not in `active`) left behind; what was removed."""
        ...
