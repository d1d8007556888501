"""Workflow files read again from the cache of their parsed values (app/workflows/yaml_cache.py):
the same values, lines and errors as from YAML, and never anything else.
The in-process part (unit); the rest: tests/integration/test_yaml_cache.py."""

import json
import textwrap
from pathlib import Path

import pytest

from lanpool.app.workflows import load_workflows, yaml_cache
from lanpool.app.workflows.yaml_lines import read_yaml
from tests.workflow_files import write_workflows

RICH = """\
workflows:
  - name: train
    help: train the model
    commands:
      - python train.py --lr $LR
    env:
      LR: 0.001
      DEBUG: true
      EMPTY:
      PY: 3.10
    artifacts: [checkpoints]
    resources: {cpu: 2, memory: 4GB}
  - name: eval
    depends-on: [train]
    commands: [python eval.py]
"""


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch) -> Path:
    home = tmp_path / "controller"
    home.mkdir()
    monkeypatch.setenv("LANPOOL_HOME", str(home))
    return home / "cache" / "yaml"


def _same(a, b) -> None:
    assert type(a) is type(b) and a == b
    if isinstance(a, dict):
        assert (a.line, a.key_lines, a.scalar_text) == (b.line, b.key_lines, b.scalar_text)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list):
        for x, y in zip(a, b, strict=True):
            _same(x, y)


def test_a_second_read_comes_from_the_cache_with_the_same_values_and_lines(cache_home, tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(RICH)
    first = read_yaml(path)
    assert len(list(cache_home.glob("*.json"))) == 1
    second = read_yaml(path)
    _same(first, second)
    assert second["workflows"][0].line_of("env") == 6 and second["workflows"][0]["env"].scalar_text["PY"] == "3.10"
    # and the workflows built from it are equal
    root = tmp_path / "proj"
    write_workflows(root, RICH)
    assert load_workflows(root) == load_workflows(root)


def test_keys_that_are_not_strings_come_back_as_they_were(cache_home, tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("1: one\nfalse: yes\n~: none\n2.5: [a, {b: c}]\n")
    first = read_yaml(path)
    _same(first, read_yaml(path))
    assert list(first) == [1, False, None, 2.5]


def test_an_edit_is_read_from_yaml(cache_home, tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("a: 1\n")
    assert read_yaml(path) == {"a": 1}
    path.write_text("a: 2\n")
    assert read_yaml(path) == {"a": 2}


@pytest.mark.parametrize(
    "text",
    [
        "when: 2024-01-02\n",  # a date
        "blob: !!binary aGVsbG8=\n",  # bytes
        "s: !!set {a, b}\n",  # a set
        "x: &x [1, 2]\ny: *x\n",  # an alias: one list in two places
        "x: .nan\n",
    ],
)
def test_what_json_cannot_give_back_is_not_kept(cache_home, tmp_path, text):
    path = tmp_path / "w.yaml"
    path.write_text(text)
    first = read_yaml(path)
    assert not list(cache_home.glob("*.json"))
    second = read_yaml(path)
    assert type(second) is type(first) and second.keys() == first.keys()


def test_a_planted_or_broken_entry_is_not_believed(cache_home, tmp_path):
    """Attack: an entry that is not what the cache writes (other shapes, a hostile class tag) is
    ignored and the file read from YAML again."""
    path = tmp_path / "w.yaml"
    text = "workflows:\n  - name: a\n    commands: [echo a]\n"
    path.write_text(text)
    cache_home.mkdir(parents=True)
    entry = cache_home / f"{yaml_cache.digest(text)}.json"
    for planted in (
        b"not json",
        json.dumps({"__class__": "os.system", "args": ["true"]}).encode(),
        json.dumps({"map": [[["unhashable"], 1]], "line": 1, "key_lines": [], "scalar_text": []}).encode(),
        json.dumps({"map": [], "line": "1", "key_lines": [], "scalar_text": []}).encode(),
        json.dumps([1, 2]).encode(),
    ):
        entry.write_bytes(planted)
        got = read_yaml(path)
        assert got == {"workflows": [{"name": "a", "commands": ["echo a"]}]}, planted
        assert got.line == 1


def test_malformed_yaml_still_says_its_line(cache_home, tmp_path):
    from lanpool.app.workflows.model import WorkflowError

    path = tmp_path / "w.yaml"
    path.write_text(textwrap.dedent("a: 1\nb: [\n"))
    for _ in range(2):
        with pytest.raises(WorkflowError) as err:
            read_yaml(path)
        assert "malformed YAML" in str(err.value.message if hasattr(err.value, "message") else err.value)
    assert not list(cache_home.glob("*.json"))


def test_entries_are_bounded(cache_home, tmp_path, monkeypatch):
    monkeypatch.setattr(yaml_cache, "KEEP", 3)
    path = tmp_path / "w.yaml"
    for i in range(6):
        path.write_text(f"a: {i}\n")
        read_yaml(path)
    assert len(list(cache_home.glob("*.json"))) == 3


def test_no_controller_home_no_cache(tmp_path, monkeypatch):
    home = tmp_path / "absent"
    monkeypatch.setenv("LANPOOL_HOME", str(home))
    path = tmp_path / "w.yaml"
    path.write_text("a: 1\n")
    assert read_yaml(path) == {"a": 1}
    assert not home.exists()
