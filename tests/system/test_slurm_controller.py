"""A `nodes: 2` workflow through the controller (`app headless run`) to a Slurm runner: ONE job
there (one Slurm allocation on the private two-node cluster of scripts/slurm), its node
lines tagged as on the LAN, its checkpoint back with `artifacts download`; one failing
node fails the job. To the controller it has two nodes like any gang: `logs --node`, `exec
--node` (a step on that Slurm node) and the TUI's node switch. Needs root (the cluster),
skipped with the reason otherwise."""

import asyncio
import json
import sys
import time

import pytest

from lanpool.app.tui.app import LanpoolApp
from lanpool.app.tui.widgets.log_view import LogView
from tests.harness import training_project
from tests.integration.test_tui import label_text, rows
from tests.system import test_slurm_executor as ex
from tests.unit.test_tui import recording, wait_until

# the executor tests' fixtures (the cluster, an agent on it)
slurm_cluster = ex.slurm_cluster
slurm_agent = ex.slurm_agent


@pytest.fixture
def paired(slurm_agent, cli):
    cli("headless", "runners", "add", slurm_agent.address, check=True)
    return slurm_agent


@pytest.mark.slow
def test_a_two_node_workflow_is_one_slurm_job_and_its_checkpoint_comes_back(paired, cli, tmp_path):
    project = training_project(
        tmp_path,
        f"""
workflows:
  - name: ae
    nodes: 2
    commands:
      - echo "rank $NODE_RANK of $LANPOOL_NUM_NODES, master $MASTER_ADDR:$MASTER_PORT"
      - {sys.executable} -m training.autoencoder --max-epochs 1 --devices 1 --out ck
    artifacts: [ck]
""",
    )
    res = cli("headless", "run", "ae", cwd=project, timeout=300)
    assert res.returncode == 0, (res.stdout[-3000:], res.stderr[-2000:])
    assert "its 2 nodes run as one Slurm job on runner slurm-runner" in res.stderr, res.stderr
    assert "[node 0] rank 0 of 2, master n1:" in res.stdout and "[node 1] rank 1 of 2, master n1:" in res.stdout
    [latest] = json.loads(cli("headless", "status", "--json", check=True).stdout)
    run, [job] = latest["run"], latest["jobs"]
    assert job["status"] == "DONE" and job["runner"] == "slurm-runner", job
    assert [a["path"] for a in job["artifacts"]] == ["ck/autoencoder.ckpt"], job
    cli("headless", "artifacts", "download", run, "-o", str(tmp_path / "got"), check=True)
    assert (tmp_path / "got" / "ck" / "autoencoder.ckpt").stat().st_size > 0


def test_one_failing_node_fails_the_slurm_job(paired, cli, tmp_path):
    project = training_project(
        tmp_path,
        """
workflows:
  - name: ff
    nodes: 2
    commands:
      - echo "up $NODE_RANK"
      - if [ "$NODE_RANK" = 0 ]; then touch node0-is-up; fi
      # Node 1 fails once node 0 is up (the test cluster's nodes share this machine's files): failing
      # at once, a loaded machine's srun killed node 0 before its first line (seen in CI).
      - if [ "$NODE_RANK" = 1 ]; then while [ ! -e node0-is-up ]; do sleep 0.2; done; echo "node 1 fails"; exit 7; fi
      - sleep 120
""",
    )
    t0 = time.time()
    res = cli("headless", "run", "ff", cwd=project, timeout=150)
    took = time.time() - t0
    assert res.returncode != 0, res.stdout
    assert "[node 1] node 1 fails" in res.stdout, res.stdout
    [latest] = json.loads(cli("headless", "status", "--json", check=True).stdout)
    [job] = latest["jobs"]
    assert job["status"] == "FAILED", job
    assert took < 90, took  # node 0's sleep was ended, not waited out
    # One job on the runner, two nodes here: status and logs --node speak of them
    assert job["slurm_nodes"] == 2, job
    assert "slurm-runner (2 nodes, slurm)" in cli("headless", "status", check=True).stdout
    one = cli("headless", "logs", job["job"], "--node", "1", check=True).stdout
    assert "[node 1] up 1" in one and "[node 1] node 1 fails" in one and "[node 0]" not in one, one
    zero = cli("headless", "logs", job["job"], "--node", "0", "--tail", "9", check=True)
    assert "[node 0] up 0" in zero.stdout and "[node 1]" not in zero.stdout + zero.stderr, (zero.stdout, zero.stderr)
    bad = cli("headless", "logs", job["job"], "--node", "2")
    assert bad.returncode != 0 and "--node takes 0 to 1, not 2" in bad.stderr and "Traceback" not in bad.stderr


def test_a_slurm_runner_too_small_for_the_nodes_is_not_chosen(paired, cli, tmp_path):
    project = training_project(
        tmp_path,
        """
workflows:
  - name: big
    nodes: 3
    commands: [echo never]
""",
    )
    res = cli("headless", "run", "big", cwd=project, timeout=60)
    assert res.returncode != 0 and "never" not in res.stdout
    assert "needs 3 runners" in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_a_runner_named_by_address_takes_a_multi_node_job_as_a_known_name_does(slurm_agent, cli, tmp_path):
    project = training_project(
        tmp_path,
        """
workflows:
  - name: two
    nodes: 2
    commands: ['echo "hello from $NODE_RANK"']
""",
    )
    res = cli("headless", "run", "two", "--runner", slurm_agent.address, cwd=project, timeout=120)
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-2000:])
    assert "its 2 nodes run as one Slurm job on runner slurm-runner" in res.stderr, res.stderr
    assert "[node 0] hello from 0" in res.stdout and "[node 1] hello from 1" in res.stdout, res.stdout
    [latest] = json.loads(cli("headless", "status", "--json", check=True).stdout)
    [job] = latest["jobs"]
    assert job["runner"] == "slurm-runner" and job["slurm_nodes"] == 2, job


def test_a_slurm_jobs_nodes_are_nodes_for_exec_logs_and_the_tui(paired, cli, tmp_path):
    project = training_project(
        tmp_path,
        """
workflows:
  - name: hold
    nodes: 2
    commands:
      - echo "up $NODE_RANK on $(hostname)"
      - sleep 300
""",
    )
    res = cli("headless", "run", "hold", "-d", "--json", cwd=project, timeout=60, check=True)
    [submitted] = json.loads(res.stdout.strip().splitlines()[-1])["jobs"]
    job_id = submitted["job_id"]
    try:
        deadline = time.time() + 60  # Slurm may keep it pending a moment (QUEUED)
        while json.loads(cli("headless", "status", "--json", check=True).stdout)[0]["jobs"][0]["status"] != "RUNNING":
            assert time.time() < deadline, cli("headless", "status").stdout
            time.sleep(0.5)
        # exec --node K: a step of the job's own allocation on its node K (scripts/slurm names them n1, n2)
        probe = 'echo "$(hostname) $NODE_RANK $LANPOOL_JOB_ID $(basename $PWD)"'
        one = cli("headless", "exec", job_id, "--node", "1", "--", "sh", "-c", probe, timeout=60, check=True)
        assert one.stdout.split() == ["n2", "1", job_id, "workspace"], (one.stdout, one.stderr)
        zero = cli("headless", "exec", job_id, "--", "sh", "-c", probe, timeout=60, check=True)
        assert zero.stdout.split() == ["n1", "0", job_id, "workspace"], (zero.stdout, zero.stderr)
        failed = cli("headless", "exec", job_id, "--node", "1", "--", "sh", "-c", "echo out; exit 7", timeout=60)
        assert failed.returncode == 7 and failed.stdout == "out\n", (failed.returncode, failed.stdout, failed.stderr)
        past = cli("headless", "exec", job_id, "--node", "2", "--", "true", timeout=60)
        assert past.returncode != 0 and "--node takes 0 to 1" in past.stderr, past.stderr
        assert "Traceback" not in past.stderr
        # each node's own lines, as a LAN gang's
        deadline = time.time() + 30
        while "[node 1] up 1 on n2" not in (lines := cli("headless", "logs", job_id, "--node", "1").stdout):
            assert time.time() < deadline, (
                lines,
                cli("headless", "logs", job_id).stdout,
                cli("headless", "status").stdout,
            )
            time.sleep(0.5)
        assert "[node 0]" not in lines, lines
        assert "[node 0] up 0 on n1" in cli("headless", "logs", job_id, "--node", "0", check=True).stdout
        everything = cli("headless", "logs", job_id, check=True).stdout
        assert "[node 0] up 0 on n1" in everything and "[node 1] up 1 on n2" in everything, everything
        asyncio.run(_tui_switches_nodes(project, job_id))
    finally:
        cli("headless", "stop", job_id, "--abort", timeout=60)


async def _tui_switches_nodes(project, job_id: str) -> None:
    """The TUI's node switch (] and [) on the Slurm job: one node's lines, then the other's."""
    app = recording(LanpoolApp(project_dir=project, discover=False))
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_until(pilot, lambda: job_id in rows(app, "runs-table"), "the job in Runs")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.job_id == job_id, "the job's log")

        def shown() -> list[str]:
            return [line.text for line in app.query_one(LogView).lines if line.stream == "out"]

        await wait_until(pilot, lambda: "[node 1] up 1 on n2" in shown(), "both nodes' lines")
        await pilot.press("right_square_bracket")
        await wait_until(pilot, lambda: "node 0" in label_text(app, "#log-header"), "node 0 chosen")
        assert shown() == ["[node 0] up 0 on n1"], shown()
        await pilot.press("right_square_bracket")
        await wait_until(pilot, lambda: "node 1" in label_text(app, "#log-header"), "node 1 chosen")
        assert shown() == ["[node 1] up 1 on n2"], shown()
