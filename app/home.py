"""Where the controller keeps its state: $LANPOOL_HOME or the platform's user data dir."""

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs


@dataclass(frozen=True)
class ControllerHome:
    root: Path

    @classmethod
    def default(cls) -> "ControllerHome":
        env = os.environ.get("LANPOOL_HOME")
        return cls(Path(env).expanduser() if env else Path(platformdirs.user_data_dir("lanpool")))

    @property
    def db(self) -> Path:
        return self.root / "lanpool.db"

    @property
    def key(self) -> Path:
        return self.root / "id_ed25519"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    def job_artifacts(self, job_id: str) -> Path:
        return self.artifacts / job_id

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.artifacts.mkdir(exist_ok=True)
