"""A dev environment's job (app/runs/dev.py) and its keys in a workflow file; the idle limit on
a real agent: tests/integration/test_dev_env.py."""

from pathlib import Path

import pytest

from lanpool.app.cli.parser import parse_args
from lanpool.app.runs.dev import (
    EDITOR_PORT,
    JUPYTER_READY,
    JUPYTER_TOKEN_ENV,
    READY,
    STAY_UP,
    DevEnvironment,
    as_dev_environment,
    jupyter_url,
    marker_port,
    ready_dir,
)
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
    job = as_dev_environment(resolve(project, "box", {}, BUILTINS), DevEnvironment(5400))
    # One port the runner picks, kept for an editor's server (VS Code's), said before the ready line.
    assert job.commands == ["pip install -e .", f'echo "{EDITOR_PORT}$PORT_0"', *STAY_UP] and job.idle_s == 5400
    assert job.port_count == 1
    assert marker_port(f"{EDITOR_PORT}41234", EDITOR_PORT) == 41234
    assert ready_dir(f"{READY}/srv/jobs/abc/workspace") == "/srv/jobs/abc/workspace"
    assert ready_dir(f"[node 1] {READY}/x") is None  # only the line itself, never a line quoting it
    assert ready_dir("lanpool: something else") is None
    off = _project(tmp_path, "workflows:\n  - name: box\n    dev: true\n    idle: off\n    commands: [x]\n")
    assert off.get("box").idle_s == 0.0
    plain = _project(tmp_path, "workflows:\n  - name: box\n    commands: [x]\n")
    assert not plain.get("box").dev and plain.get("box").idle_s is None


def test_ide_jupyter_is_a_dev_environment_serving_jupyterlab_on_one_more_picked_port(tmp_path: Path):
    project = _project(tmp_path, "workflows:\n  - name: nb\n    ide: jupyter\n    ports: 2\n    commands: [x]\n")
    wf = project.get("nb")
    assert wf.dev and wf.ide == "jupyter"  # `dev: true` implied
    job = as_dev_environment(resolve(project, "nb", {}, BUILTINS), DevEnvironment(60, "jupyter", "t0k"))
    # The workflow's own $PORT_0 and $PORT_1 stay its own; the editor's is $PORT_2, JupyterLab's
    # $PORT_3, declared like them.
    assert job.port_count == 4 and job.env[JUPYTER_TOKEN_ENV] == "t0k"
    assert job.commands[0] == "x" and job.commands[-3:] == [f'echo "{EDITOR_PORT}$PORT_2"', *STAY_UP]
    started = "\n".join(job.commands[1:-3])
    assert '--ServerApp.port="$PORT_3"' in started and "--ServerApp.ip=127.0.0.1" in started
    # The token by environment: never in the command text, nor in JupyterLab's argv (/proc/PID/cmdline).
    assert f'JUPYTER_TOKEN="${JUPYTER_TOKEN_ENV}" python -m jupyterlab ' in started and "token=" not in started
    assert "t0k" not in started and f'echo "{JUPYTER_READY}$PORT_3' in started
    plain = as_dev_environment(resolve(project, "nb", {}, BUILTINS), DevEnvironment(60))
    assert plain.port_count == 3 and JUPYTER_TOKEN_ENV not in plain.env
    assert marker_port(f"{JUPYTER_READY}40123 (its log: /tmp/x)", JUPYTER_READY) == 40123
    for line in (f"[node 1] {JUPYTER_READY}40123", f"{JUPYTER_READY}99999", f"{JUPYTER_READY}x", "port 40123"):
        assert marker_port(line, JUPYTER_READY) is None, line
    assert jupyter_url(5555, "abc") == "http://127.0.0.1:5555/lab?token=abc"


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("dev: maybe", "'dev' must be true or false"),
        ("idle: soon", "'idle' 'soon' is not a duration like 2h"),
        ("ide: vscode", "'ide' 'vscode' is not one lanpool starts: jupyter"),
        ("ide: [jupyter]", "'ide' \"['jupyter']\" is not one lanpool starts"),
    ],
)
def test_bad_dev_keys_are_refused_at_their_line(tmp_path: Path, line: str, says: str):
    path = write_workflows(tmp_path, f"workflows:\n  - name: box\n    commands: [x]\n    {line}\n")
    err = load_error(tmp_path)
    assert_at(err, path, 4)
    assert says in str(err)


def test_ide_with_dev_false_is_refused_at_its_line(tmp_path: Path):
    path = write_workflows(tmp_path, "workflows:\n  - name: nb\n    commands: [x]\n    dev: false\n    ide: jupyter\n")
    err = load_error(tmp_path)
    assert_at(err, path, 5)
    assert "'ide' makes a dev environment: drop `dev: false`" in str(err)


def test_dev_on_the_command_line_is_run_dev():
    args = parse_args(["dev", "--idle", "30m", "box"])
    assert args.verb == "run" and args.dev and args.idle == 1800 and args.workflow == "box"
    assert parse_args(["dev", "--idle", "0"]).idle == 0.0
    assert parse_args(["run", "box"]).dev is False
    assert parse_args(["dev", "--ide", "jupyter", "box"]).ide == "jupyter"
