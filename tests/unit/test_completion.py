"""Shell completion (`app completion bash|zsh`, the hidden `app __complete`) and `app --help`.
The in-process part (unit); the rest: tests/integration/test_completion.py."""

from pathlib import Path

import pytest

from lanpool.app.cli.completion import _node, complete, script
from lanpool.app.cli.parser import build_parser
from lanpool.app.store import Store

WORKFLOWS = """\
workflows:
  - name: prep
    commands: ["echo ${{ block_size }}"]
  - name: train
    depends-on: [prep]
    commands: ["echo ${{ lr }} ${{ batch-size }}"]
  - name: hello
    commands: ["echo hi"]
"""


VARIABLES = """\
variables:
  prep: {block_size: 128}
  train: {lr: 0.1, batch-size: 32}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".lanpool").mkdir(parents=True)
    (root / ".lanpool" / "workflows.yaml").write_text(WORKFLOWS)
    (root / ".lanpool" / "variables.yaml").write_text(VARIABLES)
    (root / "src").mkdir()
    return root


@pytest.fixture
def spec() -> dict:
    return {"headless": _node(build_parser())}


def test_verbs_and_their_options(spec, tmp_path):
    assert complete(spec, [""], tmp_path, None) == ["headless", "agent", "completion", "--help", "--version"]
    assert complete(spec, ["headless", "r"], tmp_path, None) == ["run", "rm", "runners"]
    assert complete(spec, ["headless", "status", "--j"], tmp_path, None) == ["--json"]
    assert complete(spec, ["headless", "artifacts", ""], tmp_path, None) == ["list", "download"]
    assert complete(spec, ["completion", ""], tmp_path, None) == ["bash", "zsh"]
    # An option's value is the shell's (files, numbers): nothing from us.
    assert complete(spec, ["headless", "run", "--project", ""], tmp_path, None) == []
    # Lost (an unknown word, no project, no store): no candidates, no error.
    assert complete(spec, ["nonsense", ""], tmp_path, None) == []
    assert complete(spec, ["headless", "run", ""], tmp_path, None) == []


def test_workflow_names_from_the_project_found_from_cwd(spec, project):
    assert complete(spec, ["headless", "run", ""], project / "src", None) == ["hello", "prep", "train"]
    assert complete(spec, ["headless", "plan", "--json", "t"], project, None) == ["train"]
    # Options before the name, with their values, do not count as the name.
    assert complete(spec, ["headless", "run", "--runner", "gpu1", "-d", "h"], project, None) == ["hello"]
    # --project elsewhere: that project's workflows, not cwd's.
    assert complete(spec, ["headless", "run", "--project", str(project), ""], Path("/"), None) == [
        "hello",
        "prep",
        "train",
    ]


def test_variables_of_a_workflow_and_of_what_it_depends_on(spec, project):
    found = complete(spec, ["headless", "run", "train", "--"], project, None)
    assert found[:3] == ["--batch-size", "--block_size", "--lr"]
    assert "--runner" in found  # lanpool's options are allowed after the name too
    assert complete(spec, ["headless", "run", "train", "--lr", "0.5", "--b"], project, None) == [
        "--batch-size",
        "--block_size",
    ]
    assert complete(spec, ["headless", "plan", "hello", "--l"], project, None) == []
    # A broken workflows file: no candidates rather than a traceback in the user's shell.
    (project / ".lanpool" / "workflows.yaml").write_text("workflows: [{name: train, commands: 3")
    assert complete(spec, ["headless", "run", ""], project, None) == []


def test_run_names_from_the_store_newest_first_read_only(spec, tmp_path):
    db = tmp_path / "lanpool.db"
    store = Store(db)
    store.create_run("old-otter-1", "train", str(tmp_path))
    store.create_run("brave-otter-2", "train", str(tmp_path))
    store.close()
    assert complete(spec, ["headless", "logs", ""], tmp_path, db) == ["brave-otter-2", "old-otter-1"]
    assert complete(spec, ["headless", "artifacts", "download", "b"], tmp_path, db) == ["brave-otter-2"]
    assert complete(spec, ["headless", "run", "--resume", "o"], tmp_path, db) == ["old-otter-1"]
    # No store yet: nothing, and none is created by completing.
    missing = tmp_path / "none" / "lanpool.db"
    assert complete(spec, ["headless", "rm", ""], tmp_path, missing) == []
    assert not missing.parent.exists()


def test_zsh_script_registers_a_completer_with_the_spec():
    text = script("zsh", {"headless": build_parser()})
    assert text.startswith("#compdef app") and "compdef _lanpool_app app" in text
    assert "__complete --spec" in text and '"plan"' in text
