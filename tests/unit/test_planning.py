"""Planning: the DAG order, cache keys, and when a job runs or reuses a finished twin.

A real Store and ControllerHome on tmp_path; finished jobs are recorded the way
the controller records them (no agent needed to plan)."""

import itertools
import secrets
import shutil
import time
from pathlib import Path

import pytest

from lanpool.app.errors import UsageError
from lanpool.app.home import ControllerHome
from lanpool.app.runs.planning import Plan, PlannedJob, dag_order, known_variables, make_plan
from lanpool.app.store import JobRow, Store
from lanpool.app.workflows import WorkflowError, load_workflows
from lanpool.protocol import JobState

RUNNER = {"name": "test-runner", "host": "127.0.0.1", "port": 1}

WORKFLOWS = """\
workflows:
  - name: prepare
    image: python:3.11-slim
    commands:
      - python prepare.py --size $size
    artifacts: [data]
    depends-on:
      repo:
        include: [prepare.py, "data/*.txt"]

  - name: encode
    image: python:3.11-slim
    commands:
      - python encode.py --vocab ${{ vocab }}
    artifacts: [encoded]
    depends-on:
      workflows: [prepare]
      repo:
        include: [encode.py]

  - name: train
    image: python:3.11-slim
    commands:
      - python train.py --lr $lr --size $size
    artifacts: [model]
    depends-on: [encode]

  - name: finetune
    image: python:3.11-slim
    commands: [python finetune.py]
    depends-on: ["prepare:v1"]
"""

VARIABLES = """\
variables:
  global:
    size: 100
  encode:
    vocab: 5000
  train:
    lr: 0.01
"""

FILES = {
    "prepare.py": "print('prepare')\n",
    "encode.py": "print('encode')\n",
    "train.py": "print('train')\n",
    "finetune.py": "print('finetune')\n",
    "data/x.txt": "one\n",
    "README.md": "# demo\n",
}

DIAMOND = """\
workflows:
  - name: d
    commands: [echo d]
    depends-on: [b, c]
  - name: c
    commands: [echo c]
    depends-on: [a]
  - name: b
    commands: [echo b]
    depends-on: [a]
  - name: a
    commands: [echo a]
"""

_runs = itertools.count(1)


@pytest.fixture
def home(tmp_path: Path) -> ControllerHome:
    h = ControllerHome(tmp_path / "home")
    h.create()
    return h


@pytest.fixture
def store(home: ControllerHome):
    s = Store(home.db)
    yield s
    s.close()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".lanpool").mkdir(parents=True)
    (root / ".lanpool" / "workflows.yaml").write_text(WORKFLOWS)
    (root / ".lanpool" / "variables.yaml").write_text(VARIABLES)
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _plan(root: Path, store: Store, home: ControllerHome, workflow: str, overrides: dict | None = None, **kw) -> Plan:
    return make_plan(load_workflows(root), store, home, workflow, overrides or {}, **kw)


def _record_done(
    store: Store,
    home: ControllerHome,
    root: Path,
    planned: PlannedJob,
    tag: str | None = None,
    artifacts: dict[str, str] | None = None,
) -> JobRow:
    """A finished job of `planned`, with its artifacts in the local store, as the controller leaves it."""
    run_name = f"run-{next(_runs)}"
    store.create_run(run_name, planned.workflow, str(root), tag)
    job_id = secrets.token_hex(6)
    artifacts = {f"{planned.job.artifacts[0]}/out.txt": planned.workflow} if artifacts is None else artifacts
    spec = {"commands": planned.job.commands, "artifacts": planned.job.artifacts}
    store.create_job(job_id, run_name, planned.workflow, RUNNER, spec, planned.key, planned.inputs)
    store.set_job_status(job_id, JobState.DONE, exit_code=0, finished_at=time.time(), synced=1)
    store.set_artifacts(job_id, [(path, len(text)) for path, text in artifacts.items()])
    for path, text in artifacts.items():
        local = home.job_artifacts(job_id) / path
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(text)
    return store.job(job_id)


def _record_plan(store, home, root, plan: Plan) -> dict[str, JobRow]:
    return {
        j.workflow: _record_done(store, home, root, j, artifacts={} if not j.job.artifacts else None)
        for j in plan.jobs
        if j.action == "run"
    }


def _by_name(plan: Plan) -> dict[str, PlannedJob]:
    return {j.workflow: j for j in plan.jobs}


# -- the DAG -------------------------------------------------------------------------


def test_dag_order_of_a_diamond(tmp_path: Path):
    (tmp_path / ".lanpool").mkdir()
    (tmp_path / ".lanpool" / "workflows.yaml").write_text(DIAMOND)
    project = load_workflows(tmp_path)
    order = dag_order(project, "d")
    assert sorted(order) == ["a", "b", "c", "d"]  # each once
    assert order[0] == "a" and order[-1] == "d"
    assert dag_order(project, "b") == ["a", "b"]
    assert dag_order(project, "a") == ["a"]


def test_plan_of_a_diamond_runs_each_job_once(tmp_path: Path, store: Store, home: ControllerHome):
    project_dir = tmp_path / "diamond"
    (project_dir / ".lanpool").mkdir(parents=True)
    (project_dir / ".lanpool" / "workflows.yaml").write_text(DIAMOND)
    plan = _plan(project_dir, store, home, "d")
    assert [j.workflow for j in plan.jobs][0] == "a" and len(plan.jobs) == 4
    jobs = _by_name(plan)
    assert sorted(jobs["d"].deps) == ["b", "c"]
    assert jobs["d"].inputs["deps"] == {"b": jobs["b"].key, "c": jobs["c"].key}
    assert jobs["b"].inputs["deps"] == {"a": jobs["a"].key} == jobs["c"].inputs["deps"]
    assert len({j.key for j in plan.jobs}) == 4


def test_tagged_dependencies_are_not_in_the_dag(root: Path):
    assert dag_order(load_workflows(root), "finetune") == ["finetune"]
    assert dag_order(load_workflows(root), "train") == ["prepare", "encode", "train"]


def test_known_variables_are_the_dags(root: Path):
    project = load_workflows(root)
    assert known_variables(project, "train") == {"size": 100, "vocab": 5000, "lr": 0.01}
    assert known_variables(project, "encode") == {"size": 100, "vocab": 5000}
    assert known_variables(project, "prepare") == {"size": 100}


# -- run or reuse ------------------------------------------------------------------------


def test_first_plan_runs_everything(root: Path, store: Store, home: ControllerHome):
    plan = _plan(root, store, home, "train")
    assert [(j.workflow, j.action) for j in plan.jobs] == [("prepare", "run"), ("encode", "run"), ("train", "run")]
    assert plan.to_run == plan.jobs
    assert all(j.reuse is None for j in plan.jobs)
    assert _by_name(plan)["prepare"].reason == "never ran with these inputs"
    assert "always runs" in _by_name(plan)["train"].reason


def test_the_same_inputs_give_the_same_keys(root: Path, store: Store, home: ControllerHome):
    first, second = _plan(root, store, home, "train"), _plan(root, store, home, "train")
    assert [j.key for j in first.jobs] == [j.key for j in second.jobs]


def test_requested_workflow_runs_unless_reuse(root: Path, store: Store, home: ControllerHome):
    done = _record_done(store, home, root, _plan(root, store, home, "prepare").jobs[0])
    again = _plan(root, store, home, "prepare").jobs[0]
    assert again.action == "run" and "--reuse" in again.reason
    reused = _plan(root, store, home, "prepare", reuse_requested=True).jobs[0]
    assert (reused.action, reused.reuse) == ("reuse", done)
    assert done.id in reused.reason


def test_dependencies_with_a_done_twin_are_reused(root: Path, store: Store, home: ControllerHome):
    first = _plan(root, store, home, "train")
    done = _record_plan(store, home, root, first)
    plan = _by_name(_plan(root, store, home, "train"))
    assert (plan["prepare"].action, plan["prepare"].reuse) == ("reuse", done["prepare"])
    assert (plan["encode"].action, plan["encode"].reuse) == ("reuse", done["encode"])
    assert plan["train"].action == "run"
    assert "same inputs as job" in plan["prepare"].reason
    all_reused = _plan(root, store, home, "train", reuse_requested=True)
    assert all_reused.to_run == []


def test_only_a_done_twin_counts(root: Path, store: Store, home: ControllerHome):
    planned = _plan(root, store, home, "prepare").jobs[0]
    job = _record_done(store, home, root, planned)
    store.set_job_status(job.id, JobState.FAILED, exit_code=1)
    again = _plan(root, store, home, "prepare", reuse_requested=True).jobs[0]
    assert again.action == "run"
    assert "did not finish DONE" in again.reason


def test_not_yet_synced_twin_is_not_reused(root: Path, store: Store, home: ControllerHome):
    planned = _plan(root, store, home, "prepare").jobs[0]
    job = _record_done(store, home, root, planned)
    store.update_job(job.id, synced=0)  # artifacts not brought back yet
    assert _plan(root, store, home, "prepare", reuse_requested=True).jobs[0].action == "run"


def test_no_cache_runs_everything(root: Path, store: Store, home: ControllerHome):
    _record_plan(store, home, root, _plan(root, store, home, "train"))
    plan = _plan(root, store, home, "train", no_cache=True, reuse_requested=True)
    assert [j.action for j in plan.jobs] == ["run", "run", "run"]
    assert all(j.reason == "--no-cache" for j in plan.jobs)


def test_twin_with_deleted_artifacts_is_not_reused(root: Path, store: Store, home: ControllerHome):
    done = _record_plan(store, home, root, _plan(root, store, home, "train"))
    shutil.rmtree(home.job_artifacts(done["prepare"].id))
    plan = _by_name(_plan(root, store, home, "train"))
    assert plan["prepare"].action == "run" and plan["prepare"].reuse is None
    assert "artifacts are gone" in plan["prepare"].reason
    assert plan["encode"].action == "reuse"  # its own artifacts are still here, and its key is unchanged


def test_twin_without_artifacts_is_reused(root: Path, store: Store, home: ControllerHome):
    planned = _plan(root, store, home, "prepare").jobs[0]
    job = _record_done(store, home, root, planned, artifacts={})
    assert not home.job_artifacts(job.id).exists()
    assert _plan(root, store, home, "prepare", reuse_requested=True).jobs[0].reuse == job


# -- what changes a key ---------------------------------------------------------------------


def test_editing_a_file_not_included_keeps_the_key(root: Path, store: Store, home: ControllerHome):
    before = _plan(root, store, home, "train")
    _record_plan(store, home, root, before)
    (root / "README.md").write_text("# edited\n")
    (root / "train.py").write_text("print('a new train')\n")  # included by train (it has no include list)
    (root / "data" / "new.csv").write_text("not *.txt\n")
    after = _by_name(_plan(root, store, home, "train", reuse_requested=True))
    assert after["prepare"].key == _by_name(before)["prepare"].key
    assert after["encode"].key == _by_name(before)["encode"].key
    assert (after["prepare"].action, after["encode"].action) == ("reuse", "reuse")
    assert after["train"].key != _by_name(before)["train"].key  # train depends on all files
    assert "train.py" in after["train"].reason


def test_editing_an_included_file_changes_the_key(root: Path, store: Store, home: ControllerHome):
    before = _by_name(_plan(root, store, home, "train"))
    _record_plan(store, home, root, _plan(root, store, home, "train"))
    (root / "data" / "x.txt").write_text("two\n")
    after = _by_name(_plan(root, store, home, "train"))
    assert after["prepare"].key != before["prepare"].key
    assert after["prepare"].action == "run"
    assert "files data/x.txt" in after["prepare"].reason
    assert after["prepare"].reason.startswith("changed since job ")


def test_adding_an_included_file_changes_the_key(root: Path, store: Store, home: ControllerHome):
    before = _plan(root, store, home, "prepare").jobs[0]
    _record_done(store, home, root, before)
    (root / "data" / "y.txt").write_text("new\n")
    after = _plan(root, store, home, "prepare", reuse_requested=True).jobs[0]
    assert after.key != before.key and after.action == "run"
    assert "files data/y.txt" in after.reason


def test_a_changed_dependency_key_propagates(root: Path, store: Store, home: ControllerHome):
    before = _by_name(_plan(root, store, home, "train"))
    _record_plan(store, home, root, _plan(root, store, home, "train"))
    (root / "prepare.py").write_text("print('prepare v2')\n")  # included by prepare only
    after = _by_name(_plan(root, store, home, "train", reuse_requested=True))
    assert after["encode"].inputs["files_digest"] == before["encode"].inputs["files_digest"]
    assert after["encode"].inputs["deps"] == {"prepare": after["prepare"].key}
    for name in ("prepare", "encode", "train"):
        assert after[name].key != before[name].key, name
        assert after[name].action == "run", name
    assert "dependency prepare" in after["encode"].reason
    assert "dependency encode" in after["train"].reason


def test_a_changed_variable_changes_the_key(root: Path, store: Store, home: ControllerHome):
    before = _by_name(_plan(root, store, home, "train"))
    _record_plan(store, home, root, _plan(root, store, home, "train"))
    after = _by_name(_plan(root, store, home, "train", {"vocab": "8000"}))
    assert after["prepare"].key == before["prepare"].key and after["prepare"].action == "reuse"
    assert after["encode"].key != before["encode"].key and after["encode"].action == "run"
    assert "variables vocab" in after["encode"].reason
    assert after["train"].key != before["train"].key  # through its dependency


def test_a_global_override_reaches_every_workflow_that_uses_it(root: Path, store: Store, home: ControllerHome):
    before = _by_name(_plan(root, store, home, "train"))
    _record_plan(store, home, root, _plan(root, store, home, "train"))
    after = _by_name(_plan(root, store, home, "train", {"size": "200"}))
    assert all(after[n].key != before[n].key for n in after)
    assert "variables size" in after["prepare"].reason
    assert after["prepare"].job.commands == ["python prepare.py --size 200"]


def test_an_override_equal_to_the_default_keeps_the_key(root: Path, store: Store, home: ControllerHome):
    before = _plan(root, store, home, "train")
    after = _plan(root, store, home, "train", {"lr": "0.010", "size": "100"})
    assert [j.key for j in after.jobs] == [j.key for j in before.jobs]


def test_unknown_override_lists_the_valid_names(root: Path, store: Store, home: ControllerHome):
    with pytest.raises(WorkflowError) as exc:
        _plan(root, store, home, "train", {"learning_rate": "0.1"})
    message = str(exc.value)
    assert "--learning_rate" in message
    assert all(f"--{n}" in message for n in ("lr", "size", "vocab"))
    with pytest.raises(WorkflowError) as exc:
        _plan(root, store, home, "prepare", {"lr": "0.1"})  # train's variable is not in prepare's DAG
    assert "--lr" in str(exc.value) and "--size" in str(exc.value)


# -- tags --------------------------------------------------------------------------------


def test_missing_tag_tells_to_run_with_tag(root: Path, store: Store, home: ControllerHome):
    with pytest.raises(UsageError) as exc:
        _plan(root, store, home, "finetune")
    assert "--tag v1" in str(exc.value) and "'prepare'" in str(exc.value)


def test_tagged_dependency_resolves_to_the_tagged_runs_job(root: Path, store: Store, home: ControllerHome):
    prepare = _plan(root, store, home, "prepare").jobs[0]
    tagged = _record_done(store, home, root, prepare, tag="v1")
    _record_done(store, home, root, prepare)  # a later, untagged twin is not the tagged one
    assert store.tagged_job("v1", "prepare") == tagged
    plan = _plan(root, store, home, "finetune")
    assert [j.workflow for j in plan.jobs] == ["finetune"]
    job = plan.jobs[0]
    assert job.tagged == [tagged] and job.deps == []
    assert job.inputs["tagged"] == {"prepare": tagged.id}
    assert plan.to_json()["jobs"][0]["tagged_inputs"] == [tagged.id]


def test_a_moved_tag_changes_the_key(root: Path, store: Store, home: ControllerHome):
    prepare = _plan(root, store, home, "prepare").jobs[0]
    _record_done(store, home, root, prepare, tag="v1")
    before = _plan(root, store, home, "finetune").jobs[0]
    _record_done(store, home, root, before, artifacts={})
    moved = _record_done(store, home, root, prepare, tag="v1")
    after = _plan(root, store, home, "finetune", reuse_requested=True).jobs[0]
    assert after.tagged == [moved]
    assert after.key != before.key and after.action == "run"
    assert "tagged input" in after.reason


def test_a_tag_whose_job_failed_is_missing(root: Path, store: Store, home: ControllerHome):
    job = _record_done(store, home, root, _plan(root, store, home, "prepare").jobs[0], tag="v1")
    store.set_job_status(job.id, JobState.FAILED, exit_code=1)
    with pytest.raises(UsageError):
        _plan(root, store, home, "finetune")


def test_plan_compares_with_the_job_a_rerun_would_reuse(root: Path, store: Store, home: ControllerHome):
    """After an edit, `plan` compares with the DONE job of these variables, not with the newest job
    (here a STOPPED one with another size), and names the one input that changed."""
    twin = _record_done(store, home, root, _plan(root, store, home, "prepare").jobs[0])
    other = _record_done(store, home, root, _plan(root, store, home, "prepare", {"size": "500"}).jobs[0])
    store.set_job_status(other.id, JobState.STOPPED)
    (root / "prepare.py").write_text("print('prepare v2')\n")
    after = _plan(root, store, home, "prepare", reuse_requested=True).jobs[0]
    assert after.reason == f"changed since job {twin.id}: files prepare.py"


def test_a_changed_variable_is_named_once_not_in_every_field_it_reaches(root: Path, store: Store, home: ControllerHome):
    """Only a DONE job with another size to compare with: the size changed (its `$size` in the
    commands and its SIZE in the env are that change), and the edited file."""
    other = _record_done(store, home, root, _plan(root, store, home, "prepare", {"size": "500"}).jobs[0])
    (root / "prepare.py").write_text("print('prepare v2')\n")
    after = _plan(root, store, home, "prepare", reuse_requested=True).jobs[0]
    assert after.reason == f"changed since job {other.id}: variables size; files prepare.py"
    (root / ".lanpool" / "workflows.yaml").write_text(WORKFLOWS.replace("--size $size", "--size $size --fast"))
    edited = _plan(root, store, home, "prepare", reuse_requested=True).jobs[0]
    assert edited.reason == f"changed since job {other.id}: commands; variables size; files prepare.py"
