"""What a parsed workflow holds."""

from dataclasses import dataclass, field
from pathlib import Path

from app.errors import UsageError


class WorkflowError(UsageError):
    """A problem in a workflow file, reported as `file:line: what is wrong`."""

    def __init__(self, message: str, file: Path | None = None, line: int | None = None) -> None:
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(where + message)
        self.file = file
        self.line = line


@dataclass(frozen=True)
class Workflow:
    name: str
    commands: list[str]
    env: dict[str, str] = field(default_factory=dict)
    artifacts: list[str] = field(default_factory=list)
    working_dir: str = ""
    file: Path | None = None
    line: int | None = None


@dataclass(frozen=True)
class Project:
    """A directory with `.lanpool/` (or a 2022 `.dstack/`) workflow files."""

    root: Path
    workflows_file: Path
    workflows: dict[str, Workflow]

    def get(self, name: str) -> Workflow:
        try:
            return self.workflows[name]
        except KeyError:
            known = ", ".join(sorted(self.workflows)) or "none"
            raise WorkflowError(f"no workflow named {name!r} (workflows here: {known})", self.workflows_file) from None
