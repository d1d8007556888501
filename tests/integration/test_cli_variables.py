"""Variables always reach the job: lanpool's options before the workflow
name, the workflow's variables after it; any variable name works, an override is
never dropped or taken for an option, a spelling that could mean two things is an
error naming both, nothing is matched by prefix. Through the real CLI, on a real agent."""

import json
import re

import pytest

from lanpool.app.workflows import WorkflowError, load_workflows

WORKFLOWS = """
workflows:
  - name: w
    commands:
      - echo "run=${{ run }} project=${{ project }} n=${{ n }} tag=${{ tag }} res=${{ res }}"
      - echo "runner=${{ runner }} detach=${{ detach }} d=${{ d }} help=${{ help }} no_cache=${{ no_cache }}"
  - name: plain
    commands:
      - echo "lr=${{ lr }}"
  - name: after-plain
    depends-on: ["plain:v2"]
    commands: [echo after]
  - name: after-w
    depends-on: ["w:t1"]
    commands: [echo after]
"""
VARIABLES = """
variables:
  w:
    run: baseline
    project: alpha
    n: 1
    tag: t0
    res: 0.5
    runner: r0
    detach: stay
    d: 4
    help: none
    no_cache: keep
  plain:
    lr: 0.1
"""
DEFAULTS = "run=baseline project=alpha n=1 tag=t0 res=0.5\nrunner=r0 detach=stay d=4 help=none no_cache=keep\n"


@pytest.fixture
def project(make_project):
    return make_project(WORKFLOWS, files={".lanpool/variables.yaml": VARIABLES})


def _error(res, *fragments: str) -> str:
    """One line on stderr, exit 2, no traceback, naming every fragment."""
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def _plan_vars(cli, project, *args: str) -> dict:
    res = cli("headless", "plan", *args, cwd=project)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["jobs"][-1]["variables"]


def test_variables_named_like_options_reach_the_job(agent, cli, project):
    res = cli(
        "headless", "run", "--runner", agent.address, "w",
        "--run", "other", "--project", "beta", "--n=5", "--tag", "t1", "--res", "0.1",
        "--runner", "r9", "--detach", "go", "--d", "7", "--help", "me", "--no_cache", "drop",
        cwd=project,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout == ("run=other project=beta n=5 tag=t1 res=0.1\nrunner=r9 detach=go d=7 help=me no_cache=drop\n")
    # Each variable that shadows an option says how to give the option: before the name.
    for option in ("--project", "--tag", "--runner", "-d/--detach", "-h/--help"):
        assert f"lanpool's option {option} goes before the workflow name" in res.stderr, (option, res.stderr)
    assert "note: --run is" not in res.stderr  # no option is spelled --run: nothing to note
    # The run went to the runner given before the name (not "r9"), and `--tag t1` tagged nothing.
    status = json.loads(cli("headless", "status", "--json", check=True).stdout)
    assert status[0]["jobs"][0]["runner"] != "r9"
    untagged = cli("headless", "plan", "after-w", cwd=project)
    assert untagged.returncode == 2 and "--tag t1" in untagged.stderr, untagged.stderr


def test_defaults_reach_the_job_and_options_before_the_name_work(agent, cli, project, tmp_path):
    res = cli("headless", "run", "--runner", agent.address, "--project", str(project), "w", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == DEFAULTS


def test_options_after_the_name_still_work_where_no_variable_clashes(agent, cli, project):
    res = cli(
        "headless", "run", "plain", "--lr", "0.2", "--runner", agent.address, "--json", "--tag", "v2", cwd=project
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert out[0] == "lr=0.2" and json.loads(out[-1])["jobs"][0]["exit_code"] == 0, res.stdout
    assert "note:" not in res.stderr
    cli("headless", "plan", "after-plain", cwd=project, check=True)  # the run is tagged v2


def test_plan_reads_variables_the_same_way(cli, project, tmp_path):
    assert _plan_vars(cli, project, "--json", "w", "--project", "beta", "--n", "6", "--json")["project"] == "beta"
    got = _plan_vars(cli, tmp_path, "--project", str(project), "w", "--tag=x", "--res", "2", "--json")
    assert (got["tag"], got["res"], got["n"]) == ("x", "2.0", "1")  # as the job sees them
    assert _plan_vars(cli, project, "plain", "--lr", "-3", "--json")["lr"] == "-3.0"  # a value may start with one -


def test_project_dir_after_the_name_is_the_option_unless_a_variable(cli, project, make_project, tmp_path):
    other = make_project(
        'workflows:\n  - name: plain\n    commands:\n      - echo "lr=${{ lr }}"\n',
        name="other",
        files={".lanpool/variables.yaml": "variables:\n  plain:\n    lr: 9\n"},
    )
    # From a dir with no project, and from one whose `plain` has no variable `project`: the option.
    assert _plan_vars(cli, tmp_path, "plain", "--project", str(other), "--json") == {"lr": "9"}
    assert _plan_vars(cli, project, "plain", "--project", str(other), "--json") == {"lr": "9"}
    # The dir named after the name holds a `w` with a variable `project`: it could be either.
    _error(
        cli("headless", "plan", "w", "--project", str(project), cwd=tmp_path),
        "the project dir, or variable 'project' of 'w'",
        f"app headless plan --project {project} w --project VALUE",
    )


def test_spellings_that_could_mean_two_things_name_both(cli, project):
    # `--help` with no value, where `w` has a variable `help`: the variable, missing its value.
    _error(
        cli("headless", "run", "w", "--help", cwd=project),
        "--help needs a value",
        "variable 'help' of 'w'",
        "-h/--help goes before the name",
    )
    # `--no-cache` is lanpool's option exactly and variable `no_cache` but for - vs _.
    _error(
        cli("headless", "plan", "w", "--no-cache", cwd=project),
        "lanpool's option --no-cache or variable 'no_cache' of 'w'",
        "write --no_cache for the variable",
    )
    # `-d 5` where `w` has a variable `d`: the flag, not the variable.
    _error(cli("headless", "run", "w", "-d", "5", cwd=project), "-d is lanpool's option -d/--detach", "written --d 5")
    # A value that is itself an option.
    _error(cli("headless", "run", "plain", "--lr", "-d", cwd=project), "--lr=-d for the value", "-d/--detach")
    _error(cli("headless", "plan", "plain", "--lr", "--json", cwd=project), "--lr needs a value", "--lr=VALUE")
    _error(cli("headless", "plan", "plain", "--lr", cwd=project), "--lr needs a value")


def test_a_variable_given_twice_is_refused(cli, project):
    _error(cli("headless", "plan", "plain", "--lr", "1", "--lr=2", cwd=project), "--lr given twice ('1', then '2')")
    _error(cli("headless", "plan", "w", "--no_cache", "a", "--no_cache", "b", cwd=project), "given twice")


def test_abbreviations_are_refused_everywhere(cli, project, agent):
    # Before the name only lanpool's options, whole.
    _error(cli("headless", "run", "--run", agent.address, "plain", cwd=project), "--run is not an option of `run`")
    _error(cli("headless", "run", "--res", "x", "plain", cwd=project), "--res is not an option of `run`")
    _error(cli("headless", "plan", "--no-c", "plain", cwd=project), "--no-c is not an option of `plan`")
    _error(cli("headless", "run", "--lr", "3", "plain", cwd=project), "variables go after its name")
    # After it, a prefix of an option is an unknown variable, never the option.
    for word in ("--run", "--res", "--det", "--proj", "--n", "--no-c", "--jso"):
        _error(cli("headless", "plan", "plain", word, "1", cwd=project), f"unknown variable {word} for 'plain'", "--lr")
    # No prefix of a variable either.
    _error(cli("headless", "plan", "w", "--proj", "x", cwd=project), "unknown variable --proj for 'w'")
    assert not json.loads(cli("headless", "status", "--json", check=True).stdout)  # nothing ran


def test_workflow_help_lists_variables_named_like_options(cli, project):
    res = cli("headless", "run", "--help", "w", cwd=project, check=True)
    for var in ("run", "project", "n", "tag", "res", "runner", "detach", "d", "help", "no_cache"):
        assert f"  --{var} " in res.stdout, (var, res.stdout)
    assert "before the workflow name" in res.stdout
    plain = cli("headless", "plan", "plain", "--help", cwd=project, check=True)  # no variable `help`: the option
    assert "--lr" in plain.stdout and "0.1" in plain.stdout


def test_workflow_help_says_whose_variables_it_lists(cli, make_project):
    """`run train --help`: train's own variables (globals included), then its dependencies', each
    with the workflow it belongs to; another workflow's are never shown as train's."""
    project = make_project(
        "workflows:\n"
        "  - name: prepare\n    commands: ['echo ${{ size }}']\n"
        "  - name: train\n    depends-on: [prepare]\n    commands: ['echo ${{ lr }} ${{ seed }}']\n"
        "  - name: other\n    commands: ['echo ${{ unrelated }}']\n",
        files={
            ".lanpool/variables.yaml": "variables:\n  global:\n    seed: 7\n  prepare:\n    size: 100\n"
            "  train:\n    lr: 0.1\n  other:\n    unrelated: x\n"
        },
    )
    out = cli("headless", "run", "train", "--help", cwd=project, check=True).stdout
    own, _, deps = out.partition("variables of the workflows train depends on")
    assert "variables of train (defaults from" in own
    assert "--lr " in own and "--seed " in own and "--size" not in own
    assert re.search(r"--size +100 +\(prepare\)", deps), deps
    assert "unrelated" not in out
    plain = cli("headless", "run", "prepare", "--help", cwd=project, check=True).stdout
    assert "variables of prepare" in plain and "depends on" not in plain and "--lr" not in plain


HYPHENS = """
workflows:
  - name: h
    commands:
      - echo "batch-size=${{ batch-size }} args=$variables_as_args"
"""


def test_a_hyphenated_variable_reaches_the_job(agent, cli, make_project):
    project = make_project(HYPHENS, files={".lanpool/variables.yaml": "variables:\n  h:\n    batch-size: 64\n"})
    try:
        load_workflows(project)
    except WorkflowError as exc:  # hyphens arrive with the dialects (app/workflows)
        pytest.skip(f"this tree's loader refuses hyphenated variable names: {exc}")
    res = cli("headless", "run", "--runner", agent.address, "h", "--batch-size", "32", cwd=project)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("batch-size=32 args=") and "--batch-size 32" in res.stdout, res.stdout
    _error(cli("headless", "plan", "h", "--batch", "32", cwd=project), "unknown variable --batch for 'h'")
    assert _plan_vars(cli, project, "h", "--batch_size=16", "--json") == {"batch-size": "16"}
