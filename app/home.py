"""Where the controller keeps its state: $LANPOOL_HOME or the platform's user data dir."""

import os
import tempfile
from pathlib import Path

import platformdirs

from lanpool.app.errors import UsageError
from lanpool.protocol.message_base import Record, record


@record
class ControllerHome(Record):
    """The controller's data dir, and whether $LANPOOL_HOME named it."""

    root: Path
    from_env: bool = False  # named by $LANPOOL_HOME: errors say so, since that is what to fix

    @classmethod
    def default(cls) -> "ControllerHome":
        env = os.environ.get("LANPOOL_HOME")
        if env:
            return cls(Path(env).expanduser(), from_env=True)
        return cls(Path(platformdirs.user_data_dir("lanpool")))

    @property
    def db(self) -> Path:
        return self.root / "lanpool.db"

    @property
    def key(self) -> Path:
        return self.root / "id_ed25519"

    @property
    def ssh_dir(self) -> Path:
        """`app headless ssh-config`'s files: the ssh_config of the running jobs and their runners'
        pinned dev sshd host keys (app/shell/ssh_config.py), the ControlMaster sockets."""
        return self.root / "ssh"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    def job_artifacts(self, job_id: str) -> Path:
        return self.artifacts / job_id

    @staticmethod
    def downloads(run_name: str) -> Path:
        """Where `artifacts download` puts a run's files when no directory is given:
        $LANPOOL_DOWNLOADS/RUN, else the user's download dir /lanpool/RUN. Never the
        project: files there would join the next code snapshot and change its cache key."""
        base = os.environ.get("LANPOOL_DOWNLOADS")
        root = Path(base).expanduser() if base else Path(platformdirs.user_downloads_dir()) / "lanpool"
        return root / run_name

    def create(self) -> None:
        """Make the directories, or say in one line why this place cannot hold them.

        Writing a probe file finds what permission bits do not (root ignores them; a
        read-only file system does not), before SQLite or the key fail less clearly.
        """
        where = f"LANPOOL_HOME={self.root}" if self.from_env else f"lanpool's data directory {self.root}"
        fix = "point LANPOOL_HOME at a directory you can write (it is created if missing)"
        if self.root.exists() and not self.root.is_dir():
            raise UsageError(f"{where} is a file, not a directory: {fix}")
        try:
            # Its logs, env values and artifacts are the user's alone: 0700 when made here (a
            # directory that exists keeps its mode: it may be one the user chose and shares).
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.artifacts.mkdir(mode=0o700, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.root, prefix=".write-probe-"):
                pass
        except OSError as exc:
            raise UsageError(f"{where} cannot be used: {exc.strerror or exc}: {fix}") from None
