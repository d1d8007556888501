"""The controller's base exception and the CLI's exit codes (part of the API)."""

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes of `app headless` verbs. `run` exits with the job's own code instead,
    except when the job could not be started."""

    OK = 0
    FAILED = 1  # the operation (or job) failed
    USAGE = 2  # bad input: arguments, workflow files; nothing was run
    UNREACHABLE = 3  # a runner could not be reached or refused us
    NOT_FOUND = 4  # no such run, job or artifact


class LanpoolError(Exception):
    """An error with a message a user can act on, shown as one line by the CLI."""

    exit_code = ExitCode.FAILED

    def __init__(self, message: str, exit_code: ExitCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(LanpoolError):
    exit_code = ExitCode.USAGE


class RunnerError(LanpoolError):
    exit_code = ExitCode.UNREACHABLE


class RunnerRefused(RunnerError):
    """The runner does not accept this controller's key (not paired)."""


class HostKeyMismatch(RunnerError):
    """The runner's host key is not the one pinned for it."""


class RunnerProtocolError(RunnerError):
    """The runner answered with something this controller will not use: a message it
    cannot read, another job's lines or status, an archive it refuses. Unlike a lost
    connection this is not retried: asking again gets the same answer."""


class BlobsMissing(RunnerError):
    """The runner no longer has (or found damaged) a blob the submit names: send it again, then submit again."""


class NotFoundError(LanpoolError):
    exit_code = ExitCode.NOT_FOUND


class ArtifactsRefused(LanpoolError):
    """A runner's artifacts that the controller will not write: the reason is one line."""
