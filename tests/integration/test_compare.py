"""`app headless compare`: runs of one workflow with different variables, side by side, through
the real CLI on a real agent; the jobs log metrics to $LANPOOL_METRICS_FILE as any logger does.
The rows' rules: tests/unit/test_compare.py."""

import json

WORKFLOWS = """
workflows:
  - name: prepare
    commands: [echo prepared]
  - name: train
    depends-on: [prepare]
    commands:
      # val_loss = lr * 10 / k at step 100 k, k = 1..3; its last point is 0.1 above its best.
      - >-
        awk -v lr=${{ lr }} 'BEGIN { for (k = 1; k <= 3; k++) printf "{\\"step\\": %d, \\"name\\": \\"val_loss\\", \\"value\\": %g}\\n", 100 * k, lr * 10 / k;
        printf "{\\"step\\": 400, \\"name\\": \\"val_loss\\", \\"value\\": %g}\\n", lr * 10 / 3 + 0.1 }' >> "$LANPOOL_METRICS_FILE"
      - echo trained with ${{ lr }}
"""
VARIABLES = "variables:\n  train:\n    lr: 0.3\n    epochs: 2\n"


def _run(cli, project, agent, *variables: str) -> str:
    res = cli("headless", "run", "--runner", agent.address, "train", *variables, cwd=project, check=True)
    return next(line.split()[1].rstrip(":") for line in res.stderr.splitlines() if line.startswith("run "))


def test_compare_two_runs_by_their_best_val_loss(agent, cli, make_project):
    project = make_project(WORKFLOWS, files={".lanpool/variables.yaml": VARIABLES})
    slow = _run(cli, project, agent)  # lr 0.3 (the default)
    fast = _run(cli, project, agent, "--lr", "0.06")
    out = json.loads(cli("headless", "compare", slow, fast, "--sort", "val_loss", "--json", check=True).stdout)
    assert out["varying"] == ["lr"] and out["sort"] == "val_loss"
    rows = out["jobs"]
    assert [r["run"] for r in rows] == [fast, slow]  # best first; each run's `train` job only (not `prepare`)
    assert [r["workflow"] for r in rows] == ["train", "train"]
    assert [r["variables"]["lr"] for r in rows] == ["0.06", "0.3"]
    for row, lr in zip(rows, (0.06, 0.3), strict=True):
        loss = row["metrics"]["val_loss"]
        assert row["status"] == "DONE"
        assert loss["best_step"] == 300 and abs(loss["best"] - lr * 10 / 3) < 1e-4, loss
        assert loss["last_step"] == 400 and abs(loss["last"] - (lr * 10 / 3 + 0.1)) < 1e-4, loss
        assert loss["points"] == 4 and loss["mode"] == "min"

    table = cli("headless", "compare", slow, fast, check=True).stdout.splitlines()
    assert table[0].split()[:5] == ["RUN", "JOB", "lr", "STATUS", "DURATION"], table
    assert "val_loss (min)" in table[0] and "AT STEP" in table[0] and "LAST" in table[0]
    [row] = [line.split() for line in table[1:] if line.startswith(fast)]
    assert row[2:5] == ["0.06", "DONE", "(0)"] and row[-3:] == ["0.2", "300", "0.3"], row


def test_compare_says_what_is_wrong_in_one_line(agent, cli, make_project):
    project = make_project(WORKFLOWS, files={".lanpool/variables.yaml": VARIABLES})
    run = _run(cli, project, agent)
    res = cli("headless", "compare", run, "--metric", "val_acc")
    assert res.returncode == 4 and res.stdout == ""
    assert res.stderr.strip() == ("app: error: no job compared logged metric 'val_acc' (they logged: val_loss)"), (
        res.stderr
    )
    res = cli("headless", "compare", run, "no-such-run")
    assert res.returncode == 4 and len(res.stderr.strip().splitlines()) == 1 and "no-such-run" in res.stderr
    res = cli("headless", "compare", run, "--mode", "sideways")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    res = cli("headless", "compare")
    assert res.returncode == 2 and "RUN|JOB" in res.stderr
