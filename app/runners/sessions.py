"""The sessions a run's placement opens while it probes, kept for the run to submit on.

Placing a run checks every known runner (Pool.refresh: one SSH connection each),
then connects to the chosen ones: without this, `run -d` of a DAG probed the pool
three times (the run's check, the one runner for the chain, the step's placement)
and connected once more, each an SSH handshake. While a run is being placed
(Placement), the pool keeps each trusted runner's probe session here, answers a
refresh from the probe just made (FRESH_S), and `Pool.connect` takes the session
back instead of opening another: it was opened with the same pinned host key, and
connect checks it again as it checks a new one. What is not taken is closed when
the placement ends.
"""

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # asyncssh is imported only by what talks to runners
    from lanpool.app.runners.client import RunnerSession

# A probe this recent stands for a new one: the queue's poll (QUEUE_POLL_S) is longer,
# so a run waiting for room still looks again each time.
FRESH_S = 1.0


class RunSessions:
    def __init__(self) -> None:
        self._sessions: dict[tuple[str, int], RunnerSession] = {}
        self._probed_at: float | None = None

    def keep(self, host: str, port: int, session: "RunnerSession") -> None:
        old = self._sessions.pop((host, port), None)
        if old is not None:
            old.close()
        self._sessions[host, port] = session

    def probed(self) -> None:
        self._probed_at = time.monotonic()

    def fresh(self) -> bool:
        return self._probed_at is not None and time.monotonic() - self._probed_at < FRESH_S

    def take(self, host: str, port: int, pinned: str | None) -> "RunnerSession | None":
        """The kept session with host:port, if its host key is the one pinned for it now."""
        session = self._sessions.pop((host, port), None)
        if session is None:
            return None
        if not pinned or session.host_key != pinned or session.conn.is_closed():
            session.close()
            return None
        return session

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()
