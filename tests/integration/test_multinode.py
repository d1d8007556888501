"""Multi-node jobs on two real agents (loopback): Lightning DDP across nodes, tagged logs,
one failed node failing the job."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness import REPO, training_project, wait_stored_job


def _running_run(cli, timeout: float = 60) -> str:
    """The newest run, once its job is RUNNING (started by a `run` in another process, which keeps
    the store up to date: read here, not by polling `status` processes)."""
    home = Path(os.environ["LANPOOL_HOME"])  # the controller_home fixture's
    return wait_stored_job(home, lambda j: j["status"] == "RUNNING", "the 2-node job RUNNING", timeout)["run_name"]


@pytest.mark.slow
def test_two_nodes_train_the_autoencoder(two_agents, cli, tmp_path):
    project = training_project(
        tmp_path,
        """
workflows:
  - name: ae
    nodes: 2
    commands:
      - echo "rank $NODE_RANK of $LANPOOL_NUM_NODES, master $MASTER_ADDR:$MASTER_PORT, if $GLOO_SOCKET_IFNAME"
      - python -m training.autoencoder --max-epochs 2 --devices 1 --out ck
    artifacts: [ck]
""",
    )
    res = cli("headless", "run", "ae", cwd=project, timeout=240)
    assert res.returncode == 0, res.stderr
    assert "[node 0] rank 0 of 2, master 127.0.0.1:" in res.stdout and "if lo" in res.stdout
    assert "[node 1] rank 1 of 2" in res.stdout
    assert "[node 0] saved checkpoint to ck/autoencoder.ckpt" in res.stdout
    [latest] = json.loads(cli("headless", "status", "--json", check=True).stdout)
    run, [job] = latest["run"], latest["jobs"]
    assert job["status"] == "DONE" and [a["path"] for a in job["artifacts"]] == ["ck/autoencoder.ckpt"]
    node1 = cli("headless", "logs", run, "--node", "1", check=True).stdout
    assert "[node 1] rank 1 of 2" in node1 and "[node 0]" not in node1
    val = [
        p["value"]
        for p in json.loads(cli("headless", "metrics", run, "--json", check=True).stdout)
        if p["name"] == "val_loss"
    ]
    assert len(val) == 1 + 2 and val[-1] < val[0]  # the untrained model's (step 0), then one per epoch


def test_a_failing_node_fails_the_job_and_stops_the_others(two_agents, cli, tmp_path):
    project = training_project(
        tmp_path,
        """
workflows:
  - name: bad
    nodes: 2
    commands:
      - if [ "$NODE_RANK" = 1 ]; then echo dying; exit 3; fi
      - trap '' TERM
      - echo waiting; sleep 120
""",
    )
    t0 = time.time()
    res = cli("headless", "run", "bad", cwd=project, timeout=120)
    took = time.time() - t0
    assert res.returncode == 3, res.stderr
    assert took < 60, took
    assert "node 1 (node-1): exited with code 3; its runners stop the other nodes" in res.stderr
    [job] = json.loads(cli("headless", "status", "--json", check=True).stdout)[0]["jobs"]
    assert job["status"] == "FAILED" and "node 1" in job["error"]


def _pids_of_node(rank: int, agents) -> list[int]:
    """Trainers of node `rank` run by these agents (their workspace is under an agent's data
    dir): other suites on the machine may train the same recipe at the same time."""
    import os

    roots = tuple(str(a.data_dir.resolve()) + "/" for a in agents)

    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if not cwd.startswith(roots):
            continue
        if cmd.startswith(b"bwrap\0"):  # the job's sandbox, not the trainer (it carries the job's commands)
            continue
        if b"training.autoencoder" in cmd and f"LANPOOL_NODE_RANK={rank}".encode() in env:
            found.append(int(pid))
    return found


@pytest.mark.slow
def test_a_frozen_node_fails_the_job_within_a_minute(two_agents, cli, tmp_path):
    """SIGSTOP one node's trainer (a machine that vanished): its peer gives up after
    LANPOOL_DDP_TIMEOUT, and the frozen node is killed after the grace period."""
    import os
    import signal
    import subprocess

    project = training_project(
        tmp_path,
        """
workflows:
  - name: long
    nodes: 2
    env: {LANPOOL_DDP_TIMEOUT: 15}
    commands:
      - python -m training.autoencoder --max-epochs 500 --devices 1 --out ck
""",
    )
    proc = cli.popen("headless", "run", "long", cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cli.follow_until(_running_run(cli), "epoch 2", timeout=90)
    deadline = time.time() + 30
    while proc.poll() is None and not _pids_of_node(1, two_agents) and time.time() < deadline:
        time.sleep(0.2)
    frozen = _pids_of_node(1, two_agents)
    assert frozen, "node 1's trainer never started"
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    t0 = time.time()
    try:
        _out, err = proc.communicate(timeout=90)
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    took = time.time() - t0
    assert proc.returncode != 0
    assert took < 60, f"the job took {took:.0f}s to fail"
    [job] = json.loads(cli("headless", "status", "--json", check=True).stdout)[0]["jobs"]
    assert job["status"] == "FAILED" and "node" in job["error"]


@pytest.mark.slow
def test_resume_puts_the_checkpoint_on_every_node(two_agents, cli, tmp_path):
    project = training_project(
        tmp_path,
        """
workflows:
  - name: ae
    nodes: 2
    commands:
      - python -m training.autoencoder --max-epochs ${{ epochs }} --devices 1 --out ck
    artifacts: [ck]
""",
    )
    (project / ".lanpool" / "variables.yaml").write_text("variables:\n  ae:\n    epochs: 2\n")
    first = cli("headless", "run", "ae", cwd=project, timeout=240)
    assert first.returncode == 0, first.stderr
    run = json.loads(cli("headless", "status", "--json", check=True).stdout)[0]["run"]
    second = cli("headless", "run", "ae", "--epochs", "3", "--resume", run, cwd=project, timeout=240)
    assert second.returncode == 0, second.stderr
    assert "resuming from ck/autoencoder.ckpt" in second.stderr
    # Both nodes continue from epoch 2: only epoch 3 is trained.
    assert "[node 0] epoch 3 " in second.stdout and "epoch 1 " not in second.stdout
    bad = cli("headless", "run", "ae", "--resume", "no-such-run", cwd=project)
    assert bad.returncode == 4 and "no run or job named" in bad.stderr


def test_artifacts_of_every_node_come_back_under_node_k(two_agents, cli, tmp_path):
    project = training_project(
        tmp_path,
        """
workflows:
  - name: all
    nodes: 2
    commands:
      - mkdir -p out
      - echo "from node $NODE_RANK" > out/rank.txt
      - if [ "$NODE_RANK" = 0 ]; then mkdir -p ck && echo weights > ck/model.ckpt; fi
    artifacts:
      - ck
      - {path: out, nodes: all}
""",
    )
    res = cli("headless", "run", "all", cwd=project, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "3 artifact file(s)" in res.stderr
    run = json.loads(cli("headless", "status", "--json", check=True).stdout)[0]["run"]
    listed = cli("headless", "artifacts", "list", run, check=True).stdout.split()
    assert listed == ["ck/model.ckpt", "node-1/out/rank.txt", "out/rank.txt"]
    cli("headless", "artifacts", "download", run, "-o", str(tmp_path / "got"), check=True)
    assert (tmp_path / "got" / "out" / "rank.txt").read_text() == "from node 0\n"
    assert (tmp_path / "got" / "node-1" / "out" / "rank.txt").read_text() == "from node 1\n"
    assert (tmp_path / "got" / "ck" / "model.ckpt").read_text() == "weights\n"
    # Resuming takes node 0's checkpoint, never another node's copy.
    again = cli("headless", "run", "all", "--resume", run, cwd=project, timeout=120)
    assert again.returncode == 0 and "resuming from ck/model.ckpt" in again.stderr, again.stderr


def test_logs_follow_a_multinode_job_from_another_controller_process(two_agents, cli, tmp_path):
    """`logs -f` of a 2-node job started by another process follows both nodes (tagged,
    each line once, --node filters), and, once that `run` is killed, ends the job itself:
    final status recorded, every node's artifacts brought back."""
    import signal
    import subprocess

    project = training_project(
        tmp_path,
        """
workflows:
  - name: slow
    nodes: 2
    commands:
      - for i in 1 2 3 4 5 6 7 8 9 10; do echo "line $i of node $NODE_RANK"; sleep 0.4; done
      - mkdir -p out && echo "n$NODE_RANK" > out/r.txt
    artifacts: [{path: out, nodes: all}]
""",
    )
    runner = cli.popen("headless", "run", "slow", cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        run = _running_run(cli)
        both = cli.popen("headless", "logs", "-f", run, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        one = cli.popen(
            "headless", "logs", "-f", run, "--node", "1", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        time.sleep(1.5)
        runner.send_signal(signal.SIGKILL)  # the controller that started it is gone
        out_both, err_both = both.communicate(timeout=60)
        out_one, err_one = one.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
        runner.wait()
    assert both.returncode == 0, err_both
    assert one.returncode == 0, err_one
    for node in (0, 1):
        for i in range(1, 11):
            line = f"[node {node}] line {i} of node {node}\n"
            assert out_both.count(line) == 1, (line, out_both)
            assert out_one.count(line) == (1 if node == 1 else 0), (line, out_one)
    [job] = json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout)[0]["jobs"]
    assert job["status"] == "DONE" and job["exit_code"] == 0
    assert sorted(a["path"] for a in job["artifacts"]) == ["node-1/out/r.txt", "out/r.txt"]
    stored = cli("headless", "logs", run, check=True).stdout
    assert all(stored.count(f"[node {n}] line {i} of node {n}\n") == 1 for n in (0, 1) for i in range(1, 11))
    bad = cli("headless", "logs", run, "--node", "5", "-f")
    assert bad.returncode == 2 and bad.stderr.endswith("runs on 2 node(s): --node takes 0 to 1, not 5\n")
    assert bad.stderr.count("\n") == 1


def test_stop_stops_every_node_and_the_job_ends_stopped(two_agents, cli, tmp_path):
    """`stop RUN` of a 2-node job asks both runners at once; the job (and each node) ends
    STOPPED, not FAILED, and the `run` that followed it exits."""
    project = training_project(
        tmp_path,
        """
workflows:
  - name: long
    nodes: 2
    commands:
      - echo "node $NODE_RANK up"; sleep 120
""",
    )
    runner = cli.popen(
        "headless", "run", "long", cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        run = _running_run(cli)
        t0 = time.time()
        stopped = cli("headless", "stop", run, "--grace", "2", timeout=60)
        took = time.time() - t0
        out, err = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert stopped.returncode == 0, stopped.stderr
    assert "STOPPED" in stopped.stderr and took < 20, (stopped.stderr, took)
    assert "[node 0] node 0 up" in out and "[node 1] node 1 up" in out
    [job] = json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout)[0]["jobs"]
    assert job["status"] == "STOPPED", job
    from lanpool.app.home import ControllerHome
    from lanpool.app.store import Store

    store = Store(ControllerHome.default().db)
    try:
        assert [n["status"] for n in store.nodes(job["job"])] == ["STOPPED", "STOPPED"]
    finally:
        store.close()


@pytest.mark.slow
def test_two_nodes_train_the_char_gpt(two_agents, cli, tmp_path):
    """char-GPT DDP on two agents: both nodes' logs tagged, the loss falls (metrics in
    SQLite), the snapshot comes back and samples text."""
    from tests.system.test_training_chargpt import write_corpus

    project = training_project(
        tmp_path,
        """
workflows:
  - name: gpt
    nodes: 2
    env: {LANPOOL_DDP_TIMEOUT: 60}
    commands:
      - echo "node $NODE_RANK of $LANPOOL_NUM_NODES starts"
      - python -m training.chargpt train --data corpus.txt --out ck --max-steps 60 --log-every 10 --eval-every 30 --eval-batches 4 --snapshot-every 30 --block-size 32 --batch-size 16 --n-layer 2 --n-head 2 --n-embd 32 --lr 3e-3 --accelerator cpu --devices 1
    artifacts: [ck]
""",
    )
    write_corpus(project / "corpus.txt", 20_000)
    res = cli("headless", "run", "gpt", cwd=project, timeout=240)
    assert res.returncode == 0, res.stderr
    assert "[node 0] node 0 of 2 starts" in res.stdout and "[node 1] node 1 of 2 starts" in res.stdout
    assert "[node 0] step 60 train_loss" in res.stdout
    assert "[node 0] saved checkpoint to ck/snapshot.ckpt at step 60" in res.stdout
    [latest] = json.loads(cli("headless", "status", "--json", check=True).stdout)
    run, [job] = latest["run"], latest["jobs"]
    assert job["status"] == "DONE"
    assert {"ck/snapshot.ckpt", "ck/step-60.ckpt"} <= {a["path"] for a in job["artifacts"]}
    points = json.loads(cli("headless", "metrics", run, "--json", check=True).stdout)
    loss = [p["value"] for p in sorted(points, key=lambda p: p["step"]) if p["name"] == "train_loss"]
    assert len(loss) >= 6 and sum(loss[-3:]) / 3 < sum(loss[:3]) / 3 - 0.3, loss
    cli("headless", "artifacts", "download", run, "-o", str(tmp_path / "got"), check=True)
    sample = subprocess.run(
        [
            sys.executable,
            "-m",
            "training.chargpt",
            "sample",
            "--ckpt",
            str(tmp_path / "got" / "ck" / "snapshot.ckpt"),
            "--prompt",
            "ROMEO:",
            "--max-new-tokens",
            "40",
            "--seed",
            "1",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sample.returncode == 0 and sample.stdout.startswith("ROMEO:") and len(sample.stdout) > 40, sample.stderr
