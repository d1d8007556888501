"""A `nodes: 2` workflow through the controller (`app headless run`) to a Slurm runner: ONE job
there (one Slurm allocation on the private two-node cluster of scripts/slurm), its node
lines tagged as on the LAN, its checkpoint back with `artifacts download`; one failing
node fails the job. Needs root (the cluster), skipped with the reason otherwise."""

import json
import sys
import time

import pytest

from tests import test_slurm_executor as ex
from tests.harness import training_project

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
      - if [ "$NODE_RANK" = 1 ]; then echo "node 1 fails"; exit 7; fi
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
    # One node to the controller, but its 2 Slurm nodes are what status and logs --node speak of
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
