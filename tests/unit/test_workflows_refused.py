"""One refused workflow never blocks the rest (app/workflows/loader.py), and every layout dstack
used: `.lanpool/` or `.dstack/`, `workflows.yaml` and `workflows/*.yaml`. Loaded in-process, then
listed, `--help`ed, planned and run through the real CLI on a real agent.
The in-process part (unit); the rest: tests/integration/test_workflows_refused.py."""

import textwrap
from pathlib import Path

import pytest

from lanpool.app.workflows import WorkflowError, load_workflows
from tests.harness import write_project

MIXED = """
workflows:
  - name: prepare
    help: makes the data
    commands: [mkdir -p data, echo 42 > data/n.txt]
    artifacts: [data]
  - name: train
    help: reads the data
    depends-on: [prepare]
    commands: ['echo "n=$(cat data/n.txt)"']
  - name: hosted
    artifacts: [/opt/conda/envs/x]
    commands: [echo never]
  - name: after-hosted
    depends-on: [hosted]
    commands: [echo never]
  - name: coded
    provider: code
  - name: orphan
    depends-on: [nosuch]
    commands: [echo never]
  - name: report
    commands: [echo report]
"""


def _write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_a_refused_workflow_takes_only_itself_and_its_dependents(tmp_path):
    root = write_project(tmp_path / "p", MIXED)
    path = root / ".lanpool" / "workflows.yaml"
    project = load_workflows(root)
    assert list(project.workflows) == ["prepare", "train", "report"]
    assert sorted(project.refused) == ["after-hosted", "coded", "hosted", "orphan"]
    for name, line in (("hosted", 12), ("coded", 18)):
        with pytest.raises(WorkflowError) as err:
            project.get(name)
        assert str(err.value).startswith(f"{path}:{line}: ") and "\n" not in str(err.value), str(err.value)
    hosted = project.refused["hosted"].message
    assert "artifact '/opt/conda/envs/x' is outside the workspace: only a container job's absolute paths" in hosted
    assert "(give the workflow an `image:`), or write it under the workspace (e.g. `artifacts: [x]`)" in hosted
    after = project.refused["after-hosted"].message
    assert f"{path}:15: " in after and "depends on workflow 'hosted', which is refused" in after, after
    assert "unknown workflow 'nosuch'" in project.refused["orphan"].message
    assert project.get("train").depends_on[0].workflow == "prepare"


def test_a_dependency_cycle_refuses_its_members_only(tmp_path):
    root = write_project(
        tmp_path / "p",
        """
        workflows:
          - {name: a, depends-on: [b], commands: [x]}
          - {name: b, depends-on: [a], commands: [x]}
          - {name: c, depends-on: [a], commands: [x]}
          - {name: d, commands: [x]}
        """,
    )
    project = load_workflows(root)
    assert list(project.workflows) == ["d"]
    assert "dependency cycle: a -> b -> a" in project.refused["a"].message
    assert "which is refused" in project.refused["c"].message


def test_a_file_that_is_not_yaml_is_an_error_as_a_whole(tmp_path):
    root = write_project(tmp_path / "p", "workflows:\n  - name: a\n    commands: [x\n")
    with pytest.raises(WorkflowError, match="malformed YAML"):
        load_workflows(root)


def test_dstacks_workflows_folder_is_read_and_merged(tmp_path):
    root = tmp_path / "p"
    _write(root, ".dstack/workflows/data.yaml", "workflows:\n  - name: prepare\n    commands: [echo p]\n")
    _write(
        root,
        ".dstack/workflows/train.yml",
        "workflows:\n  - name: train\n    depends-on: [prepare]\n    commands: ['echo ${{ lr }}']\n",
    )
    _write(root, ".dstack/variables.yaml", "variables:\n  train:\n    lr: 0.1\n")
    _write(root, ".dstack/workflows/notes.txt", "not a workflow file")
    project = load_workflows(root)
    assert list(project.workflows) == ["prepare", "train"] and not project.refused
    assert project.variables_of("train") == {"lr": 0.1} and project.variables_path == ".dstack/variables.yaml"
    assert [p.name for p in project.files] == ["data.yaml", "train.yml"]


def test_one_name_in_two_files_is_refused_naming_both_places(tmp_path):
    root = tmp_path / "p"
    first = _write(root, ".lanpool/workflows.yaml", "workflows:\n  - name: train\n    commands: [echo a]\n")
    second = _write(
        root,
        ".lanpool/workflows/more.yaml",
        "workflows:\n  - {name: eval, commands: [x]}\n  - name: train\n    commands: [echo b]\n",
    )
    project = load_workflows(root)
    assert list(project.workflows) == ["eval"]
    message = project.refused["train"].message
    assert message.startswith(f"{second}:3: ") and f"(first at {first}:2)" in message, message


def test_a_broken_file_in_the_folder_leaves_the_other_files(tmp_path):
    root = tmp_path / "p"
    _write(root, ".lanpool/workflows/good.yaml", "workflows:\n  - {name: a, commands: [x]}\n")
    bad = _write(root, ".lanpool/workflows/bad.yaml", "jobs: []\n")
    project = load_workflows(root)
    assert list(project.workflows) == ["a"]
    assert project.file_errors == [f"{bad}:1: expected a top-level 'workflows:' list"]
    with pytest.raises(WorkflowError, match="1 file\\(s\\) could not be read"):
        project.get("b")


def test_the_tui_shows_runs_whatever_the_state_of_the_files(tmp_path, controller_home):
    import asyncio

    from lanpool.app.store import Store
    from lanpool.app.tui.app import LanpoolApp
    from tests.integration.test_tui import rows
    from tests.unit.test_tui import recording, wait_until

    root = write_project(tmp_path / "p", "workflows:\n  - name: a\n    commands: [x\n")  # not YAML
    controller_home.mkdir(parents=True, exist_ok=True)
    store = Store(controller_home / "lanpool.db")
    store.create_run("calm-owl-1", "a", str(root))
    store.create_job("j1", "calm-owl-1", "a", {"name": "r", "host": "127.0.0.1", "port": 1}, {})
    store.close()

    async def look() -> None:
        app = recording(LanpoolApp(project_dir=root, discover=False))
        async with app.run_test(size=(160, 45)) as pilot:
            await wait_until(pilot, lambda: "j1" in rows(app, "runs-table"), "the stored run")
            app.load_project()
            assert "malformed YAML" in app.project_error
            await pilot.press("r")  # the run dialog: refused, with the file's error, the runs still there
            await wait_until(pilot, lambda: any("malformed YAML" in m for m, _ in app.shown), "the error said")
            assert "j1" in rows(app, "runs-table")

    asyncio.run(look())


def test_absolute_artifacts_are_refused_only_where_the_job_cannot_run_in_a_container(tmp_path):
    root = write_project(
        tmp_path / "p",
        """
        workflows:
          - {name: conda, image: "continuumio/miniconda3", artifacts: [/opt/conda/envs/x], commands: [x]}
          - {name: hub, provider: python, script: t.py, artifacts: [/root/.cache/huggingface/hub]}
          - {name: proc, image: "i", executor: process, artifacts: [/opt/x], commands: [x]}
          - {name: inside, image: "i", artifacts: [/workspace/out], commands: [x]}
          - {name: climbs, image: "i", artifacts: [/opt/../etc], commands: [x]}
          - {name: setup-dep, depends-on: [conda], commands: [x]}
        """,
    )
    project = load_workflows(root)
    assert list(project.workflows) == ["conda", "hub", "setup-dep"]
    assert "only a container job's absolute paths are copied out (drop `executor: process`)" in (
        project.refused["proc"].message
    )
    assert "artifact path '/workspace/out' is in the workspace: write it relative ('out')" in (
        project.refused["inside"].message
    )
    assert "must be a normalised path below /" in project.refused["climbs"].message


def test_an_overlong_or_unprintable_name_refuses_only_its_workflow(tmp_path):
    long = "x" * 300
    root = write_project(
        tmp_path / "p",
        f"workflows:\n  - name: ok\n    commands: [echo ok]\n  - name: {long}\n    commands: [echo long]\n"
        '  - name: "tab\\there"\n    commands: [echo tab]\n  - name: ' + "y" * 100 + "\n    commands: [echo y]\n",
    )
    project = load_workflows(root)
    assert sorted(project.workflows) == ["ok", "y" * 100]  # 100 characters is the most a name may have
    path = root / ".lanpool" / "workflows.yaml"
    message = project.refused[long].message
    assert message.startswith(f"{path}:4: workflow name 'xxxx") and "is 300 characters long" in message
    assert "at most 100 printable characters" in message and long not in message and "\n" not in message
    assert "holds a control character" in project.refused["tab\there"].message
