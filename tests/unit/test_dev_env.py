"""A dev environment's job (app/runs/dev.py) and its keys in a workflow file; the idle limit on
a real agent: tests/integration/test_dev_env.py."""

from pathlib import Path

import pytest

from lanpool.app.cli.parser import parse_args
from lanpool.app.runs.dev import READY, STAY_UP, as_dev_environment, ready_dir
from lanpool.app.workflows import load_workflows
from lanpool.app.workflows.resolve import resolve
from tests.workflow_files import assert_at, load_error, write_workflows

BUILTINS = {"run_name": "run-1", "job_id": "abc123"}


def _project(tmp_path: Path, text: str):
    (tmp_path / ".lanpool").mkdir(exist_ok=True)
    (tmp_path / ".lanpool" / "workflows.yaml").write_text(text)
    return load_workflows(tmp_path)


def test_the_job_runs_its_commands_then_says_where_it_is_and_stays_up(tmp_path: Path):
    project = _project(
        tmp_path, "workflows:\n  - name: box\n    dev: true\n    idle: 90m\n    commands: [pip install -e .]\n"
    )
    wf = project.get("box")
    assert wf.dev and wf.idle_s == 5400
    job = as_dev_environment(resolve(project, "box", {}, BUILTINS), 5400)
    assert job.commands == ["pip install -e .", *STAY_UP] and job.idle_s == 5400
    assert ready_dir(f"{READY}/srv/jobs/abc/workspace") == "/srv/jobs/abc/workspace"
    assert ready_dir(f"[node 1] {READY}/x") is None  # only the line itself, never a line quoting it
    assert ready_dir("lanpool: something else") is None
    off = _project(tmp_path, "workflows:\n  - name: box\n    dev: true\n    idle: off\n    commands: [x]\n")
    assert off.get("box").idle_s == 0.0
    plain = _project(tmp_path, "workflows:\n  - name: box\n    commands: [x]\n")
    assert not plain.get("box").dev and plain.get("box").idle_s is None


@pytest.mark.parametrize(
    ("line", "says"),
    [("dev: maybe", "'dev' must be true or false"), ("idle: soon", "'idle' 'soon' is not a duration like 2h")],
)
def test_bad_dev_keys_are_refused_at_their_line(tmp_path: Path, line: str, says: str):
    path = write_workflows(tmp_path, f"workflows:\n  - name: box\n    commands: [x]\n    {line}\n")
    err = load_error(tmp_path)
    assert_at(err, path, 4)
    assert says in str(err)


def test_dev_on_the_command_line_is_run_dev():
    args = parse_args(["dev", "--idle", "30m", "box"])
    assert args.verb == "run" and args.dev and args.idle == 1800 and args.workflow == "box"
    assert parse_args(["dev", "--idle", "0"]).idle == 0.0
    assert parse_args(["run", "box"]).dev is False
