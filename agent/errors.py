"""The agent's exceptions: a set-up problem the person running the agent can act on, and a
request about a job that cannot be honoured (its protocol error code goes back to the controller)."""

from lanpool.protocol import ErrorCode


class AgentError(Exception):
    """Raised for bad agent set-up (unreadable key file, data dir not writable...)."""


class JobError(Exception):
    """A request about a job that cannot be honoured; carries a protocol error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
