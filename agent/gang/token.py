"""A detached gang member's token, kept in its job's private dir until the job ends.

A member needs its gang's token to reach node 0's agent (agent.gang.hub): until its
gang starts, and again to re-join node 0 if that connection drops while it runs.
Kept in memory only, it was lost when the member's agent restarted before Go.
The runner is already trusted with it, so it is kept beside the job: a 0600 file
in the job's dir (the agent's home is 0700), never in request.json, the journal
or a log, deleted when the job ends. Node 0 keeps only its sha256 (agent.jobs.queue).
"""

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

TOKEN_FILE = "gang.token"


def keep_token(job_dir: Path, token: str) -> None:
    """Write the token for a restarted agent: a new file (never through a link), 0600 from the start."""
    fd = os.open(job_dir / TOKEN_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)


def read_token(job_dir: Path) -> str:
    """The kept token, or "" when there is none (or it cannot be read)."""
    try:
        return (job_dir / TOKEN_FILE).read_text().strip()
    except OSError:
        return ""


def forget_token(job_dir: Path) -> None:
    """The job ended: its token is of no more use to anyone here."""
    try:
        (job_dir / TOKEN_FILE).unlink(missing_ok=True)
    except OSError as exc:  # the job's end must still be recorded
        log.warning("cannot remove the gang token of %s: %s", job_dir.name, exc)
