"""A sweep's points: `--sweep VAR=V1,V2` grids, a workflow's `sweep:` (grid or random, checked key
by key), and their bounds. Sent to runners: tests/integration/test_sweep.py."""

from pathlib import Path

import pytest

from lanpool.app.errors import UsageError
from lanpool.app.runs.sweep import grid_of, parse_grid
from lanpool.app.workflows import WorkflowError, load_workflows
from tests.harness import write_project

KNOWN = {"lr": 0.1, "batch": 16, "seed": 1, "dropout": 0.0, "layers": 2}


def _project(tmp_path: Path, sweep: str):
    text = "workflows:\n  - name: train\n    commands: [echo]\n    sweep:\n" + "".join(
        f"      {line}\n" for line in sweep.strip().splitlines()
    )
    return load_workflows(write_project(tmp_path / "p", text))


def test_the_command_lines_grid_is_every_combination_in_the_order_given():
    grid = parse_grid(["lr=1e-4, 3e-4", "batch=32,64,32"], "train", KNOWN, {"layers": "4"})
    assert grid.axes == {"lr": ["1e-4", "3e-4"], "batch": ["32", "64"]}  # a value given twice is one point
    assert grid.points == [
        {"lr": "1e-4", "batch": "32"},
        {"lr": "1e-4", "batch": "64"},
        {"lr": "3e-4", "batch": "32"},
        {"lr": "3e-4", "batch": "64"},
    ]


def test_a_workflows_grid_and_the_command_line_replacing_it(tmp_path):
    project = _project(tmp_path, "variables:\n  lr: [1e-4, 0.001]\n  seed: {choice: [1, 2]}")
    grid = grid_of(project, "train", [], KNOWN, {})
    assert grid.points == [
        {"lr": "1e-4", "seed": "1"},  # as written
        {"lr": "1e-4", "seed": "2"},
        {"lr": "0.001", "seed": "1"},
        {"lr": "0.001", "seed": "2"},
    ]  # `seed` is the workflow's own variable here: the sweep's options sit beside `variables`
    assert grid_of(project, "train", ["batch=8"], KNOWN, {}).points == [{"batch": "8"}]
    with pytest.raises(UsageError, match="--lr: train's sweep sets lr; sweep other values with --sweep lr=V1,V2"):
        grid_of(project, "train", [], KNOWN, {"lr": "0.5"})


RANDOM = """
method: random
samples: 50
seed: 7
variables:
  lr: {log_uniform: [1.0e-5, 1.0e-2]}
  dropout: {uniform: [0.0, 0.3]}
  layers: {int_uniform: [2, 6]}
  batch: [32, 64]
"""


def test_the_docs_sweep_is_read_and_the_schema_accepts_it(tmp_path):
    """docs/workflows.md's example (an entry's `sweep:`), as lanpool and an editor read it."""
    import json
    import re
    import textwrap

    import jsonschema
    import yaml

    docs = (Path(__file__).resolve().parents[2] / "docs").resolve()
    [example] = re.findall(r"```yaml\n(sweep:\n.*?)```", (docs / "workflows.md").read_text(), re.S)
    project = _project(tmp_path, textwrap.dedent(example.removeprefix("sweep:\n")))
    spec = project.get("train").sweep
    assert spec is not None and spec.method == "random" and spec.samples == 8 and spec.seed == 7
    schema = json.loads((docs / "workflows.schema.json").read_text())
    workflow = {"name": "train", "commands": ["echo"], "sweep": yaml.safe_load(example)["sweep"]}
    jsonschema.validate({"workflows": [workflow]}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"workflows": [{**workflow, "sweep": {"variables": {"lr": {"normal": [0, 1]}}}}]}, schema)


def test_a_random_sweep_with_a_seed_draws_the_same_points_within_its_bounds(tmp_path):
    project = _project(tmp_path, RANDOM)
    first = grid_of(project, "train", [], KNOWN, {})
    again = grid_of(load_workflows(project.root), "train", [], KNOWN, {})
    assert first.points == again.points and len(first.points) == 50 and first.seed == 7
    for point in first.points:
        assert 1e-5 <= float(point["lr"]) <= 1e-2
        assert 0.0 <= float(point["dropout"]) <= 0.3
        assert point["layers"] in {"2", "3", "4", "5", "6"} and point["batch"] in {"32", "64"}
    assert {p["layers"] for p in first.points} == {"2", "3", "4", "5", "6"}  # both ends are drawn
    assert min(float(p["lr"]) for p in first.points) < 1e-4 < max(float(p["lr"]) for p in first.points)  # by its log
    unseeded = _project(tmp_path / "u", RANDOM.replace("seed: 7\n", ""))
    drawn = grid_of(unseeded, "train", [], KNOWN, {})
    assert drawn.seed is not None  # said by the run, so the points can be drawn again


@pytest.mark.parametrize(
    ("sweep", "says"),
    [
        (
            "lr: [1, 2]",
            "'sweep': takes method, samples, seed, variables, stop_worst, not lr (variables go under 'variables')",
        ),
        ("variables: {}", "'sweep': needs 'variables'"),
        ("method: bayes\nvariables: {lr: [1]}", "'method' is grid or random, not 'bayes'"),
        ("variables: {lr: {uniform: [0, 1]}}", "a grid takes lists of values; uniform is for 'method: random'"),
        ("variables: {lr: [1, 2]}\nseed: 3", "'seed' is for 'method: random'"),
        ("method: random\nvariables: {lr: [1, 2]}", "needs 'samples', a whole number from 1 to 1000"),
        ("method: random\nsamples: 1001\nvariables: {lr: [1]}", "needs 'samples', a whole number from 1 to 1000"),
        ("method: random\nsamples: 2\nseed: x\nvariables: {lr: [1]}", "'seed' must be a whole number, not 'x'"),
        ("method: random\nsamples: 2\nvariables: {lr: {uniform: [1]}}", "uniform takes [low, high], two numbers"),
        ("method: random\nsamples: 2\nvariables: {lr: {uniform: [2, 1]}}", "low must be below high"),
        ("method: random\nsamples: 2\nvariables: {lr: {log_uniform: [0, 1]}}", "log_uniform needs low > 0"),
        ("method: random\nsamples: 2\nvariables: {lr: {int_uniform: [1, 2.5]}}", "int_uniform takes two whole numbers"),
        ("method: random\nsamples: 2\nvariables: {lr: {normal: [0, 1]}}", "give a list of values, or one of choice"),
        ("variables: {lr: [[1, 2]]}", "choice takes a list of values"),
        ("variables: {lr: [1]}\nstop_worst: [val_loss]", "'stop_worst' must be a mapping like {metric: val_loss"),
        ("variables: {lr: [1]}\nstop_worst: {at: [1]}", "'stop_worst' needs 'metric'"),
        ("variables: {lr: [1]}\nstop_worst: {metric: l, at: [0]}", "'stop_worst.at' lists the steps to decide at"),
        ("variables: {lr: [1]}\nstop_worst: {metric: l, at: [1], keep: 1}", "'stop_worst.keep' is the part kept"),
        ("variables: {lr: [1]}\nstop_worst: {metric: l, at: 5, mode: best}", "'stop_worst.mode' is min or max"),
        ("variables: {lr: [1]}\nstop_worst: {metric: l, at: 5, every: 2}", "'stop_worst' takes metric, at, keep, mode"),
        (
            "variables: {a: " + str(list(range(40))) + ", b: " + str(list(range(30))) + "}",
            "1200 points; one run takes at most 1000",
        ),
    ],
)
def test_a_bad_sweep_refuses_that_workflow_alone_naming_the_key(tmp_path, sweep, says):
    project = _project(tmp_path, sweep)
    assert "train" not in project.workflows
    error = project.refused["train"]
    assert isinstance(error, WorkflowError) and says in error.message and error.line == 4, error.message


def test_a_sweep_of_a_variable_the_workflow_lacks_is_one_line(tmp_path):
    project = _project(tmp_path, "variables: {nosuch: [1, 2]}")
    with pytest.raises(UsageError, match=r"train's sweep: no variable 'nosuch'; its variables: batch, dropout"):
        grid_of(project, "train", [], KNOWN, {})
    plain = load_workflows(write_project(tmp_path / "plain", "workflows:\n  - name: train\n    commands: [echo]\n"))
    with pytest.raises(UsageError, match="train has no 'sweep:': give --sweep VAR=V1,V2"):
        grid_of(plain, "train", [], KNOWN, {})


def test_stop_worst_is_read_and_kept_when_the_command_line_gives_the_points(tmp_path):
    project = _project(tmp_path, "variables: {lr: [1, 2]}\nstop_worst: {metric: val_loss, at: [300, 100, 100]}")
    spec = project.get("train").sweep
    assert spec is not None and spec.stop_worst is not None
    assert (spec.stop_worst.at, spec.stop_worst.keep, spec.stop_worst.mode) == ([100, 300], 0.5, "")
    assert grid_of(project, "train", ["lr=5,6"], KNOWN, {}).stop_worst == spec.stop_worst
