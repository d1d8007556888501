"""The whole workflow file format through load_workflows, in `.lanpool/` and `.dstack/`
layouts, and the errors it reports (file:line, and exit code 2 through the CLI).
The part with real agents and the CLI (integration); the rest: tests/unit/test_workflows_format.py."""

from lanpool.app.errors import ExitCode


def _one_line_error(result, where: str) -> str:
    assert result.returncode == ExitCode.USAGE, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert where in lines[0] and "Traceback" not in result.stderr
    return lines[0]


def test_cli_unknown_key(cli, make_project):
    root = make_project("""\
        workflows:
          - name: train
            comands: [echo]
        """)
    line = _one_line_error(cli("headless", "plan", "train", cwd=root), ".lanpool/workflows.yaml:3: ")
    assert "did you mean 'commands'" in line


def test_cli_cycle(cli, make_project):
    root = make_project(
        "workflows:\n"
        "  - name: a\n    commands: [x]\n    depends-on: [b]\n"
        "  - name: b\n    commands: [x]\n    depends-on: [c]\n"
        "  - name: c\n    commands: [x]\n    depends-on: [a]\n"
    )
    line = _one_line_error(cli("headless", "run", "c", cwd=root), ".lanpool/workflows.yaml:10: ")
    assert "c -> a -> b -> c" in line


def test_cli_malformed_variables(cli, make_project):
    root = make_project(
        "workflows:\n  - name: a\n    commands: [echo $x]\n",
        files={".lanpool/variables.yaml": "variables:\n  global:\n    x: 'unclosed\n"},
    )
    line = _one_line_error(cli("headless", "run", cwd=root), ".lanpool/variables.yaml:")
    assert "malformed YAML" in line


def test_one_wording_for_a_dependency_with_no_finished_job_yet(cli, make_project):
    root = make_project(
        "workflows:\n"
        "  - name: a\n    commands: [x]\n"
        "  - name: latest\n    commands: [x]\n    depends-on: ['a:latest']\n"
        "  - name: tagged\n    commands: [x]\n    depends-on: ['a:v1']\n"
        "  - name: any-tag\n    commands: [x]\n    deps: [{tag: v2}]\n"
    )
    expected = {
        "latest": "'a' (in this project) has no finished job yet: run `app headless run a` first",
        "tagged": "'a' tagged 'v1' has no finished job yet: run `app headless run a --tag v1` first",
        "any-tag": "that tag has no finished job yet: run `app headless run WORKFLOW --tag v2` first",
    }
    for name, words in expected.items():
        res = cli("headless", "plan", name, cwd=root)
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and words in res.stderr, (name, res.stderr)
