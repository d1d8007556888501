"""Layout of an agent's data dir.

data_dir/
  host_key            ed25519 host key (created on first start)
  host_key.pub
  authorized_keys     controller keys allowed in
  agent.json          pid, name, address of the running agent
  agent.lock          held (shared) by a running agent, (exclusive) by `app agent gc --queued`
  jobs/<id>/          job.json (journal), log.spool, workspace/
  blobs/<sha256>      content-addressed file cache: workspaces are built from it
  pyenvs/<key>/       installed `requirements:` layers jobs' Python environments share
  secrets/<id>.json   an unfinished job's secrets (0600, the dir 0700): kept for a restart
  usage.jsonl         a line per job that ran, when it ended (0600): `app agent usage`; gc keeps it
  dev-sshd-host-key   the jobs' dev sshd's ed25519 host key (0600; agent/shell/dev_sshd.py), made at start
"""

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class AgentHome:
    root: Path
    # Jobs elsewhere (--executor slurm --slurm-dir: storage every compute node sees); None = root/jobs.
    jobs_root: Path | None = None

    @property
    def host_key(self) -> Path:
        return self.root / "host_key"

    @property
    def authorized_keys(self) -> Path:
        return self.root / "authorized_keys"

    @property
    def info_file(self) -> Path:
        return self.root / "agent.json"

    @property
    def lock_file(self) -> Path:
        return self.root / "agent.lock"

    @property
    def jobs(self) -> Path:
        return self.jobs_root or self.root / "jobs"

    @property
    def blobs(self) -> Path:
        return self.root / "blobs"

    @property
    def legacy_transfer(self) -> Path:
        """The SFTP root of agents before protocol 3 (tars nobody reads now): `app agent gc` removes it."""
        return self.root / "transfer"

    @property
    def pyenvs(self) -> Path:
        return self.root / "pyenvs"

    @property
    def secrets(self) -> Path:
        """Unfinished jobs' secrets (agent.jobs.kept_secrets): beside jobs/, never in a job's dir."""
        return self.root / "secrets"

    @property
    def usage_ledger(self) -> Path:
        """What jobs used (agent.jobs.usage): in the data dir, not jobs/, so it outlives `app agent gc`."""
        return self.root / "usage.jsonl"

    @property
    def dev_sshd_host_key(self) -> Path:
        """The dev sshd's host key (agent/shell/dev_sshd.py): in the data dir, which no job can read
        (a sandbox sees it as an empty tmpfs), and kept, so the controllers' known_hosts line holds."""
        return self.root / "dev-sshd-host-key"

    def job_dir(self, job_id: str) -> Path:
        return self.jobs / job_id

    def create(self) -> None:
        for d in (self.root, self.jobs, self.blobs):
            d.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)

    def write_info(self, info: dict[str, Any]) -> None:
        write_json_atomic(self.info_file, info)

    def lock(self, exclusive: bool) -> int | None:
        """The data dir's lock, taken: an fd to keep open while it is held (closing it lets go).

        A running agent holds it shared, from before it reads the journal to its exit; what
        changes an unfinished job's files behind it (`app agent gc --queued`) holds it exclusive.
        Exclusive: None when an agent holds it. Shared: waits for such a change to end."""
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            if exclusive:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    return None
            else:
                fcntl.flock(fd, fcntl.LOCK_SH)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        return fd


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON so a crash leaves either the old or the new file, never half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)
