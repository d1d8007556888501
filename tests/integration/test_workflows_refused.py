"""One refused workflow never blocks the rest (app/workflows/loader.py), and every layout dstack
used: `.lanpool/` or `.dstack/`, `workflows.yaml` and `workflows/*.yaml`. Loaded in-process, then
listed, `--help`ed, planned and run through the real CLI on a real agent.
The part with real agents and the CLI (integration); the rest: tests/unit/test_workflows_refused.py."""

import json

from tests.harness import write_project
from tests.unit.test_workflows_refused import MIXED, _write


def test_the_cli_lists_plans_and_runs_the_good_workflows_of_a_file_with_bad_ones(tmp_path, agent, cli):
    root = write_project(tmp_path / "p", MIXED)
    listing = cli("headless", "run", cwd=root, check=True).stdout
    assert "prepare" in listing and "report" in listing, listing
    [hosted] = [line for line in listing.splitlines() if line.split()[:1] == ["hosted"]]
    assert "refused: " in hosted and "workflows.yaml:12: " in hosted, listing
    rows = {w["name"]: w for w in json.loads(cli("headless", "run", "--json", cwd=root, check=True).stdout)}
    assert rows["train"].get("refused") is None and "/opt/conda" in rows["hosted"]["refused"], rows
    helped = cli("headless", "run", "train", "--help", cwd=root, check=True).stdout
    assert "usage: app headless run [options] train" in helped
    assert cli("headless", "plan", "train", cwd=root, check=True).returncode == 0
    refused = cli("headless", "run", "hosted", cwd=root)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "workflows.yaml:12: " in refused.stderr
    ran = cli("headless", "run", "train", "--runner", agent.address, cwd=root, timeout=120)
    assert ran.returncode == 0 and "n=42" in ran.stdout, (ran.stdout, ran.stderr)


RUN_ARGS = """
workflows:
  - name: train
    provider: bash
    commands:
      - python show.py ${{ run.args }}
  - name: plain
    commands: [echo plain]
"""


def test_run_args_are_the_words_after_the_name_and_stay_words(tmp_path, agent, cli):
    """dstack 2022's `${{ run.args }}`: every word after the workflow name that is not a variable
    or a lanpool option, in order, each one argument to the job (never shell code)."""
    root = write_project(tmp_path / "p", RUN_ARGS, files={"show.py": "import sys\nprint('argv', sys.argv[1:])\n"})
    res = cli(
        "headless",
        "run",
        "train",
        "--epochs",
        "3",
        "two words",
        "$(echo pwned)",
        "--runner",
        agent.address,
        cwd=root,
        timeout=120,
    )
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert "argv ['--epochs', '3', 'two words', '$(echo pwned)']" in res.stdout, res.stdout
    # a workflow that takes none still refuses what it does not know
    refused = cli("headless", "run", "plain", "--epochs", "3", cwd=root)
    assert refused.returncode == 2 and "unknown variable --epochs for 'plain'" in refused.stderr, refused.stderr


def test_a_two_file_dstack_folder_lists_plans_and_runs(tmp_path, agent, cli):
    root = tmp_path / "p"
    _write(
        root,
        ".dstack/workflows/data.yaml",
        "workflows:\n  - name: prepare\n    commands: [mkdir -p d, echo 7 > d/n]\n    artifacts: [d]\n",
    )
    _write(
        root,
        ".dstack/workflows/train.yaml",
        "workflows:\n  - name: train\n    help: uses prepare's d\n    depends-on: [prepare]\n"
        "    commands: ['echo \"n=$(cat d/n) lr=${{ lr }}\"']\n",
    )
    _write(root, ".dstack/variables.yaml", "variables:\n  train:\n    lr: 0.1\n")
    listing = cli("headless", "run", cwd=root, check=True).stdout
    assert listing.startswith(f"workflows in {root / '.dstack' / 'workflows'}:") and "uses prepare's d" in listing
    assert "--lr" in cli("headless", "run", "train", "--help", cwd=root, check=True).stdout
    assert cli("headless", "plan", "train", cwd=root, check=True).returncode == 0
    ran = cli("headless", "run", "train", "--lr", "0.5", "--runner", agent.address, cwd=root, timeout=120)
    assert ran.returncode == 0 and "n=7 lr=0.5" in ran.stdout, (ran.stdout, ran.stderr)
