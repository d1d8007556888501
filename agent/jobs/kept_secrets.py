"""A job's secrets kept on the runner until it ends, so an agent restart loses none of them.

The runner is trusted with a job's secrets (its submit carries them: the env values
and the `masked` texts). Kept in memory only, a restart lost them: a queued job could
not start any more (its saved request has *** for them) and a re-adopted container's
later lines were spooled in clear. So they are kept in one file per job, mode 0600
(written so from the start, never through a link), in `secrets/` (0700) of the agent's
data dir: never in the job's dir, which holds what job code reaches (its workspace,
a container's stdio/ mount), nor in request.json, the journal or a log. Process
jobs in their sandbox see none of the data dir (agent.executors.sandbox). The file
goes when the job ends or is forgotten; a start-up removes any left by a crash.
"""

import contextlib
import json
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

_SUFFIX = ".json"


@dataclass(frozen=True)
class KeptSecrets:
    masked: list[str]  # SubmitJob.masked, as sent
    env: dict[str, str] = field(default_factory=dict)  # the env values that hold a secret, in clear


class SecretKeeper:
    def __init__(self, root: Path) -> None:
        self.root = root

    def keep(self, job_id: str, secrets: KeptSecrets) -> None:
        """Write the job's secrets: a new 0600 file, then renamed over any old one (a resent submit)."""
        self._make_dir()
        data = json.dumps({"masked": secrets.masked, "env": secrets.env}).encode()
        tmp = self.root / f"{job_id}.tmp"
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self._path(job_id))
        except OSError:
            tmp.unlink(missing_ok=True)
            raise

    def read(self, job_id: str) -> KeptSecrets | None:
        """The kept secrets, or None when there are none (or they cannot be read as written)."""
        try:
            fd = os.open(self._path(job_id), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    return None
                data = json.loads(f.read())
            masked, env = data["masked"], data["env"]
            if not (isinstance(masked, list) and all(isinstance(m, str) for m in masked)):
                return None
            if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
                return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("the kept secrets of job %s cannot be read: %s", job_id, exc)
            return None
        return KeptSecrets(masked, env)

    def forget(self, job_id: str) -> None:
        """The job ended (or was never queued): its secrets are of no more use here."""
        try:
            self._path(job_id).unlink(missing_ok=True)
        except OSError as exc:  # the job's end must still be recorded
            log.warning("cannot remove the kept secrets of job %s: %s", job_id, exc)

    def keep_only(self, job_ids: set[str]) -> None:
        """At start-up: the files of jobs not in `job_ids` (ended, or gone) are removed."""
        if not self.root.is_dir() or self.root.is_symlink():
            return
        for path in self.root.iterdir():
            if path.name.endswith(_SUFFIX) and path.name[: -len(_SUFFIX)] in job_ids:
                continue
            with contextlib.suppress(OSError):
                path.unlink()

    def _path(self, job_id: str) -> Path:
        return self.root / f"{job_id}{_SUFFIX}"  # job ids are checked: no '/', no leading '.'

    def _make_dir(self) -> None:
        if self.root.is_symlink():  # never written through a link put in its place
            self.root.unlink()
        self.root.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.root, 0o700)
