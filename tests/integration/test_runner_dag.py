"""Detached DAGs: a runner holds a run's whole chain, starts each step when the
steps it waits for are DONE, stages their artifacts itself, and fails dependents of a
failed step. Real agents, real SSH; "no controller alive" = the CLI process has exited.
The part with real agents and the CLI (integration); the rest: tests/unit/test_runner_dag.py."""

import asyncio
import json
import time

import pytest

from lanpool.app.errors import RunnerError
from lanpool.protocol import SubmitJob
from tests.harness import start_agent
from tests.runner_jobs import across_restart, job_log, jobs_by, open_session, runner, wait_state

_ = runner  # a fixture from runner_jobs: the tests name it

KEY = "k" * 32


def _step(job_id: str, command: str, after: list[str] | None = None, key: str = KEY, **extra) -> SubmitJob:
    return SubmitJob(job_id, "r", job_id, [command], after=after or [], run_key=key, **extra)


def test_a_chain_runs_in_order_with_each_steps_artifacts_staged_for_the_next(runner):
    async def go():
        async with await open_session(runner) as s:
            await s.submit(_step("prep", "sleep 0.5; mkdir -p out; echo data > out/a.txt", artifacts=["out"]))
            train = await s.submit(
                _step(
                    "train", "cat out/a.txt > model.txt; echo trained >> model.txt", ["prep"], artifacts=["model.txt"]
                )
            )
            evalj = await s.submit(_step("eval", "cat model.txt", ["train"]))
            assert train.state == "QUEUED" and "waiting for prep" in train.reason, train.reason
            assert evalj.state == "QUEUED" and "waiting for train" in evalj.reason
            end = await wait_state(s, "eval", {"DONE", "FAILED"})
            assert end.state == "DONE", end.error
            ends = {n: await s.status(n) for n in ("prep", "train")}
            assert ends["prep"].finished_at <= ends["train"].started_at <= ends["train"].finished_at <= end.started_at
            log = await job_log(s, "eval")
            assert "data\ntrained" in log, log

    asyncio.run(go())


def test_a_failed_step_fails_its_dependents_with_the_reason(runner):
    async def go():
        async with await open_session(runner) as s:
            await s.submit(_step("prep", "sleep 0.3; exit 3"))
            await s.submit(_step("train", "echo must not run", ["prep"], retry_on=["failure"], retry_limit=2))
            await s.submit(_step("eval", "echo must not run", ["train"]))
            train = await wait_state(s, "train", {"DONE", "FAILED"})
            evalj = await wait_state(s, "eval", {"DONE", "FAILED"})
            assert train.state == "FAILED" and train.error == "dependency prep (prep) failed", train.error
            assert evalj.state == "FAILED" and evalj.error == "dependency train (train) failed"
            assert train.started_at is None and "must not run" not in await job_log(s, "train")

    asyncio.run(go())


def test_after_naming_a_missing_job_itself_or_another_runs_job_is_refused(runner):
    async def go():
        async with await open_session(runner) as s:
            await s.submit(_step("theirs", "sleep 5", key="another controller's run key"))
            with pytest.raises(RunnerError, match="not part of this run"):
                await s.submit(_step("mine", "echo steal", ["theirs"]))
            with pytest.raises(RunnerError, match="no job ghost on this runner"):
                await s.submit(_step("mine2", "echo x", ["ghost"]))
            with pytest.raises(RunnerError, match="cannot wait for itself"):
                await s.submit(_step("loop", "echo x", ["loop"]))
            # A cycle a -> b -> a cannot be built: b does not exist when a names it.
            with pytest.raises(RunnerError, match="no job b on this runner"):
                await s.submit(_step("a", "echo a", ["b"]))
            with pytest.raises(RunnerError, match="needs its run's key"):
                await s.submit(_step("nokey", "echo x", ["theirs"], key=""))

    asyncio.run(go())


def test_the_run_key_is_never_kept_in_clear(runner, tmp_path):
    async def go():
        async with await open_session(runner) as s:
            await s.submit(_step("a", "sleep 3"))
            await s.submit(_step("b", "echo b", ["a"]))

    asyncio.run(go())
    texts = [p.read_text() for p in (tmp_path / "agent").rglob("*.json")]
    assert texts and not any(KEY in t for t in texts)


def test_a_dag_keeps_its_order_across_an_agent_restart(tmp_path, controller_home):
    async def submit(a):
        async with await open_session(a) as s:
            await s.submit(_step("hold", "sleep 30", resources={"cpu": 2}))
            # Every step waits behind `hold` (a CPU each): nothing of the chain has run at the restart.
            one = await s.submit(_step("one", "echo 1 > one.txt", artifacts=["one.txt"], resources={"cpu": 1}))
            assert one.state == "QUEUED"
            await s.submit(_step("two", "cat one.txt; echo 2", ["one"]))
            await s.submit(_step("three", "echo 3", ["two"]))

    async def after_restart(b):
        async with await open_session(b) as s:
            ends = {n: await wait_state(s, n, {"DONE", "FAILED"}) for n in ("one", "two", "three")}
            assert all(e.state == "DONE" for e in ends.values()), {n: e.error for n, e in ends.items()}
            assert ends["one"].finished_at <= ends["two"].started_at
            assert ends["two"].finished_at <= ends["three"].started_at
            assert "1\n2" in await job_log(s, "two")

    across_restart(tmp_path / "agent", controller_home, submit, after_restart)


DAG = """
workflows:
  - name: prep
    commands: ["sleep 1", "mkdir -p out", "echo prepared > out/data.txt"]
    artifacts: [out]
  - name: train
    depends-on: [prep]
    commands: ["cat out/data.txt > model.txt", "echo trained >> model.txt"]
    artifacts: [model.txt]
  - name: evaluate
    depends-on: [train]
    commands: ["cat model.txt", "echo evaluated"]
  - name: broken
    commands: ["exit 4"]
  - name: after-broken
    depends-on: [broken]
    commands: ["echo must not run"]
"""


def _wait_cli(cli, workflow: str, timeout: float = 60) -> dict[str, dict]:
    deadline = time.time() + timeout
    while (jobs := jobs_by(cli, "workflow")).get(workflow, {}).get("status") not in ("DONE", "FAILED"):
        assert time.time() < deadline, jobs
        time.sleep(0.5)
    return jobs


def test_a_detached_three_step_dag_finishes_with_no_controller_alive(runner, cli, make_project):
    project = make_project(DAG)
    cli("headless", "runners", "add", runner.address, check=True)
    out = cli("headless", "run", "evaluate", "-d", "--json", cwd=project, check=True)
    sent = json.loads(out.stdout)["jobs"]
    assert [j["workflow"] for j in sent] == ["prep", "train", "evaluate"]
    assert "sent the whole chain" in out.stderr, out.stderr
    jobs = _wait_cli(cli, "evaluate")  # the run process has exited: the runner does the rest
    assert jobs["evaluate"]["status"] == "DONE", jobs
    log = cli("headless", "logs", sent[-1]["job_id"], check=True).stdout
    assert "prepared\ntrained" in log and "evaluated" in log, log
    # Again: the steps it depends on are reused (not resent), the one asked for runs again.
    again = cli("headless", "run", "evaluate", "-d", "--json", cwd=project, check=True)
    resent = json.loads(again.stdout)["jobs"]
    assert [j["workflow"] for j in resent] == ["evaluate"] and "train: reusing job" in again.stderr
    while jobs_by(cli, "workflow")["evaluate"]["status"] not in ("DONE", "FAILED"):
        time.sleep(0.5)
    log = cli("headless", "logs", resent[0]["job_id"], check=True).stdout
    assert "prepared\ntrained" in log, log


def test_a_detached_dag_whose_step_fails_fails_its_dependents(runner, cli, make_project):
    project = make_project(DAG)
    cli("headless", "runners", "add", runner.address, check=True)
    cli("headless", "run", "after-broken", "-d", cwd=project, check=True)
    jobs = _wait_cli(cli, "after-broken")
    assert jobs["broken"]["status"] == "FAILED"
    assert jobs["after-broken"]["status"] == "FAILED"
    assert "dependency" in jobs["after-broken"]["error"] and "failed" in jobs["after-broken"]["error"], jobs


SPLIT = """
workflows:
  - name: prep
    resources: {cpu: 2}
    commands: ["echo prepared > data.txt"]
    artifacts: [data.txt]
  - name: train
    depends-on: [prep]
    resources: {gpu: 1}
    commands: ["cat data.txt", "echo trained"]
"""


def test_a_detached_dag_that_no_one_runner_fits_is_refused_in_one_line_and_runs_followed(
    tmp_path, controller_home, cli, make_project
):
    """`run -d` never quietly becomes a followed run: it is refused, naming the steps' needs and
    what to do; the same run without -d places each step on a runner that fits it."""
    cpu = start_agent(tmp_path / "cpu", controller_home, name="cpu-box", extra_env={"LANPOOL_FAKE_CPUS": "2"})
    gpu = start_agent(
        tmp_path / "gpu",
        controller_home,
        name="gpu-box",
        extra_env={"LANPOOL_FAKE_CPUS": "1", "LANPOOL_FAKE_GPUS": "0"},
    )
    try:
        for agent in (cpu, gpu):
            cli("headless", "runners", "add", agent.address, check=True)
        project = make_project(SPLIT)
        refused = cli("headless", "run", "train", "-d", cwd=project)
        assert refused.returncode == 2, (refused.returncode, refused.stderr)
        [line] = refused.stderr.strip().splitlines()
        assert "cannot detach train" in line and "train needs 1 GPU" in line and "prep needs 2 CPU" in line, line
        assert "without -d" in line and "Traceback" not in refused.stderr
        runs = json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout)
        assert all(not r["jobs"] for r in runs), runs  # nothing was sent
        out = cli("headless", "run", "train", cwd=project, check=True)
        assert "prepared" in out.stdout + out.stderr and "trained" in out.stdout + out.stderr
        assert {j["runner"] for j in jobs_by(cli, "workflow").values()} == {"cpu-box", "gpu-box"}
    finally:
        cpu.stop()
        gpu.stop()
