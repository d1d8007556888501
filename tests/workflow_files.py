"""Writing a project's workflows file and reading the one error it gives, for the tests of
the workflows format (test_workflows_parse, test_workflows_format)."""

import textwrap
from pathlib import Path

import pytest

from lanpool.app.workflows import Project, WorkflowError, load_workflows


def write_workflows(root: Path, text: str, sub: str = ".lanpool", name: str = "workflows.yaml") -> Path:
    """`text` (dedented) as root/sub/name; returns its path."""
    path = root / sub / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def load_strict(root: Path) -> Project:
    """The project at `root`, raising the first refusal (a test project's one fault) as an
    error of the workflow it names would be (app/workflows/loader.py)."""
    project = load_workflows(root)
    for error in project.refused.values():
        raise error
    return project


def load_error(root: Path) -> WorkflowError:
    """The WorkflowError that loading the project at `root`, or the one workflow it refuses, gives."""
    with pytest.raises(WorkflowError) as exc:
        load_strict(root)
    return exc.value


def assert_at(err: WorkflowError, path: Path, line: int) -> None:
    """The error names file and line, first in its one line (what an editor jumps to)."""
    assert str(err).startswith(f"{path}:{line}: "), str(err)
    assert (err.file, err.line) == (path, line)
    assert "\n" not in str(err)
