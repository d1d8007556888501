"""Workflow files: finding the project, parsing, and errors that point at a line."""

from pathlib import Path

import pytest

from lanpool.app.errors import ExitCode, UsageError
from lanpool.app.workflows import Project, Workflow, WorkflowError, find_project, load_workflows
from lanpool.app.workflows.model import ArtifactSpec
from tests.workflow_files import assert_at as _assert_at
from tests.workflow_files import load_error as _error
from tests.workflow_files import write_workflows as _write

VALID = """\
workflows:
  - name: train
    help: train the model
    commands:
      - pip install -r requirements.txt
      - python train.py --lr $LR
    env:
      LR: 0.001
      EPOCHS: 10
      DEBUG: true
      QUIET: False
      EMPTY:
      NAME: resnet
    artifacts:
      - checkpoints
      - logs/metrics.csv
    working_dir: src

  - name: eval
    commands: [python eval.py]
    environment:
      - MODE=fast
      - EXPR=a=b
      - BLANK=
"""


def test_valid_file(tmp_path: Path):
    path = _write(tmp_path, VALID)
    project = load_workflows(tmp_path)
    assert isinstance(project, Project)
    assert project.root == tmp_path and project.workflows_file == path
    assert list(project.workflows) == ["train", "eval"]
    train = project.get("train")
    assert train == Workflow(
        name="train",
        help="train the model",
        commands=["pip install -r requirements.txt", "python train.py --lr $LR"],
        env={"LR": "0.001", "EPOCHS": "10", "DEBUG": "true", "QUIET": "false", "EMPTY": "", "NAME": "resnet"},
        artifacts=[ArtifactSpec("checkpoints"), ArtifactSpec("logs/metrics.csv")],
        working_dir="src",
        file=path,
        line=2,
    )
    assert all(isinstance(v, str) for v in train.env.values())


def test_env_as_a_list_of_key_value_strings(tmp_path: Path):
    _write(tmp_path, VALID)
    ev = load_workflows(tmp_path).get("eval")
    assert ev.env == {"MODE": "fast", "EXPR": "a=b", "BLANK": ""}  # split at the first '='
    assert ev.commands == ["python eval.py"]
    assert ev.artifacts == [] and ev.working_dir == ""
    assert ev.line == 19


def test_numeric_and_bool_commands_are_stringified(tmp_path: Path):
    _write(
        tmp_path,
        """\
        workflows:
          - name: n
            commands:
              - 42
              - true
              - false
        """,
    )
    # `true` must stay the shell builtin, not become the unknown command "True"
    assert load_workflows(tmp_path).get("n").commands == ["42", "true", "false"]


def test_dstack_layout_is_read_without_lanpool(tmp_path: Path):
    path = _write(tmp_path, "workflows:\n  - name: old\n    commands: [echo dstack]\n", sub=".dstack")
    project = load_workflows(tmp_path)
    assert project.workflows_file == path
    assert list(project.workflows) == ["old"]
    assert find_project(tmp_path) == tmp_path.resolve()


def test_lanpool_wins_over_dstack(tmp_path: Path):
    _write(tmp_path, "workflows:\n  - name: old\n    commands: [echo dstack]\n", sub=".dstack")
    path = _write(tmp_path, "workflows:\n  - name: new\n    commands: [echo lanpool]\n")
    project = load_workflows(tmp_path)
    assert project.workflows_file == path
    assert list(project.workflows) == ["new"]


def test_no_workflow_file(tmp_path: Path):
    err = _error(tmp_path)
    assert "workflows.yaml" in str(err)
    assert isinstance(err, UsageError) and err.exit_code == ExitCode.USAGE


@pytest.mark.parametrize(
    ("bad_line", "problem"),
    [
        ("    commands: echo: hi", "mapping values are not allowed here"),
        ("    commands: *nowhere", "undefined alias"),
        ("    commands: [echo, 'a'b]", "expected ',' or ']'"),
    ],
)
def test_malformed_yaml_points_at_the_line(tmp_path: Path, bad_line, problem):
    path = _write(tmp_path, "workflows:\n  - name: train\n    help: x\n" + bad_line + "\n    env: {}\n")
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert "malformed YAML" in str(err) and problem in str(err)


def test_unterminated_flow_mapping_is_reported_where_the_parser_gives_up(tmp_path: Path):
    path = _write(tmp_path, "workflows:\n  - name: train\n    commands: [x]\n    env: {A: 1\n")
    err = _error(tmp_path)
    _assert_at(err, path, 5)  # the end of the stream, after the last line
    assert "malformed YAML" in str(err)


def test_malformed_yaml_bad_indentation_line(tmp_path: Path):
    path = _write(
        tmp_path,
        """\
        workflows:
          - name: train
            commands: [echo]
           bad: indent
        """,
    )
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert "malformed YAML" in str(err)


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [("comands", "commands"), ("artifact", "artifacts"), ("workdir", "working_dir"), ("enviroment", "environment")],
)
def test_unknown_key_suggests_the_close_match(tmp_path: Path, typo, suggestion):
    path = _write(
        tmp_path,
        f"""\
        workflows:
          - name: ok
            commands: [echo]
          - name: train
            help: the second one
            {typo}:
              - echo hi
        """,
    )
    err = _error(tmp_path)
    _assert_at(err, path, 6)
    assert f"unknown key {typo!r}" in str(err)
    assert f"did you mean {suggestion!r}" in str(err)


def test_unknown_key_without_a_close_match_lists_the_known_keys(tmp_path: Path):
    path = _write(tmp_path, "workflows:\n  - name: a\n    commands: [x]\n    zzzzzz: 1\n")
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert "known keys" in str(err) and "commands" in str(err)


def test_missing_commands(tmp_path: Path):
    path = _write(
        tmp_path,
        """\
        workflows:
          - name: a
            commands: [echo a]

          - name: b
            help: no commands here
        """,
    )
    err = _error(tmp_path)
    _assert_at(err, path, 5)
    assert "'b'" in str(err) and "commands" in str(err)


@pytest.mark.parametrize("commands", ["[]", "echo not a list", "[[nested]]"])
def test_bad_commands_point_at_the_key(tmp_path: Path, commands):
    path = _write(tmp_path, f"workflows:\n  - name: a\n    help: x\n    commands: {commands}\n")
    _assert_at(_error(tmp_path), path, 4)


def test_missing_name(tmp_path: Path):
    path = _write(tmp_path, "workflows:\n  - commands: [echo]\n")
    err = _error(tmp_path)
    _assert_at(err, path, 2)
    assert "name" in str(err)


def test_duplicate_name(tmp_path: Path):
    path = _write(
        tmp_path,
        """\
        workflows:
          - name: train
            commands: [echo 1]
          - name: eval
            commands: [echo 2]
          - name: train
            commands: [echo 3]
        """,
    )
    err = _error(tmp_path)
    _assert_at(err, path, 6)
    assert "duplicate workflow name 'train'" in str(err) and "line 2" in str(err)


@pytest.mark.parametrize("artifact", ["../x", "/etc", "out/../../x", "''"])
def test_artifact_outside_the_workspace(tmp_path: Path, artifact):
    path = _write(
        tmp_path,
        f"""\
        workflows:
          - name: train
            commands: [echo]
            help: x
            artifacts:
              - ok/path
              - {artifact}
        """,
    )
    err = _error(tmp_path)
    _assert_at(err, path, 5)
    # An absolute one is refused for where it runs (a process): only a container's are copied out.
    assert "artifact path" in str(err) or "only a container job's absolute paths are copied out" in str(err)


def test_artifacts_must_be_a_list_of_strings(tmp_path: Path):
    path = _write(tmp_path, "workflows:\n  - name: a\n    commands: [x]\n    artifacts: out\n")
    _assert_at(_error(tmp_path), path, 4)


@pytest.mark.parametrize("working_dir", ["/abs/path", "../up"])
def test_bad_working_dir(tmp_path: Path, working_dir):
    path = _write(tmp_path, f"workflows:\n  - name: a\n    commands: [x]\n\n    working_dir: {working_dir}\n")
    err = _error(tmp_path)
    _assert_at(err, path, 5)
    assert "working_dir" in str(err)


@pytest.mark.parametrize(
    "env",
    [
        "\n      1BAD: x",
        "\n      BAD-NAME: x",
        "\n      'A B': x",
        "\n      - 'NO EQUALS'",
        "\n      - 'BAD NAME=1'",
        "\n      A: [1, 2]",
        " just a string",
    ],
    ids=["digit", "dash", "space", "bare-not-a-name", "list-bad-name", "list-value", "scalar"],
)
def test_bad_env(tmp_path: Path, env):
    path = _write(tmp_path, f"workflows:\n  - name: a\n    commands: [x]\n    env:{env}\n")
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert "'a'" in str(err)


@pytest.mark.parametrize(
    "text",
    ["", "workflows: train\n", "- name: a\n  commands: [x]\n", "other: 1\n"],
    ids=["empty", "not-a-list", "top-level-list", "no-workflows-key"],
)
def test_top_level_must_be_a_workflows_list(tmp_path: Path, text):
    path = _write(tmp_path, text)
    err = _error(tmp_path)
    assert str(err).startswith(f"{path}:1: ")
    assert "workflows" in str(err)


def test_workflow_entry_must_be_a_mapping(tmp_path: Path):
    path = _write(tmp_path, "workflows:\n  - name: a\n    commands: [x]\n  - just a string\n")
    err = _error(tmp_path)
    assert str(err).startswith(f"{path}:")
    assert "mapping" in str(err)


def test_get_unknown_lists_the_known_names(tmp_path: Path):
    path = _write(tmp_path, VALID)
    project = load_workflows(tmp_path)
    with pytest.raises(WorkflowError) as exc:
        project.get("trian")
    assert "'trian'" in str(exc.value)
    assert "eval, train" in str(exc.value)
    assert str(exc.value).startswith(f"{path}: ")


def test_find_project_walks_up_from_a_subdir(tmp_path: Path):
    root = tmp_path / "proj"
    _write(root, VALID)
    deep = root / "src" / "pkg" / "sub"
    deep.mkdir(parents=True)
    assert find_project(deep) == root.resolve()
    assert find_project(root) == root.resolve()


def test_find_project_takes_the_nearest(tmp_path: Path):
    outer = tmp_path / "outer"
    inner = outer / "inner"
    _write(outer, VALID)
    _write(inner, VALID, sub=".dstack")
    (inner / "src").mkdir()
    assert find_project(inner / "src") == inner.resolve()
    assert find_project(outer) == outer.resolve()


def test_find_project_ignores_a_dir_without_workflows_yaml(tmp_path: Path):
    root = tmp_path / "proj"
    (root / ".lanpool").mkdir(parents=True)  # e.g. only variables.yaml
    (root / ".lanpool" / "variables.yaml").write_text("x: 1\n")
    sub = root / "sub"
    sub.mkdir()
    found = find_project(sub)
    assert found is None or not str(found).startswith(str(tmp_path.resolve()))


# -- resume-from -------------------------------------------------------------------------


def test_resume_from_takes_a_run_a_job_id_a_tag_or_a_variable(tmp_path: Path):
    from lanpool.app.workflows.resolve import resolve

    _write(
        tmp_path,
        """\
        workflows:
          - name: a
            resume-from: pink-fly-1
            commands: [echo a]
          - name: b
            resume-from: 123456789012
            commands: [echo b]
          - name: c
            resume-from: train:v1
            commands: [echo c]
          - name: d
            resume-from: ${{ from }}
            commands: [echo d]
          - name: e
            commands: [echo e]
        """,
    )
    (tmp_path / ".lanpool" / "variables.yaml").write_text("variables:\n  d:\n    from: ''\n")
    project = load_workflows(tmp_path)
    wfs = project.workflows
    # A job id of digits only stays as written, not the YAML integer.
    assert [wfs[n].resume_from for n in "abcde"] == ["pink-fly-1", "123456789012", "train:v1", "${{ from }}", ""]
    builtins = {"run_name": "r", "job_id": "j"}
    assert resolve(project, "d", {}, builtins).resume_from == ""  # empty: no resume
    assert resolve(project, "d", {"from": "old-run-3"}, builtins).resume_from == "old-run-3"
    assert resolve(project, "c", {}, builtins).resume_from == "train:v1"
    with pytest.raises(WorkflowError) as exc:
        resolve(project, "d", {"from": "two words"}, builtins)
    assert "'resume-from' must be one run name" in str(exc.value)


@pytest.mark.parametrize(
    "value, message",
    [
        ("[a, b]", "'resume-from' must be a run name, a job id or WORKFLOW:TAG"),
        ("{run: x}", "'resume-from' must be a run name, a job id or WORKFLOW:TAG"),
        ("true", "'resume-from' must be a run name, a job id or WORKFLOW:TAG"),
        ("''", "'resume-from' is empty"),
        ("a b", "'resume-from' must be one run name"),
        ("${{ nowhere }}", "uses variable 'nowhere', which is never defined"),
    ],
)
def test_bad_resume_from_points_at_its_line(tmp_path: Path, value, message):
    path = _write(
        tmp_path,
        f"""\
        workflows:
          - name: train
            commands: [echo hi]
            resume-from: {value}
        """,
    )
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert message in str(err)
    assert err.exit_code == ExitCode.USAGE


def test_a_misspelt_resume_from_is_suggested(tmp_path: Path):
    path = _write(
        tmp_path,
        """\
        workflows:
          - name: train
            commands: [echo hi]
            resume_from: x
        """,
    )
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert "did you mean 'resume-from'?" in str(err)


def test_workflow_records_compare_hash_and_print_as_dataclass_made_them():
    """app/workflows/model.py's records take eq, hash and repr from protocol.message_base.Record
    (start-up time): the same as `dataclass` generates, field(compare=False) and
    field(repr=False) included."""
    import dataclasses

    from lanpool.app.workflows.model import ArtifactSpec, Dependency, Workflow
    from lanpool.protocol.message_base import Record

    @dataclasses.dataclass(frozen=True)
    class Plain:
        a: int
        b: dict = dataclasses.field(default_factory=dict, compare=False)
        c: str = dataclasses.field(default="x", repr=False)

    @dataclasses.dataclass(frozen=True, eq=False, repr=False)
    class Ours(Record):
        a: int
        b: dict = dataclasses.field(default_factory=dict, compare=False)
        c: str = dataclasses.field(default="x", repr=False)

    ours = repr(Ours(1, {"k": 1}))
    assert ours == repr(Plain(1, {"k": 1})).replace("Plain", "Ours") and ours.endswith(".Ours(a=1, b={'k': 1})")
    assert Ours(1, {"k": 1}) == Ours(1, {}) and hash(Ours(1, {"k": 1})) == hash(Plain(1, {}))
    assert Ours(1) != Ours(2) and Ours(1, c="y") != Ours(1) and Ours(1) != Plain(1)
    one = Workflow("w", ["echo"], key_lines={"commands": 3})
    assert one == Workflow("w", ["echo"]) and one != Workflow("w", ["echo", "more"])
    assert repr(Dependency("a", "t")) == "Dependency(workflow='a', tag='t')" and str(Dependency("a", "t")) == "a:t"
    assert {Dependency("a"), Dependency("a"), ArtifactSpec("p")} == {Dependency("a"), ArtifactSpec("p")}
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.name = "other"  # type: ignore[misc]
