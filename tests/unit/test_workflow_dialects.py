"""The 2022 dstack dialects through load_workflows and resolve: each fixture project
(tests/fixtures/dialects) loads, the old spellings mean what dstack meant, what
lanpool cannot do is refused in one line, and variables reach the job (hyphen names,
$variables_as_args with the globals, each variable in the env) without clobbering
the environment a job needs or reaching bash's arithmetic as a string."""

import shutil
import textwrap
from pathlib import Path

import pytest

from lanpool.app.workflows import Project, WorkflowError, load_workflows
from lanpool.app.workflows.model import ArtifactSpec, Dependency
from lanpool.app.workflows.resolve import resolve
from tests.workflow_files import load_strict

FIXTURES = Path(__file__).parents[1] / "fixtures" / "dialects"
BUILTINS = {"run_name": "run-1", "job_id": "abc123"}


def _dstack(root: Path, workflows: str, variables: str | None = None) -> Project:
    (root / ".dstack").mkdir(parents=True)
    (root / ".dstack" / "workflows.yaml").write_text(textwrap.dedent(workflows))
    if variables is not None:
        (root / ".dstack" / "variables.yaml").write_text(textwrap.dedent(variables))
    return load_strict(root)


def _fixture(name: str, tmp_path: Path) -> Project:
    return load_strict(shutil.copytree(FIXTURES / name, tmp_path / name))


# -- the fixture projects --------------------------------------------------------------


def test_early_2022_python_script_python_gpu_and_latest(tmp_path: Path):
    project = _fixture("early-2022", tmp_path)
    train = project.get("train")
    assert (train.provider, train.script, train.version) == ("python", "train.py", "3.11")
    assert train.resources == {"gpu": 1}
    assert train.depends_on == [Dependency("download", "latest")] and train.depends_on[0].latest
    job = resolve(project, "train", {"batch-size": "32"}, BUILTINS)
    assert job.commands == ["python train.py --model 117M --batch-size 32 --test-batch-size 1000 --learning.rate 0.01"]
    assert job.env == {"MODEL": "117M", "BATCH_SIZE": "32", "TEST_BATCH_SIZE": "1000", "LEARNING_RATE": "0.01"}
    assert job.resources == {"gpu": 1}
    download = resolve(project, "download", {}, BUILTINS)
    assert download.commands == ['python download.py --out data --lines "3"']


def test_mid_2022_script_environment_and_resources(tmp_path: Path):
    project = _fixture("mid-2022", tmp_path)
    job = resolve(project, "train", {"test-batch-size": "50"}, BUILTINS)
    assert job.commands == ['python train.py --epochs "2" --test-batch-size "50"']
    assert job.env == {"MODEL": "345M", "EPOCHS": "2", "TEST_BATCH_SIZE": "50"}
    assert project.get("train").depends_on == [Dependency("prepare")]
    assert resolve(project, "prepare", {}, BUILTINS).env == {"MODEL": "345M", "SPLIT": "train"}


def test_late_2022_bash_deps_env_list_artifact_objects(tmp_path: Path):
    project = _fixture("late-2022", tmp_path)
    hello = project.get("hello-txt")
    assert hello.env == {"GREETING": "hello", "WHO": "${{ who }}"}
    assert hello.artifacts == [ArtifactSpec("output")]
    assert project.get("cat-txt").depends_on == [Dependency("hello-txt")]
    assert project.get("cat-tagged").depends_on == [Dependency("", "txt-file")]
    assert len(project.notes) == 2
    assert "'mount: true' is ignored" in project.notes[0] and "workflows.yaml:" in project.notes[0]
    assert "'cache'" in project.notes[1]
    job = resolve(project, "hello-txt", {}, BUILTINS)
    assert job.env == {"GREETING": "hello", "WHO": "world", "BATCH_SIZE": "8"}


# -- old spellings: each one, and what it may not be combined with ----------------------


def test_python_version_keeps_its_text_and_top_level_gpu_takes_a_mapping(tmp_path: Path):
    project = _dstack(
        tmp_path,
        """\
        workflows:
          - name: t
            provider: python
            python_script: t.py
            python: 3.10
            gpu:
              name: V100
              memory: 16GB
              count: 2
        """,
    )
    wf = project.get("t")
    assert wf.version == "3.10"  # not the float 3.1
    job = resolve(project, "t", {}, BUILTINS)
    assert job.resources == {"gpu": 2, "gpu_name": "V100", "gpu_memory_mb": 16 * 1024}
    assert job.image == "python:3.10-slim"  # the default image for a version (each job its own Python)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("script: a.py\n    python_script: b.py", "has both 'python_script' and 'script'"),
        ("script: a.py\n    version: 3.9\n    python: 3.10", "has both 'python' and 'version'"),
        ("script: a.py\n    gpu: 1\n    resources: {gpu: 2}", "has both 'gpu' and 'resources.gpu'"),
        ("script: a.py\n    gpu: lots", "resources.gpu must be a whole number"),
        ("script: a.py\n    deps: [{workflow: a}]\n    depends-on: [a]", "has both 'deps' and 'depends-on'"),
        ("script: a.py\n    deps: {workflow: a}", "'deps' must be a list"),
        ("script: a.py\n    deps: [{run: a}]", "not 'run'"),
        ("script: a.py\n    deps: [{workflow: nope}]", "unknown workflow 'nope'"),
    ],
)
def test_old_spellings_refuse_contradictions(tmp_path: Path, entry: str, expected: str):
    with pytest.raises(WorkflowError) as err:
        _dstack(tmp_path, f"workflows:\n  - name: a\n    provider: python\n    {entry}\n")
    message = str(err.value)
    assert expected in message and "\n" not in message
    assert ".dstack/workflows.yaml:" in message  # file:line of the key at fault


def test_2022_ports_count_and_passed_names_are_read(tmp_path: Path):
    project = _dstack(
        tmp_path,
        "workflows:\n  - name: a\n    commands: [x]\n    ports: 2\n    env: [TOKEN, B=1]\n"
        "  - name: b\n    commands: [x]\n    ports: [6006]\n",
    )
    job = resolve(project, "a", {}, BUILTINS)
    assert (job.port_count, job.ports, job.passed_env, job.env) == (2, [], ["TOKEN"], {"B": "1"})
    other = resolve(project, "b", {}, BUILTINS)
    assert (other.port_count, other.ports, other.passed_env) == (0, [6006], [])


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("provider: code", "'provider: code' starts a VS Code dev environment"),
        ("provider: notebook", "'provider: notebook' starts a Jupyter notebook"),
        ("provider: lab", "JupyterLab"),
        ("provider: curl", "write 'commands: [curl"),
        ("provider: torchrun", "'nodes: N'"),
        ("provider: torchrun@experimental", "'nodes: N'"),
        ("provider: {name: python}", "'provider' is a name (python, bash or docker), not a mapping"),
        ("commands: [x]\n    ports: [0]", "'ports': 0 is not a port number"),
        ("commands: [x]\n    ports: 17", "a number alone is a count of ports the runner picks"),
        ("commands: [x]\n    ports: 0", "write ports: [0]"),
        ("commands: [x]\n    env: ['A B']", "entries must be KEY=VALUE, or a bare NAME"),
        ("commands: [x]\n    env: [A, A]", "'A' is given twice"),
        ("commands: [x]\n    ssh: true", "'ssh' opens an ssh server"),
    ],
)
def test_what_lanpool_cannot_do_is_refused_in_one_line(tmp_path: Path, entry: str, expected: str):
    with pytest.raises(WorkflowError) as err:
        _dstack(tmp_path, f"workflows:\n  - name: dev\n    {entry}\n")
    message = str(err.value)
    assert expected in message and "\n" not in message
    assert "workflow 'dev'" in message and f":{3 + entry.count(chr(10))}:" in message  # the key's own line


def test_an_unknown_key_still_gets_did_you_mean(tmp_path: Path):
    with pytest.raises(WorkflowError, match="did you mean 'commands'"):
        _dstack(tmp_path, "workflows:\n  - name: a\n    provider: bash\n    comands: [x]\n")


# -- variable names with - and . ----------------------------------------------------------


@pytest.mark.parametrize("name", ["-x", "x-", "1x", "a b", "x.", "x$y"])
def test_bad_variable_names_are_refused(tmp_path: Path, name: str):
    with pytest.raises(WorkflowError, match="not a valid variable name"):
        _dstack(tmp_path, "workflows:\n  - name: a\n    commands: [x]\n", f"variables:\n  a:\n    '{name}': 1\n")


def test_a_hyphen_variable_is_referenced_and_overridden(tmp_path: Path):
    project = _dstack(
        tmp_path,
        """\
        workflows:
          - name: a
            commands:
              - echo "${{ batch-size }} ${{ variables.test-batch-size }} $batch-size"
        """,
        "variables:\n  a:\n    batch-size: 64\n    test-batch-size: 8\n",
    )
    job = resolve(project, "a", {"batch-size": "32"}, BUILTINS)
    # `$batch-size` is the shell's $batch followed by "-size": only ${{ }} takes such names
    assert job.commands == ['echo "32 8 $batch-size"']
    # argparse turned --batch-size into batch_size: it still reaches batch-size
    assert resolve(project, "a", {"batch_size": "16"}, BUILTINS).env["BATCH_SIZE"] == "16"


def test_an_undefined_hyphen_variable_names_the_projects_file(tmp_path: Path):
    with pytest.raises(WorkflowError) as err:
        _dstack(tmp_path, "workflows:\n  - name: a\n    commands: ['echo ${{ batch-size }}']\n")
    assert "'batch-size'" in str(err.value) and "add it to .dstack/variables.yaml" in str(err.value)


# -- the environment: what a variable may not do ---------------------------------------


def test_a_variable_never_replaces_the_environment_a_job_needs(tmp_path: Path):
    project = _dstack(
        tmp_path,
        "workflows:\n  - name: a\n    commands: [env]\n    env:\n      MODEL: fixed\n",
        """\
        variables:
          a:
            path: data/
            home: /nowhere
            ld_preload: /tmp/evil.so
            lanpool_job_id: forged
            pythonpath: /tmp
            cuda_visible_devices: 3
            model: 117M
            epochs: 3
        """,
    )
    job = resolve(project, "a", {}, BUILTINS)
    assert job.env == {"MODEL": "fixed", "EPOCHS": "3"}  # the workflow's own env wins over a copy


def test_a_string_copied_into_the_env_may_not_reach_arithmetic(tmp_path: Path):
    project = _dstack(
        tmp_path,
        "workflows:\n  - name: a\n    commands: ['echo $(( STEPS * 2 )) $(( EPOCHS + 1 ))']\n",
        "variables:\n  a:\n    steps: 'x[$(touch pwned)]'\n    epochs: 3\n",
    )
    with pytest.raises(WorkflowError) as err:
        resolve(project, "a", {}, BUILTINS)
    assert "$steps is a string copied into env STEPS" in str(err.value)
    # a whole number may: epochs alone is fine
    project = _dstack(
        tmp_path / "ok",
        "workflows:\n  - name: a\n    commands: ['echo $(( EPOCHS + 1 ))']\n",
        "variables:\n  a:\n    epochs: 3\n",
    )
    assert resolve(project, "a", {}, BUILTINS).env == {"EPOCHS": "3"}


def test_variables_as_args_of_a_python_job_hold_the_globals(tmp_path: Path):
    # dstack's GPT-2 tutorial: finetune-model's script takes --model from the global variable.
    project = _dstack(
        tmp_path,
        """\
        workflows:
          - name: finetune-model
            provider: python
            script: finetune.py
            args: $variables_as_args
        """,
        "variables:\n  global:\n    model: 117M\n  finetune-model:\n    steps: 1000\n",
    )
    job = resolve(project, "finetune-model", {"model": "345M"}, BUILTINS)
    assert job.commands == ["python finetune.py --model 345M --steps 1000"]
    assert job.variables == {"model": "345M", "steps": "1000"}  # each one is an input of the cache key


def test_mid_2022_file_key_and_where_to_run_resources(tmp_path: Path, caplog):
    project = _dstack(
        tmp_path,
        """\
        workflows:
          - name: train
            provider: python
            file: train.py
            resources:
              local: true
              gpu: 1
          - name: far
            commands: [echo far]
            resources: {remote: true}
        """,
    )
    train = project.get("train")
    assert (train.script, train.resources) == ("train.py", {"gpu": 1})
    assert resolve(project, "train", {}, BUILTINS).commands == ["python train.py"]
    assert project.get("far").resources == {}
    notes = "\n".join(project.notes)
    assert "workflows.yaml:6: workflow 'train': 'resources.local'" in notes and "--runner NAME" in notes, notes
    assert "workflows.yaml:10: workflow 'far': 'resources.remote'" in notes, notes


def test_a_workflow_of_another_repository_is_refused_saying_what_to_do(tmp_path: Path):
    root = tmp_path / "p"
    (root / ".dstack").mkdir(parents=True)
    (root / ".dstack" / "workflows.yaml").write_text(
        "workflows:\n"
        "  - name: a\n    depends-on: [dstackai/dstack-examples/mnist]\n    commands: [x]\n"
        "  - name: b\n    provider: bash\n    deps:\n"
        "      - repo: {user: dstackai, name: dstack-examples}\n        workflow: mnist\n    commands: [x]\n"
        "  - name: c\n    commands: [x]\n"
    )
    project = load_workflows(root)
    assert list(project.workflows) == ["c"]
    a, b = project.refused["a"].message, project.refused["b"].message
    assert "'dstackai/dstack-examples/mnist', of another repository" in a and "depend on ':NAME' here" in a, a
    assert "another repository (dstackai/dstack-examples)" in b and "--tag NAME" in b, b
