"""The whole workflow file format through load_workflows, in `.lanpool/` and `.dstack/`
layouts, and the errors it reports (file:line, and exit code 2 through the CLI).
The in-process part (unit); the rest: tests/integration/test_workflows_format.py."""

from pathlib import Path

import pytest

from lanpool.app.workflows import Project, load_workflows
from lanpool.app.workflows.model import ArtifactSpec, Dependency
from lanpool.app.workflows.resolve import resolve
from lanpool.app.workflows.resources import normalize_resources
from tests.workflow_files import assert_at as _assert_at
from tests.workflow_files import load_error as _error
from tests.workflow_files import write_workflows as _write

BUILTINS = {"run_name": "run-1", "job_id": "abc123"}


LANPOOL_WORKFLOWS = """\
workflows:
  - name: prepare
    help: download and tokenize the corpus
    image: ubuntu:22.04
    commands:
      - mkdir -p data
      - python prepare.py --size $size > data/corpus.txt
    artifacts:
      - data
    depends-on:
      repo:
        include: [prepare.py, "config/*.yaml"]

  - name: train
    image: pytorch/pytorch:2.1.0-cuda12.1-cudnn8-runtime
    commands:
      - python train.py --epochs ${{ epochs }}
    env:
      WANDB_MODE: offline
      SEED: 7
    artifacts:
      - checkpoints
      - path: logs
        nodes: all
    working_dir: src
    resources:
      gpu:
        count: 2
        name: A100
        memory: 24GB
      cpu: 8
      memory: 64GB
      shm_size: 2GB
    nodes: 2
    executor: docker
    pull: always
    depends-on:
      workflows: [prepare]
      repo:
        include:
          - src/**/*.py

  - name: eval
    commands: [python eval.py]
    environment:
      MODE: fast
    resources:
      gpu: 1
    executor: process
    pull: never
    depends-on: [train, "prepare:mytag"]
"""


LANPOOL_VARIABLES = """\
variables:
  global:
    size: 1000
    epochs: 3
  train:
    epochs: 10
    lr: 0.0005
    amp: true
"""


# The shape of dstack's 2022 blog tutorial (GPT-2), written from scratch for these tests.
DSTACK_WORKFLOWS = """\
workflows:
  - name: download-model
    provider: python
    version: 3.10
    requirements: requirements.txt
    script: download_model.py
    args: ["--model", "$model"]
    artifacts: ["models"]

  - name: finetune-model
    provider: python
    version: "3.9"
    requirements: requirements.txt
    script: finetune.py
    args: --model-name $model --run $run_name $variables_as_args
    artifacts:
      - output
    resources:
      gpu: 1
    depends-on:
      - download-model
"""


DSTACK_VARIABLES = """\
variables:
  global:
    model: 117M
  finetune-model:
    steps: 1000
    sample_every: 100
"""


@pytest.fixture
def lanpool_project(tmp_path: Path) -> Project:
    root = tmp_path / "lanpool-style"
    _write(root, LANPOOL_WORKFLOWS)
    _write(root, LANPOOL_VARIABLES, name="variables.yaml")
    return load_workflows(root)


@pytest.fixture
def dstack_project(tmp_path: Path) -> Project:
    root = tmp_path / "dstack-style"
    _write(root, DSTACK_WORKFLOWS, sub=".dstack")
    _write(root, DSTACK_VARIABLES, sub=".dstack", name="variables.yaml")
    return load_workflows(root)


def test_image_and_commands(lanpool_project: Project):
    prepare = lanpool_project.get("prepare")
    assert prepare.image == "ubuntu:22.04"
    assert prepare.commands == ["mkdir -p data", "python prepare.py --size $size > data/corpus.txt"]
    assert prepare.help == "download and tokenize the corpus"
    assert prepare.provider == ""
    job = resolve(lanpool_project, "prepare", {}, BUILTINS)
    assert job.image == "ubuntu:22.04"
    assert job.commands == ["mkdir -p data", "python prepare.py --size 1000 > data/corpus.txt"]


def test_python_provider_with_a_list_of_args(dstack_project: Project):
    wf = dstack_project.get("download-model")
    assert wf.provider == "python"
    assert wf.version == "3.10"  # not the float 3.1
    assert (wf.requirements, wf.script, wf.args) == ("requirements.txt", "download_model.py", ["--model", "$model"])
    assert wf.commands == []
    job = resolve(dstack_project, "download-model", {}, BUILTINS)
    assert job.image == "python:3.10-slim"
    assert (job.python, job.requirements) == ("3.10", "requirements.txt")  # the runner installs them
    # each list element is one argument; the variable is substituted inside it
    assert job.commands[0] in ("python download_model.py --model 117M", 'python download_model.py --model "117M"')


def test_python_provider_with_a_string_of_args(dstack_project: Project):
    wf = dstack_project.get("finetune-model")
    assert wf.version == "3.9"
    assert wf.args == "--model-name $model --run $run_name $variables_as_args"
    job = resolve(dstack_project, "finetune-model", {}, BUILTINS)
    assert job.image == "python:3.9-slim"
    assert job.commands == [
        # $variables_as_args holds every variable the workflow sees, the global `model` first
        "python finetune.py --model-name 117M --run run-1 --model 117M --steps 1000 --sample_every 100",
    ]


def test_python_provider_without_version_or_requirements(tmp_path: Path):
    _write(tmp_path, "workflows:\n  - name: hello\n    provider: python\n    script: hello.py\n")
    job = resolve(load_workflows(tmp_path), "hello", {}, BUILTINS)
    assert job.image.startswith("python:")
    assert job.commands == ["python hello.py"]


def test_env_and_environment(lanpool_project: Project):
    assert lanpool_project.get("train").env == {"WANDB_MODE": "offline", "SEED": "7"}
    assert lanpool_project.get("eval").env == {"MODE": "fast"}
    assert lanpool_project.get("prepare").env == {}


def test_artifacts_as_strings_and_mappings(lanpool_project: Project):
    assert lanpool_project.get("prepare").artifacts == [ArtifactSpec("data")]
    assert lanpool_project.get("train").artifacts == [ArtifactSpec("checkpoints"), ArtifactSpec("logs", "all")]
    job = resolve(lanpool_project, "train", {}, BUILTINS)
    assert job.artifacts == ["checkpoints"]
    assert job.artifacts_all_nodes == ["logs"]


def test_working_dir(lanpool_project: Project):
    assert lanpool_project.get("train").working_dir == "src"
    assert resolve(lanpool_project, "train", {}, BUILTINS).working_dir == "src"
    assert lanpool_project.get("eval").working_dir == ""


def test_resources_are_normalised(lanpool_project: Project):
    train = lanpool_project.get("train")
    assert train.resources == {
        "gpu": {"count": 2, "name": "A100", "memory": "24GB"},
        "cpu": 8,
        "memory": "64GB",
        "shm_size": "2GB",
    }
    expected = {
        "gpu": 2,
        "gpu_name": "A100",
        "gpu_memory_mb": 24 * 1024,
        "cpu": 8,
        "memory_mb": 64 * 1024,
        "shm_size": "2048m",
    }
    assert normalize_resources(train.resources) == expected
    assert resolve(lanpool_project, "train", {}, BUILTINS).resources == expected
    assert normalize_resources(lanpool_project.get("eval").resources) == {"gpu": 1}
    assert normalize_resources(lanpool_project.get("prepare").resources) == {}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"memory": "512MB"}, {"memory_mb": 512}),
        ({"memory": "16Gi"}, {"memory_mb": 16 * 1024}),
        ({"memory": 2048}, {"memory_mb": 2048}),
        ({"shm_size": "64MB"}, {"shm_size": "64m"}),
        ({"gpu": {"count": 1, "memory": "40GB"}}, {"gpu": 1, "gpu_memory_mb": 40 * 1024}),
        ({"gpu": {"name": "T4"}}, {"gpu": 1, "gpu_name": "T4"}),
        ({"gpu": 0, "cpu": "4"}, {"gpu": 0, "cpu": 4}),
    ],
)
def test_normalize_resources_units(raw, expected):
    assert normalize_resources(raw) == expected


def test_nodes_executor_pull(lanpool_project: Project):
    train, ev, prepare = (lanpool_project.get(n) for n in ("train", "eval", "prepare"))
    assert (train.nodes, train.executor, train.pull) == (2, "docker", "always")
    assert (ev.nodes, ev.executor, ev.pull) == (1, "process", "never")
    assert (prepare.nodes, prepare.executor, prepare.pull) == (1, "", "missing")
    job = resolve(lanpool_project, "train", {}, BUILTINS)
    assert (job.nodes, job.executor, job.pull) == (2, "docker", "always")


def test_depends_on_list_mapping_and_tag(lanpool_project: Project, dstack_project: Project):
    prepare = lanpool_project.get("prepare")
    assert prepare.depends_on == [] and prepare.repo_include == ["prepare.py", "config/*.yaml"]
    train = lanpool_project.get("train")
    assert train.depends_on == [Dependency("prepare")] and train.repo_include == ["src/**/*.py"]
    ev = lanpool_project.get("eval")
    assert ev.depends_on == [Dependency("train"), Dependency("prepare", "mytag")]
    assert ev.repo_include is None  # the whole snapshot counts
    assert dstack_project.get("finetune-model").depends_on == [Dependency("download-model")]


def test_variables_global_and_per_workflow(lanpool_project: Project):
    assert lanpool_project.variables == {
        "global": {"size": 1000, "epochs": 3},
        "train": {"epochs": 10, "lr": 0.0005, "amp": True},
    }
    assert lanpool_project.variables_of("train") == {"size": 1000, "epochs": 10, "lr": 0.0005, "amp": True}
    assert lanpool_project.variables_of("prepare") == {"size": 1000, "epochs": 3}
    assert resolve(lanpool_project, "train", {}, BUILTINS).commands == ["python train.py --epochs 10"]
    assert lanpool_project.variables_file == lanpool_project.workflows_file.parent / "variables.yaml"


def test_dstack_layout_reads_its_variables(tmp_path: Path, dstack_project: Project):
    root = tmp_path / "dstack-style"
    assert dstack_project.root == root
    assert dstack_project.workflows_file == root / ".dstack" / "workflows.yaml"
    assert dstack_project.variables_file == root / ".dstack" / "variables.yaml"
    assert list(dstack_project.workflows) == ["download-model", "finetune-model"]
    assert dstack_project.variables_of("finetune-model") == {"model": "117M", "steps": 1000, "sample_every": 100}


def test_lanpool_variables_are_not_mixed_with_dstack_ones(tmp_path: Path):
    _write(tmp_path, DSTACK_WORKFLOWS, sub=".dstack")
    _write(tmp_path, DSTACK_VARIABLES, sub=".dstack", name="variables.yaml")
    _write(tmp_path, "workflows:\n  - name: only\n    commands: [echo]\n")
    project = load_workflows(tmp_path)
    assert list(project.workflows) == ["only"]
    assert project.variables == {} and project.variables_file is None


def test_without_variables_file(tmp_path: Path):
    _write(tmp_path, "workflows:\n  - name: a\n    commands: [echo $HOME]\n")
    project = load_workflows(tmp_path)
    assert project.variables == {} and project.variables_of("a") == {}
    assert resolve(project, "a", {}, BUILTINS).commands == ["echo $HOME"]


def test_malformed_workflows_yaml(tmp_path: Path):
    path = _write(
        tmp_path,
        """\
        workflows:
          - name: a
            commands:
              - echo a
          - name: b
            commands: [echo b
            env: {}
        """,
    )
    err = _error(tmp_path)
    assert str(err).startswith(f"{path}:") and "malformed YAML" in str(err)
    assert err.line == 7  # where the unclosed flow list is found to be broken


def test_malformed_variables_yaml(tmp_path: Path):
    _write(tmp_path, "workflows:\n  - name: a\n    commands: [echo $x]\n")
    path = _write(tmp_path, "variables:\n  global:\n    x: 1\n    y: a: b\n", name="variables.yaml")
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert "malformed YAML" in str(err)


@pytest.mark.parametrize(
    ("text", "line", "expected"),
    [
        (
            "workflows:\n  - name: a\n    comands: [echo]\n",
            3,
            "unknown key 'comands' in a workflow; did you mean 'commands'",
        ),
        (
            "workflows:\n  - name: a\n    commands: [echo]\n  - name: b\n    commands: [echo]\n    depends_on: [a]\n",
            6,
            "did you mean 'depends-on'",
        ),
        (
            "workflows:\n  - name: a\n    commands: [echo]\n    resources:\n      cpu: 2\n      gpus: 1\n",
            6,
            "unknown resource 'gpus'; did you mean 'gpu'",
        ),
    ],
    ids=["comands", "depends_on", "gpus"],
)
def test_unknown_key_suggests(tmp_path: Path, text, line, expected):
    path = _write(tmp_path, text)
    err = _error(tmp_path)
    _assert_at(err, path, line)
    assert expected in str(err)


def test_missing_image_and_commands(tmp_path: Path):
    path = _write(
        tmp_path,
        """\
        workflows:
          - name: ok
            commands: [echo]

          - name: empty
            image: ubuntu
        """,
    )
    err = _error(tmp_path)
    _assert_at(err, path, 5)
    assert "'empty'" in str(err) and "commands" in str(err)


def test_python_provider_without_script(tmp_path: Path):
    path = _write(tmp_path, "workflows:\n  - name: p\n    version: 3.11\n    provider: python\n    args: [x]\n")
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert "script" in str(err)


def test_dependency_cycle_prints_the_cycle(tmp_path: Path):
    path = _write(
        tmp_path,
        """\
        workflows:
          - name: a
            commands: [echo a]
            depends-on: [c]
          - name: b
            commands: [echo b]
            depends-on: [a]
          - name: c
            commands: [echo c]
            depends-on:
              workflows: [b]
        """,
    )
    err = _error(tmp_path)
    assert "dependency cycle" in str(err)
    cycle = str(err).split("dependency cycle: ")[1]
    # the same ring whichever workflow it starts from
    assert cycle in ("a -> c -> b -> a", "c -> b -> a -> c", "b -> a -> c -> b")
    start = cycle.split(" -> ")[0]
    _assert_at(err, path, {"a": 4, "b": 7, "c": 10}[start])


def test_dependency_cycle_a_b_c(tmp_path: Path):
    path = _write(
        tmp_path,
        "workflows:\n"
        "  - name: a\n    commands: [x]\n    depends-on: [b]\n"
        "  - name: b\n    commands: [x]\n    depends-on: [c]\n"
        "  - name: c\n    commands: [x]\n    depends-on: [a]\n",
    )
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert str(err).endswith("dependency cycle: a -> b -> c -> a")


def test_self_dependency_is_a_cycle(tmp_path: Path):
    path = _write(tmp_path, "workflows:\n  - name: a\n    commands: [x]\n    depends-on: [a]\n")
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert "a -> a" in str(err)


def test_dependency_on_an_unknown_workflow(tmp_path: Path):
    path = _write(
        tmp_path,
        """\
        workflows:
          - name: prepare
            commands: [echo]
          - name: train
            commands: [echo]
            help: x
            depends-on: [prepare, prepair]
        """,
    )
    err = _error(tmp_path)
    _assert_at(err, path, 7)
    assert "unknown workflow 'prepair'" in str(err) and "did you mean 'prepare'" in str(err)


def test_tagged_dependency_on_an_unknown_workflow(tmp_path: Path):
    path = _write(tmp_path, "workflows:\n  - name: a\n    commands: [x]\n    depends-on: ['nope:v1']\n")
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert "'nope'" in str(err)


def test_duplicate_names(tmp_path: Path):
    path = _write(tmp_path, "workflows:\n  - name: a\n    commands: [x]\n  - name: a\n    commands: [y]\n")
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert "duplicate workflow name 'a'" in str(err)


@pytest.mark.parametrize("key", ["commands", "env"])
def test_variable_used_but_never_defined(tmp_path: Path, key):
    field = {
        "commands": "commands:\n      - echo ${{ undefined }}\n",
        "env": "commands: [echo]\n    env:\n      X: ${{ undefined }}\n",
    }[key]
    path = _write(tmp_path, "workflows:\n  - name: a\n    help: x\n    " + field)
    _write(tmp_path, "variables:\n  global:\n    defined: 1\n", name="variables.yaml")
    err = _error(tmp_path)
    _assert_at(err, path, 4 if key == "commands" else 5)
    assert "'undefined'" in str(err) and "never defined" in str(err) and "variables.yaml" in str(err)


def test_variable_of_another_workflow_is_not_defined_here(tmp_path: Path):
    path = _write(
        tmp_path, "workflows:\n  - name: a\n    commands: [echo]\n  - name: b\n    commands: ['echo ${{ x }}']\n"
    )
    _write(tmp_path, "variables:\n  a:\n    x: 1\n", name="variables.yaml")
    err = _error(tmp_path)
    _assert_at(err, path, 5)
    assert "'x'" in str(err)


@pytest.mark.parametrize(
    ("field", "line", "expected"),
    [
        ("resources:\n      cpu: 2\n      gpu: lots\n", 6, "resources.gpu"),
        ("resources:\n      gpu:\n        count: many\n", 5, "resources.gpu.count"),
        ("resources:\n      memory: lots\n", 5, "resources.memory"),
        ("resources:\n      shm_size: big\n", 5, "resources.shm_size"),
        ("resources:\n      cpu: -1\n", 5, "resources.cpu"),
        ("nodes: 0\n", 4, "'nodes'"),
        ("nodes: two\n", 4, "'nodes'"),
        ("executor: kubernetes\n", 4, "'executor'"),
        ("pull: sometimes\n", 4, "'pull'"),
        ("args: {a: 1}\n", 4, "'args'"),
    ],
)
def test_wrong_types(tmp_path: Path, field, line, expected):
    path = _write(tmp_path, "workflows:\n  - name: a\n    commands: [x]\n    " + field)
    err = _error(tmp_path)
    _assert_at(err, path, line)
    assert expected in str(err) and "'a'" in str(err)


def test_variables_for_an_unknown_workflow(tmp_path: Path):
    _write(tmp_path, "workflows:\n  - name: train\n    commands: [x]\n")
    path = _write(tmp_path, "variables:\n  global:\n    x: 1\n  trian:\n    y: 2\n", name="variables.yaml")
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert "unknown workflow 'trian'" in str(err) and "did you mean 'train'" in str(err)


@pytest.mark.parametrize("builtin", ["run_name", "job_id", "variables_as_args"])
def test_builtin_name_as_a_variable(tmp_path: Path, builtin):
    _write(tmp_path, "workflows:\n  - name: train\n    commands: [x]\n")
    path = _write(tmp_path, f"variables:\n  train:\n    ok: 1\n    {builtin}: x\n", name="variables.yaml")
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert f"{builtin!r} is built in" in str(err)


@pytest.mark.parametrize("value", ["[1, 2]", "{a: 1}", "null"])
def test_variable_values_are_scalars(tmp_path: Path, value):
    _write(tmp_path, "workflows:\n  - name: train\n    commands: [x]\n")
    path = _write(tmp_path, f"variables:\n  global:\n    ok: 1\n    bad: {value}\n", name="variables.yaml")
    _assert_at(_error(tmp_path), path, 4)


def test_retry_as_the_docs_write_it_with_a_bare_on_key(tmp_path: Path):
    """`retry: {on: [failure, lost], limit: 3, delay: 30s}` (docs/jobs.md) is what users write, and
    means what it says (YAML 1.1 would read the key `on` as true)."""
    _write(
        tmp_path,
        "workflows:\n  - name: t\n    retry: {on: [failure, lost], limit: 3, delay: 30s}\n    commands: [true]\n"
        "  - name: u\n    retry:\n      on: [lost]\n    commands: [true]\n",
    )
    project = load_workflows(tmp_path)
    t = resolve(project, "t", {}, BUILTINS)
    assert (t.retry_on, t.retry_limit, t.retry_delay_s) == (["failure", "lost"], 3, 30.0)
    assert resolve(project, "u", {}, BUILTINS).retry_on == ["lost"]


def test_on_off_yes_no_are_the_words_written_outside_boolean_fields(tmp_path: Path):
    """YAML 1.2's booleans: a variable `answer: no` reaches the job as `no`, a key `on` stays `on`."""
    _write(
        tmp_path,
        "workflows:\n  - name: t\n    env: {SWITCH: on, on: 1}\n    commands: ['echo ${{ answer }} ${{ mode }}']\n",
    )
    _write(tmp_path, "variables:\n  t:\n    answer: no\n    mode: Off\n    real: true\n", name="variables.yaml")
    project = load_workflows(tmp_path)
    assert project.variables["t"] == {"answer": "no", "mode": "Off", "real": True}
    job = resolve(project, "t", {}, BUILTINS)
    assert job.env["SWITCH"] == "on" and job.env["on"] == "1"
    assert "echo no Off" in job.commands[0]


@pytest.mark.parametrize(("written", "held"), [("true", True), ("no", False), ("Off", False), ("YES", True)])
def test_a_boolean_field_takes_yes_no_on_off(tmp_path: Path, written, held):
    _write(tmp_path, f"workflows:\n  - name: t\n    hold_base: {written}\n    max_duration: off\n    commands: [x]\n")
    job = resolve(load_workflows(tmp_path), "t", {}, BUILTINS)
    assert (job.hold_base, job.max_duration_s) == (held, 0)


def test_a_boolean_field_refuses_other_words(tmp_path: Path):
    path = _write(tmp_path, "workflows:\n  - name: t\n    commands: [x]\n    hold_base: maybe\n")
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert "'hold_base' must be true or false" in str(err)


def test_priority_reaches_the_job(tmp_path: Path):
    _write(tmp_path, "workflows:\n  - name: t\n    priority: 7\n    commands: [x]\n")
    assert resolve(load_workflows(tmp_path), "t", {}, BUILTINS).priority == 7
    _write(tmp_path, "workflows:\n  - name: t\n    commands: [x]\n")
    assert resolve(load_workflows(tmp_path), "t", {}, BUILTINS).priority == 0


@pytest.mark.parametrize("written", ["high", "1001", "-5000", "true", "1.5"])
def test_a_priority_out_of_range_or_not_a_number_is_refused_at_its_line(tmp_path: Path, written):
    path = _write(tmp_path, f"workflows:\n  - name: t\n    commands: [x]\n    priority: {written}\n")
    err = _error(tmp_path)
    _assert_at(err, path, 4)
    assert "'priority' must be a whole number from -1000 to 1000" in str(err)
