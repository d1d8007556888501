"""The runner pool for real: mDNS on loopback (and across network namespaces when
root), pairing codes, liveness, host-key conflicts, GPU accounting and queueing.
The part with real agents and the CLI (integration); the rest: tests/system/test_pool.py."""

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import asyncssh

from lanpool.agent.ssh.mdns import Advertiser
from lanpool.app.runners.discovery import discover
from tests.harness import runners_seen, start_agent, stored_jobs, wait_discovered, wait_stored_job

ONE_JOB = "workflows:\n  - name: a\n    commands: [echo ran-a]\n"


def _agent_status(cli, data_dir: Path) -> dict:
    return json.loads(cli("agent", "status", "--data-dir", str(data_dir), "--json").stdout)


def test_discover_pair_and_run(tmp_path, controller_home, cli, make_project):
    a = start_agent(tmp_path / "a", controller_home, authorize=False, name="pool-a")
    try:
        code = _agent_status(cli, a.data_dir)["pairing_code"]
        assert code and len(code) == 9
        seen = wait_discovered(cli, "pool-a")
        assert seen["state"] == "UNPAIRED" and seen["source"] == "mdns" and seen["port"] == a.port

        wrong = cli("headless", "runners", "pair", "pool-a", "AAAA-BBBB")
        assert wrong.returncode == 3 and "could not prove the pairing code: wrong code" in wrong.stderr
        assert len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr
        ok = cli("headless", "runners", "pair", "pool-a", code.lower())  # case and dash do not matter
        assert ok.returncode == 0, ok.stderr
        assert "paired with runner pool-a" in ok.stderr
        assert runners_seen(cli)["pool-a"]["state"] == "LIVE"
        assert _agent_status(cli, a.data_dir)["pairing_code"] is None  # used once
        assert _agent_status(cli, a.data_dir)["authorized_controllers"] == 1

        project = make_project(ONE_JOB)
        res = cli("headless", "run", "a", "--runner", "pool-a", cwd=project)
        assert res.returncode == 0 and res.stdout == "ran-a\n", res.stderr
        # The only usable runner is chosen without --runner.
        assert cli("headless", "run", "a", cwd=project).returncode == 0
    finally:
        a.stop()


def test_expired_code_is_refused(tmp_path, controller_home, cli):
    a = start_agent(
        tmp_path / "a", controller_home, authorize=False, name="pool-exp", extra_args=("--pairing-ttl", "0.02")
    )  # 1.2 s
    try:
        # The code as the agent keeps it: `agent status` may come after it expired on a loaded
        # machine (and then says none), as may the banner that prints it.
        code = json.loads((a.data_dir / "pairing.json").read_text())["code"]
        time.sleep(1.5)
        res = cli("headless", "runners", "pair", a.address, code)
        assert res.returncode == 3 and "refused" in res.stderr
        assert _agent_status(cli, a.data_dir)["pairing_code"] is None
    finally:
        a.stop()


def test_guessing_codes_is_locked_out(tmp_path, controller_home, cli):
    a = start_agent(tmp_path / "a", controller_home, authorize=False, name="pool-bf")
    try:
        code = _agent_status(cli, a.data_dir)["pairing_code"]
        t0 = time.time()
        for guess in range(5):
            assert cli("headless", "runners", "pair", a.address, f"WRNG-{guess:04d}").returncode == 3
        assert time.time() - t0 >= 4, "each guess after a wrong one must cost at least a second"
        # Locked now: even the right code is refused until the lockout ends.
        locked = cli("headless", "runners", "pair", a.address, code)
        assert locked.returncode == 3
        log = a.log_path.read_text()
        assert "wrong pairing code" in log and "pairing locked" in log
    finally:
        a.stop()


def test_killed_agent_is_offline_within_10s_and_live_when_back(tmp_path, controller_home, cli, make_project):
    a = start_agent(tmp_path / "a", controller_home, name="pool-k")
    project = make_project(ONE_JOB)
    cli("headless", "run", "a", "--runner", a.address, cwd=project, check=True)
    assert runners_seen(cli)["pool-k"]["state"] == "LIVE"
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    t0 = time.time()
    assert runners_seen(cli)["pool-k"]["state"] == "OFFLINE"
    assert time.time() - t0 < 10
    b = start_agent(tmp_path / "a", controller_home, name="pool-k", port=a.port, authorize=False)
    try:
        assert runners_seen(cli)["pool-k"]["state"] == "LIVE"
    finally:
        b.stop()


def test_spoofed_advertisement_is_a_conflict_and_gets_no_job(tmp_path, controller_home, cli, make_project):
    a = start_agent(tmp_path / "a", controller_home, name="pool-s")
    project = make_project(ONE_JOB)
    cli("headless", "runners", "add", a.address, check=True)
    mallory = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()

    async def spoof() -> subprocess.CompletedProcess:
        fake = Advertiser("pool-s", 1, ["127.0.0.1"])
        await fake.start({"name": "pool-s", "hk": mallory, "gpus": "8"})
        try:
            await asyncio.to_thread(lambda: _wait_state(cli, "pool-s", "CONFLICT"))
            return await asyncio.to_thread(cli, "headless", "run", "a", "--runner", "pool-s", cwd=project)
        finally:
            await fake.close()

    try:
        res = asyncio.run(spoof())
        assert res.returncode == 2 and "conflict" in res.stderr
        assert not any(a.data_dir.joinpath("jobs").iterdir()), "no job may reach a runner in conflict"
        # The forger left: the conflict does not stick, and the pinned runner works again.
        _wait_state(cli, "pool-s", "LIVE")
        assert cli("headless", "run", "a", "--runner", "pool-s", cwd=project).returncode == 0
    finally:
        a.stop()


def _wait_state(cli, name: str, state: str, timeout: float = 45) -> None:  # each try: a CLI start and a 2 s browse
    deadline = time.time() + timeout
    while time.time() < deadline:
        if runners_seen(cli, wait=2).get(name, {}).get("state") == state:
            return
    raise AssertionError(f"{name} never became {state}")


GPU_JOBS = """
workflows:
  - name: hold
    resources: {gpu: 1}
    # Holds its GPU until the test releases it: a fixed sleep ran out before `next` was sent on a
    # CPU-burning machine (seen in CI under load: `next` found room and never queued).
    commands: ["echo CUDA=$CUDA_VISIBLE_DEVICES", "while [ ! -e release ]; do sleep 0.2; done"]
  - name: next
    resources: {gpu: 1}
    commands: ["echo CUDA=$CUDA_VISIBLE_DEVICES"]
  - name: huge
    resources: {gpu: 8}
    commands: ["echo never"]
"""


def test_gpus_free_follow_jobs_in_the_advertisement(tmp_path, controller_home, cli, make_project):
    a = start_agent(tmp_path / "a", controller_home, name="pool-g", extra_env={"LANPOOL_FAKE_GPUS": "0,1"})

    def release() -> None:  # a file in the job's workspace: a sandboxed job sees no other path of the host's
        for workspace in (tmp_path / "a" / "jobs").glob("*/workspace"):
            (workspace / "release").touch()

    try:
        # The job holds its GPU until the test releases it: `run -d` returns once the runner
        # accepted the job (it may not have started yet), and a busy machine may be slow.
        project = make_project(
            "workflows:\n  - name: hold\n    resources: {gpu: 1}\n"
            '    commands: ["while [ ! -e release ]; do sleep 0.2; done"]\n'
        )
        cli("headless", "run", "hold", "--runner", a.address, "-d", cwd=project, check=True)

        def free() -> str:
            adverts = asyncio.run(discover(["127.0.0.1"], 1.5))
            return next(x.props["gpus_free"] for x in adverts if x.name == "pool-g")

        deadline = time.time() + 30
        while free() != "1":
            assert time.time() < deadline, "the TXT record never showed the job's GPU taken"
        release()
        deadline = time.time() + 30
        while free() != "2":
            assert time.time() < deadline, "the TXT record never showed the GPU free again"
    finally:
        release()
        a.stop()


def test_queue_until_room_and_reject_what_never_fits(tmp_path, controller_home, cli, make_project):
    a = start_agent(tmp_path / "a", controller_home, name="pool-q", extra_env={"LANPOOL_FAKE_GPUS": "0"})
    try:
        project = make_project(GPU_JOBS)
        cli("headless", "runners", "add", a.address, check=True)
        huge = cli("headless", "run", "huge", cwd=project)
        assert huge.returncode == 2 and "needs 8 GPU" in huge.stderr and "has 1 GPU" in huge.stderr

        cli("headless", "run", "hold", "-d", cwd=project, check=True)
        waiting = cli.popen(
            "headless", "run", "next", cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        wait_stored_job(
            controller_home,
            lambda j: j["workflow"] == "next" and j["status"] == "QUEUED" and j["error"],
            "the second GPU job QUEUED, with the reason",
        )
        for workspace in (tmp_path / "a" / "jobs").glob("*/workspace"):
            (workspace / "release").touch()  # a file in the job's workspace: what a sandboxed job sees
        out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0, err
        # It waited in the runner's own queue, which said why.
        assert "on runner pool-q" in err and out.strip() == "CUDA=0", err
    finally:
        a.stop()


def test_follow_rides_out_a_frozen_runner(tmp_path, controller_home, cli, make_project):
    """A runner that stops answering (SIGSTOP: a frozen or unplugged machine) is shown
    offline while followed, and the log is picked up where it stopped when it returns."""
    a = start_agent(tmp_path / "a", controller_home, name="pool-f")
    try:
        project = make_project(
            "workflows:\n  - name: slow\n    commands:\n      - for i in $(seq 1 30); do echo tick-$i; sleep 1; done\n"
        )
        follower = cli.popen(
            "headless",
            "run",
            "slow",
            "--runner",
            a.address,
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Frozen once the job runs (a loaded machine may take more than seconds to send it).
        wait_stored_job(controller_home, lambda j: j["status"] == "RUNNING", "the job RUNNING")
        a.proc.send_signal(signal.SIGSTOP)
        t0 = time.time()
        status = {}
        while time.time() - t0 < 20:
            status = stored_jobs(controller_home)[0]
            if _runners_state_offline(cli):
                break
            time.sleep(1)
        noticed = time.time() - t0
        a.proc.send_signal(signal.SIGCONT)
        out, err = follower.communicate(timeout=90)
        assert follower.returncode == 0, err
        assert noticed < 16, f"offline noticed after {noticed:.1f}s"
        assert "went offline" in err and "re-attached" in err
        assert out.splitlines() == [f"tick-{i}" for i in range(1, 31)]
        assert status["status"] == "RUNNING"
    finally:
        a.proc.send_signal(signal.SIGCONT)
        a.stop()


def _runners_state_offline(cli) -> bool:
    import sqlite3

    db = sqlite3.connect(Path(os.environ["LANPOOL_HOME"]) / "lanpool.db")
    try:
        row = db.execute("SELECT state FROM runners WHERE name = 'pool-f'").fetchone()
    finally:
        db.close()
    return bool(row) and row[0] == "OFFLINE"


def test_stopped_agent_says_goodbye_over_mdns(tmp_path, controller_home):
    """SIGTERM unregisters the service, so browsers drop it at once (a killed one lingers ~19 min)."""
    from lanpool.app.runners.discovery import Browser

    async def scenario() -> float:
        seen, gone = asyncio.Event(), asyncio.Event()
        names: set[str] = set()

        def on_seen(advert):
            if advert.name == "pool-bye":
                names.add(advert.service)
                seen.set()

        browser = Browser(["127.0.0.1"], on_seen, lambda name: gone.set() if name in names else None)
        await browser.start()
        a = await asyncio.to_thread(start_agent, tmp_path / "a", controller_home, name="pool-bye")
        try:
            await asyncio.wait_for(seen.wait(), 10)
            t0 = time.time()
            await asyncio.to_thread(a.stop)
            await asyncio.wait_for(gone.wait(), 5)
            return time.time() - t0
        finally:
            await browser.close()

    assert asyncio.run(scenario()) < 5
