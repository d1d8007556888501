"""The one status enum for jobs (and, derived from them, runs)."""

from enum import StrEnum


class JobState(StrEnum):
    """Where a job is in its life.

    QUEUED     waiting: in a runner's queue for its resources (or a retry's delay),
               or recorded by a controller choosing a runner
    SUBMITTED  the controller recorded it and is sending it to a runner
    RUNNING    the runner started its commands
    DONE       commands exited 0 (artifacts packed)
    FAILED     a command exited non-zero, or the job could not start
    STOPPED    stopped on request; artifacts still packed
    ABORTED    stopped on request without artifacts
    LOST       the runner restarted or forgot the job while it ran
    """

    QUEUED = "QUEUED"
    SUBMITTED = "SUBMITTED"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    ABORTED = "ABORTED"
    LOST = "LOST"

    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({JobState.DONE, JobState.FAILED, JobState.STOPPED, JobState.ABORTED, JobState.LOST})
