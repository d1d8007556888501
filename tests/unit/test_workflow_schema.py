"""docs/workflows.schema.json and docs/variables.schema.json: editors validate and complete
workflow files with them, so they must accept every project lanpool reads and refuse what it refuses."""

import json
import re
from pathlib import Path

import pytest

from lanpool.app.workflows.dialects import ALIASES, IGNORED_KEYS, IGNORED_RESOURCES
from lanpool.app.workflows.entry import GPU_KEYS, RESOURCE_KEYS, WORKFLOW_KEYS
from lanpool.app.workflows.loader import load_workflows
from lanpool.app.workflows.substitute import variable_names_used
from lanpool.app.workflows.yaml_lines import read_yaml

jsonschema = pytest.importorskip("jsonschema")

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# Every project the tests and the README's demo use, in each dialect.
PROJECTS = sorted(
    [REPO, REPO / "tests" / "data" / "tui_project", *(REPO / "tests" / "fixtures" / "dialects").iterdir()],
    key=str,
)


def _validator(name: str) -> "jsonschema.Draft7Validator":
    schema = json.loads((DOCS / f"{name}.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _files(root: Path) -> tuple[Path, Path]:
    sub = root / (".lanpool" if (root / ".lanpool").is_dir() else ".dstack")
    return sub / "workflows.yaml", sub / "variables.yaml"


def _errors(name: str, document: object) -> list[str]:
    return [e.message for e in _validator(name).iter_errors(document)]


@pytest.mark.parametrize("root", PROJECTS, ids=lambda p: p.relative_to(REPO).as_posix() or "demo")
def test_the_schemas_accept_every_project_lanpool_reads(root):
    load_workflows(root)  # lanpool reads it...
    workflows, variables = _files(root)
    assert _errors("workflows", read_yaml(workflows)) == []  # ...and so does an editor
    if variables.is_file():
        assert _errors("variables", read_yaml(variables)) == []


def _doc_examples() -> list[tuple[str, str, str]]:
    """Every fenced yaml block of docs/*.md that is a workflow file, or entries of one
    (`  - name: ...`), with the variables block of the same page when it has one."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        blocks = [
            (m.group(1), text[: m.start()].count("\n") + 1) for m in re.finditer(r"```ya?ml\n(.*?)```", text, re.S)
        ]
        variables = next((b for b, _ in blocks if re.search(r"^variables:", b, re.M)), "")
        for block, line in blocks:
            if re.search(r"^workflows:", block, re.M):
                found.append((f"{page.name}:{line}", block, variables))
            elif re.match(r"\s*- name:", block):
                found.append((f"{page.name}:{line}", "workflows:\n" + block, variables))
    return found


DOC_EXAMPLES = _doc_examples()


def test_the_docs_have_workflow_examples():
    assert len(DOC_EXAMPLES) >= 5
    assert any("retry: {on: [failure, lost], limit: 3, delay: 30s}" in block for _, block, _ in DOC_EXAMPLES)


@pytest.mark.parametrize(("where", "block", "variables"), DOC_EXAMPLES, ids=[w for w, _, _ in DOC_EXAMPLES])
def test_every_workflow_example_in_the_docs_loads_and_validates(where, block, variables, tmp_path):
    """What the docs show is what a user copies: lanpool reads every workflow of it, as written,
    and the schema an editor validates with accepts it."""
    (tmp_path / ".lanpool").mkdir()
    (tmp_path / ".lanpool" / "workflows.yaml").write_text(block)
    if not variables:  # an excerpt: the variables it uses get a value
        names = sorted({n for n in variable_names_used(block) if not n.startswith(("secrets.", "run."))})
        variables = "variables:\n  global:\n" + "".join(f"    {n}: x\n" for n in names) if names else ""
    if variables:
        (tmp_path / ".lanpool" / "variables.yaml").write_text(variables)
    project = load_workflows(tmp_path)
    assert {name: e.message for name, e in project.refused.items()} == {}
    assert project.file_errors == []
    assert _errors("workflows", read_yaml(tmp_path / ".lanpool" / "workflows.yaml")) == []
    if variables:
        assert _errors("variables", read_yaml(tmp_path / ".lanpool" / "variables.yaml")) == []


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "t", "comands": ["echo"]},  # a typo'd key
        {"name": "t"},  # nothing to run
        {"name": "t", "commands": "echo hi"},  # a string, not a list
        {"name": "t", "commands": ["x"], "nodes": 0},
        {"name": "t", "commands": ["x"], "executor": "vm"},
        {"name": "t", "commands": ["x"], "artifacts": ["../outside"]},
        {"name": "t", "commands": ["x"], "resources": {"gpus": 1}},
        {"name": "t", "commands": ["x"], "env": {"1BAD": "x"}},
        {"name": "t" * 101, "commands": ["x"]},  # a name over 100 characters
        {"name": "t", "commands": ["x"], "hold_base": "maybe"},  # a boolean field: true/false, yes/no, on/off
    ],
)
def test_the_workflows_schema_refuses_what_lanpool_refuses(entry):
    assert _errors("workflows", {"workflows": [entry]})


@pytest.mark.parametrize(
    "document",
    [
        {"variables": {"train": {"lr": [1, 2]}}},  # a list value
        {"variables": {"train": {"-lr": 1}}},  # not a variable name
        {"variables": {"train": {"run_name": "x"}}},  # built in
        {"vars": {}},
    ],
)
def test_the_variables_schema_refuses_what_lanpool_refuses(document):
    assert _errors("variables", document)


def test_the_schema_knows_every_key_the_loader_knows():
    """A key added to app/workflows/entry.py without the schema would be flagged in every editor."""
    schema = json.loads((DOCS / "workflows.schema.json").read_text())
    workflow = schema["definitions"]["workflow"]["properties"]
    dialect_keys = {old for old, _ in ALIASES} | set(IGNORED_KEYS) | {"gpu", "deps"}
    assert set(WORKFLOW_KEYS) | dialect_keys == set(workflow)
    assert set(RESOURCE_KEYS) | set(IGNORED_RESOURCES) == set(workflow["resources"]["properties"])
    gpu_object = next(s for s in workflow["resources"]["properties"]["gpu"]["anyOf"] if s["type"] == "object")
    assert set(GPU_KEYS) == set(gpu_object["properties"])
