"""The runner's own queue: jobs that fit the runner but not what is free now
wait there, journalled, and start when room frees, with no controller alive; stop on a
queued job; max_duration and retry kept by the runner. Real agents, real SSH.
The part with real agents and the CLI (integration); the rest: tests/unit/test_runner_queue.py."""

import asyncio
import json
import time

import pytest

from lanpool.app.errors import RunnerError
from lanpool.protocol import ErrorCode, SubmitJob
from tests.runner_jobs import across_restart, job_log, jobs_by, open_session, runner, wait_state

_ = runner  # a fixture from runner_jobs: the tests name it


def _job(job_id: str, command: str, cpu: int | None = 2, **extra) -> SubmitJob:
    resources = {"cpu": cpu} if cpu else {}
    return SubmitJob(job_id, "r", "w", [command], resources=resources, **extra)


def test_a_job_that_does_not_fit_now_is_queued_and_starts_when_room_frees(runner):
    async def go():
        async with await open_session(runner) as s:
            first = await s.submit(_job("first", "sleep 1.5; echo first done"))
            second = await s.submit(_job("second", "echo second ran"))
            assert first.state == "RUNNING"
            assert second.state == "QUEUED" and second.position == 1
            # What it waits for, and whose job holds it (its label: the key's comment; agent/jobs/turns.py).
            assert second.reason.startswith("waiting for 2 CPU: 0 of 2 free; held by lanpool-controller (w, 2 CPU, "), (
                second.reason
            )
            end = await wait_state(s, "second", {"DONE", "FAILED"})
            done_first = await s.status("first")
            assert end.state == "DONE"
            assert end.started_at >= done_first.finished_at, "the two jobs must never run at once"
            assert end.started_at - done_first.finished_at < 2, "the hand-over is immediate"
            assert "second ran" in await job_log(s, "second")

    asyncio.run(go())


def test_backfill_never_delays_the_head(runner):
    async def go():
        async with await open_session(runner) as s:
            await s.submit(_job("holder", "sleep 2", cpu=1))
            head = await s.submit(_job("head", "sleep 1", cpu=2))
            small = await s.submit(_job("small", "echo small", cpu=1))
            free = await s.submit(_job("free", "echo free", cpu=None))
            assert head.state == "QUEUED" and head.position == 1
            # One CPU is free, but the head needs both: the small job waits behind it.
            assert small.state == "QUEUED" and small.position == 2 and "1 job ahead" in small.reason
            assert free.state in ("RUNNING", "DONE"), "a job that asks for nothing takes nothing from the head"
            small_end = await wait_state(s, "small", {"DONE"})
            head_end = await wait_state(s, "head", {"DONE"})
            assert small_end.started_at >= head_end.started_at

    asyncio.run(go())


def test_a_job_that_can_never_fit_is_refused_at_submit(runner):
    async def go():
        async with await open_session(runner) as s:
            with pytest.raises(RunnerError, match="needs 3 CPU and this runner has 2 in all: it can never run here"):
                await s.submit(_job("huge", "echo never", cpu=3))

    asyncio.run(go())


def test_stop_on_a_queued_job_removes_it_from_the_queue(runner):
    async def go():
        async with await open_session(runner) as s:
            await s.submit(_job("hold", "sleep 3"))
            await s.submit(_job("gone", "echo must not run"))
            await s.submit(_job("after", "echo after ran"))
            stopped = await s.stop("gone", abort=False, grace_s=None)
            assert stopped.state == "STOPPED" and stopped.error == "cancelled while queued"
            after = await s.status("after")
            assert after.state == "QUEUED" and after.position == 1
            await wait_state(s, "after", {"DONE"})
            assert "must not run" not in await job_log(s, "gone")
            assert (await s.status("gone")).started_at is None

    asyncio.run(go())


def test_the_queue_and_its_order_survive_an_agent_restart(tmp_path, controller_home):
    async def submit(a):
        async with await open_session(a) as s:
            await s.submit(_job("a", "sleep 30"))
            for name in ("b", "c", "d"):
                assert (await s.submit(_job(name, f"sleep 0.3; echo {name}"))).state == "QUEUED"

    async def after_restart(b):
        async with await open_session(b) as s:
            ends = {n: await wait_state(s, n, {"DONE"}) for n in ("b", "c", "d")}
            assert ends["b"].finished_at <= ends["c"].started_at and ends["c"].finished_at <= ends["d"].started_at
            assert (await s.status("a")).state in ("STOPPED", "LOST")  # a process job ends with its agent

    across_restart(tmp_path / "agent", controller_home, submit, after_restart)


def test_max_duration_stops_the_job_and_says_why(runner):
    async def go():
        async with await open_session(runner) as s:
            await s.submit(_job("slow", "sleep 60", cpu=None, max_duration_s=1.0))
            end = await wait_state(s, "slow", {"STOPPED", "FAILED", "DONE"}, timeout=30)
            assert end.state == "STOPPED" and end.error == "stopped: max_duration 1s reached"
            assert "max_duration 1s reached" in await job_log(s, "slow")

    asyncio.run(go())


def test_retry_reruns_a_failing_job_then_fails_and_resumes_from_its_checkpoint(runner):
    command = 'echo "ckpt=${LANPOOL_RESUME_CKPT:-none}"; mkdir -p ck; touch ck/step$(ls ck | wc -l).ckpt; exit 3'
    retry = {"retry_on": ["failure"], "retry_limit": 2, "retry_delay_s": 0.5}

    async def go():
        async with await open_session(runner) as s:
            await s.submit(_job("flaky", command, cpu=None, **retry))
            end = await wait_state(s, "flaky", {"FAILED", "DONE"}, timeout=60)
            assert end.state == "FAILED" and end.exit_code == 3 and end.attempt == 2 and end.retry_limit == 2
            log = await job_log(s, "flaky")
            assert log.count("ckpt=") == 3, log
            assert "ckpt=none" in log and "retry 1 of 2" in log and "retry 2 of 2" in log
            assert "ck/step1.ckpt" in log.split("ckpt=")[-1], "the last try resumes from the newest checkpoint"

    asyncio.run(go())


def test_a_process_job_that_retries_lost_runs_again_after_its_agent_restarts(tmp_path, controller_home):
    """A restart (SIGTERM: a process cannot outlive its agent) loses the job: with `lost` in its retry
    it ends LOST, waits in the journal's queue and the next agent runs it again; without, it stops."""
    command = 'if [ -e tried ]; then echo second; exit 0; fi; touch tried; echo "first"; sleep 60'
    retry = {"retry_on": ["lost"], "retry_limit": 1}

    async def before(agent):
        async with await open_session(agent) as s:
            await s.submit(_job("kept", command, cpu=None, **retry))
            await s.submit(_job("plain", "sleep 60", cpu=None))
            for job_id in ("kept", "plain"):
                await wait_state(s, job_id, {"RUNNING"}, timeout=30)

    async def after(agent):
        async with await open_session(agent) as s:
            end = await wait_state(s, "kept", {"DONE", "FAILED", "STOPPED", "LOST"}, timeout=60)
            log = await job_log(s, "kept")
            assert end.state == "DONE" and end.attempt == 1, (end.state, end.error, log)
            assert "its agent shut down; retry 1 of 1" in log and "second" in log, log
            plain = await s.status("plain")
            assert plain.state == "STOPPED", plain.state

    across_restart(tmp_path / "agent", controller_home, before, after)


def test_an_unknown_retry_event_is_refused(runner):
    async def go():
        async with await open_session(runner) as s:
            with pytest.raises(RunnerError, match="retry_on: 'sometimes' is not one of failure, lost"):
                await s.submit(_job("odd", "true", cpu=None, retry_on=["sometimes"], retry_limit=1))

    asyncio.run(go())


_ = ErrorCode


BIG = """
workflows:
  - name: big
    resources: {cpu: 2}
    commands: ["echo start $LANPOOL_JOB_ID", "sleep 2", "for i in 1 2 3; do echo line $i; done"]
  - name: slow
    resources: {cpu: 2}
    max_duration: 1s
    commands: ["sleep 60"]
"""


def _run_d(cli, project, *extra) -> tuple[str, float]:
    started = time.monotonic()
    out = cli("headless", "run", "big", "-d", "--json", *extra, cwd=project, check=True)
    return json.loads(out.stdout)["jobs"][0]["job_id"], time.monotonic() - started


def test_two_detached_jobs_that_need_all_of_a_runner_run_one_after_the_other(runner, cli, make_project):
    project = make_project(BIG)
    cli("headless", "runners", "add", runner.address, check=True)
    first, t1 = _run_d(cli, project)
    second, t2 = _run_d(cli, project, "--runner", "test-runner")  # pinning queues like any other job
    assert t1 < 15 and t2 < 15, "run -d returns once the runner accepted the job"
    # No controller process is alive now: the runner starts the second when the first ends.
    deadline = time.time() + 60
    while (jobs := jobs_by(cli))[second]["status"] != "DONE":
        assert time.time() < deadline, jobs[second]
        time.sleep(0.5)
    assert jobs[first]["status"] == "DONE"
    assert jobs[second]["started_at"] >= jobs[first]["finished_at"], "never both at once"
    log = cli("headless", "logs", second, check=True).stdout
    assert f"start {second}" in log and "line 3" in log


def test_status_shows_why_a_job_waits_and_stop_cancels_it_on_its_runner(runner, cli, make_project):
    project = make_project(BIG.replace("sleep 2", "sleep 10"))  # still running at `status`, even under load
    cli("headless", "runners", "add", runner.address, check=True)
    _run_d(cli, project)
    second, _ = _run_d(cli, project)
    table = cli("headless", "status", check=True).stdout
    assert "QUEUED" in table and "waiting for 2 CPU: 0 of 2 free" in table, table
    out = cli("headless", "stop", second)
    assert out.returncode == 0, out.stderr
    assert jobs_by(cli)[second]["status"] in ("STOPPED", "ABORTED")


def test_a_job_that_never_fits_the_pinned_runner_is_refused(runner, cli, make_project):
    project = make_project(BIG.replace('cpu: 2}\n    commands: ["echo', 'cpu: 3}\n    commands: ["echo', 1))
    cli("headless", "runners", "add", runner.address, check=True)
    out = cli("headless", "run", "big", "-d", "--runner", "test-runner", cwd=project)
    assert out.returncode != 0 and "needs 3 CPU" in out.stderr, out.stderr


def test_max_duration_from_the_workflow_stops_the_job(runner, cli, make_project):
    project = make_project(BIG)
    cli("headless", "runners", "add", runner.address, check=True)
    out = cli("headless", "run", "slow", cwd=project, timeout=60)
    assert "max_duration 1s reached" in out.stdout + out.stderr, out.stderr
