"""Training metrics travel from the job's metrics file to the controller's SQLite."""

import json

import pytest

from tests.harness import training_project


def test_metrics_lines_reach_the_store_and_stay_out_of_the_log(agent, cli, make_project):
    emit = (
        "echo start\n"
        "for i in 1 2 3; do\n"
        '  echo "{\\"step\\": $i, \\"name\\": \\"loss\\", \\"value\\": 0.$((9 - i))}" >> "$LANPOOL_METRICS_FILE"\n'
        "  sleep 0.6\n"
        "done\n"
        'printf \'{"step": 4, "name": "acc", "value": 0.5}\' >> "$LANPOOL_METRICS_FILE"\n'
        "echo end\n"
    )
    project = make_project("workflows:\n  - name: m\n    commands: [bash emit.sh]\n", files={"emit.sh": emit})
    res = cli("headless", "run", "m", "--runner", agent.address, cwd=project)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "start\nend\n"
    points = json.loads(cli("headless", "metrics", res.stderr.split()[1].rstrip(":"), "--json", check=True).stdout)
    assert [(p["step"], p["name"], p["value"]) for p in points] == [
        (1, "loss", 0.8),
        (2, "loss", 0.7),
        (3, "loss", 0.6),
        (4, "acc", 0.5),
    ]  # last line had no newline
    table = cli("headless", "metrics", res.stderr.split()[1].rstrip(":"), "--name", "loss", check=True).stdout
    assert "loss" in table and "acc" not in table

    # A name the job never logged (a typo) says which names it has, and fails.
    for extra in ((), ("--json",)):
        typo = cli("headless", "metrics", res.stderr.split()[1].rstrip(":"), "--name", "nosuch", *extra)
        assert typo.returncode == 4 and typo.stdout == "", typo.stdout
        assert len(typo.stderr.strip().splitlines()) == 1
        assert "no metric 'nosuch'" in typo.stderr and "its metrics: acc, loss" in typo.stderr


@pytest.mark.slow
def test_lightning_metrics_from_the_autoencoder(agent, cli, tmp_path):
    project = training_project(
        tmp_path,
        "workflows:\n  - name: ae\n    commands:\n"
        "      - python -m training.autoencoder --max-epochs 3 --devices 1 --out ck\n",
    )
    res = cli("headless", "run", "ae", "--runner", agent.address, cwd=project, timeout=240)
    assert res.returncode == 0, res.stderr
    run = res.stderr.split()[1].rstrip(":")
    points = json.loads(cli("headless", "metrics", run, "--json", check=True).stdout)
    val = [p["value"] for p in points if p["name"] == "val_loss"]
    train = [p for p in points if p["name"] == "train_loss"]
    assert len(val) == 1 + 3 and val[-1] < val[0]  # the untrained model's (step 0), then one per epoch
    assert train and [p["step"] for p in train] == sorted(p["step"] for p in train)
