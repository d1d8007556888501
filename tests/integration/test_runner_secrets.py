"""A job's secrets on the runner (agent/jobs/masking.py, agent/jobs/kept_secrets.py): written ***
in its log however they are printed (split by terminal control sequences, straddling the cut of
a long line), kept 0600 outside every job's reach across an agent restart, so a queued job
still runs with its real values and a re-adopted container is still masked. Real agents over
real SSH, a real Docker engine for the container tests (skipped where none answers).
The part with real agents and the CLI (integration); the rest: tests/unit/test_runner_secrets.py, tests/system/test_runner_secrets.py."""

import asyncio
import hashlib
import stat
from pathlib import Path

import pytest

from lanpool.agent.executors.line_cutter import MAX_LINE
from lanpool.protocol import SubmitJob
from tests.harness import start_agent
from tests.runner_jobs import ALL_CPUS, across_restart, job_log, open_session, runner, wait_state
from tests.unit.test_runner_secrets import TOKEN, _shown

_ = runner  # a fixture from runner_jobs: the tests name it

DIGEST = hashlib.sha256(TOKEN.encode()).hexdigest()[:16]


def _job(job_id: str, commands: list[str], cpu: int | None = None, **extra) -> SubmitJob:
    resources = {"cpu": cpu} if cpu else {}
    return SubmitJob(job_id, "r", "w", commands, resources=resources, **extra)


def _secret_job(job_id: str, commands: list[str], cpu: int | None = None) -> SubmitJob:
    return _job(job_id, commands, cpu, env={"TOKEN": TOKEN, "BEARER": f"Bearer {TOKEN}"}, masked=[TOKEN])


def _files_holding(root: Path, needle: str) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes())


def test_a_job_printing_its_secret_split_by_control_sequences_shows_it_masked(runner):
    commands = [
        'echo "plain $TOKEN"',
        'echo "$BEARER"',
        'printf \'colour %s\\033[31m%s\\033[0m!\\n\' "${TOKEN:0:6}" "${TOKEN:6}"',
        'printf \'each %s\\033[1m%s\\033[0m%s\\a%s\\n\' "${TOKEN:0:3}" "${TOKEN:3:4}" "${TOKEN:7:6}" "${TOKEN:13}"',
        "printf 'title \\033]0;%s\\a.\\n' \"$TOKEN\"",
        'printf \'cr %s\\r%s\\n\' "${TOKEN:0:9}" "${TOKEN:9}"',
        "printf 'untouched \\033[32mgreen\\033[0m\\n'",
    ]

    async def go():
        async with await open_session(runner) as s:
            await s.submit(_secret_job("colours", commands))
            end = await wait_state(s, "colours", {"DONE", "FAILED"})
            assert end.state == "DONE", await job_log(s, "colours")
            return await job_log(s, "colours")

    log = asyncio.run(go())
    assert "plain ***\n" in log and "Bearer ***\n" in log  # the happy path
    assert TOKEN not in log and TOKEN not in _shown(log), log
    for shown in ("colour ***!\n", "each ***\n", "cr ***\n", "title .\n"):
        assert shown in _shown(log), log
    assert "title \x1b]0;***\x07.\n" in log  # in the window title too
    assert "untouched \x1b[32mgreen\x1b[0m\n" in log  # what holds no secret keeps its colours


def test_a_secret_straddling_the_cut_of_a_long_line_is_masked(runner):
    """A line over MAX_LINE is cut in pieces: the secret is put across the cut at every offset,
    and once with the cut inside a colour code in the middle of it. A last line without a
    newline that ends like the secret's start stays whole."""
    n = len(TOKEN)
    commands = [
        f"for k in $(seq 1 {n - 1}); do head -c $(({MAX_LINE} - k)) /dev/zero | tr '\\0' x; "
        'printf "%s yyy\\n" "$TOKEN"; done',
        f"head -c {MAX_LINE - 7} /dev/zero | tr '\\0' x; "
        'printf \'%s\\033[31m%s\\033[0m zzz\\n\' "${TOKEN:0:5}" "${TOKEN:5}"',
        "printf 'the end %s' \"${TOKEN:0:4}\"",
    ]

    async def go():
        async with await open_session(runner) as s:
            await s.submit(_secret_job("long", commands))
            end = await wait_state(s, "long", {"DONE", "FAILED"}, timeout=60)
            assert end.state == "DONE", (await job_log(s, "long"))[-2000:]
            return await job_log(s, "long")

    log = asyncio.run(go())
    joined = log.replace("\n", "")  # the pieces of each cut line, joined again
    assert TOKEN not in joined and TOKEN not in _shown(joined)
    assert joined.count("*** yyy") == n - 1 and "***" in _shown(joined.split("zzz")[0][-40:])
    # Nothing lost, nothing repeated: every x of every line is there.
    assert joined.count("x") == sum(MAX_LINE - k for k in range(1, n)) + MAX_LINE - 7
    assert all(len(line.encode()) <= MAX_LINE + n for line in log.splitlines())
    assert log.endswith(f"\nthe end {TOKEN[:4]}\n"), log[-100:]  # not held back: it is not a cut


def test_a_queued_job_keeps_its_secrets_across_an_agent_restart(tmp_path, controller_home):
    """Queued behind a busy runner, the agent restarted: the job runs after it with its real
    values, masked in its log. Meanwhile the only file holding them is secrets/ID.json, 0600 in
    a 0700 dir beside jobs/; once the job ends no file of the runner holds them."""
    data = tmp_path / "agent"
    commands = [
        'echo "token=$TOKEN"',
        'echo "$BEARER"',
        f'test "$(printf %s "$TOKEN" | sha256sum | cut -c1-16)" = {DIGEST} && echo "the job sees the real value"',
    ]

    async def before(a):
        async with await open_session(a) as s:
            await s.submit(_job("busy", ["sleep 30"], cpu=2))
            assert (await s.submit(_secret_job("secret", commands, cpu=2))).state == "QUEUED"
        kept = data / "secrets" / "secret.json"
        assert _files_holding(data, TOKEN) == [kept]
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
        assert not kept.is_relative_to(data / "jobs")  # nowhere under a job's dir, its workspace included
        assert "***" in (data / "jobs" / "secret" / "request.json").read_text()

    async def after(b):
        async with await open_session(b) as s:
            end = await wait_state(s, "secret", {"DONE", "FAILED"})
            log = await job_log(s, "secret")
        assert end.state == "DONE", (end.error, log)
        assert "token=***\n" in log and "Bearer ***\n" in log and "the job sees the real value" in log
        assert TOKEN not in log
        assert _files_holding(data, TOKEN) == []
        assert not (data / "secrets" / "secret.json").exists()

    across_restart(data, controller_home, before, after)


def test_kept_secrets_gone_or_damaged_fail_the_job_rather_than_run_it_with_stars(tmp_path, controller_home):
    """Kept secrets removed or garbled while the agent was down: the queued job fails with one
    line and never runs with *** for its token; a file no unfinished job owns is removed."""
    data = tmp_path / "agent"

    async def before(a):
        async with await open_session(a) as s:
            await s.submit(_job("busy", ["sleep 30"], cpu=2))
            for job_id in ("gone", "bad"):
                assert (await s.submit(_secret_job(job_id, ['echo "token=$TOKEN"'], cpu=2))).state == "QUEUED"

    async def after(b):
        async with await open_session(b) as s:
            for job_id in ("gone", "bad"):
                end = await wait_state(s, job_id, {"DONE", "FAILED"})
                assert end.state == "FAILED" and "its secrets were not kept on this runner" in end.error
                assert "token=" not in await job_log(s, job_id)

    a = start_agent(data, controller_home, extra_env=ALL_CPUS)
    try:
        asyncio.run(before(a))
    finally:
        a.stop()
    (data / "secrets" / "gone.json").unlink()
    (data / "secrets" / "bad.json").write_text('{"masked": 7}')
    (data / "secrets" / "stale.json").write_text('{"masked": ["x"], "env": {}}')
    b = start_agent(data, controller_home, extra_env=ALL_CPUS)
    try:
        asyncio.run(after(b))
    finally:
        b.stop()
    assert list((data / "secrets").iterdir()) == []


def test_another_job_cannot_read_a_queued_jobs_kept_secrets(runner):
    """A process job running beside a queued job that has a secret looks for it from its
    workspace (`../../../secrets`, where the agent keeps it): it finds nothing. Where process jobs
    run unsandboxed (the agent's own files readable to them), the runner does not isolate them."""
    data = runner.data_dir
    snoop = [
        "while [ ! -e go ]; do sleep 0.1; done",
        "if cat ../../../host_key.pub >/dev/null 2>&1; then echo AGENT-FILES-READABLE; fi",
        "cat ../../../secrets/* 2>&1 || true",
        "ls -la ../../../secrets 2>&1 || true",
        "grep -rs -e tk- -e '\"masked\"' ../../.. 2>&1 | head -5",
        "echo snooped",
    ]

    async def go():
        async with await open_session(runner) as s:
            await s.submit(_job("snoop", snoop, cpu=2))
            assert (await s.submit(_secret_job("victim", ['echo "token=$TOKEN"'], cpu=2))).state == "QUEUED"
            assert (data / "secrets" / "victim.json").exists()
            (data / "jobs" / "snoop" / "workspace" / "go").touch()
            await wait_state(s, "snoop", {"DONE", "FAILED"})
            victim = await wait_state(s, "victim", {"DONE", "FAILED"})
            return await job_log(s, "snoop"), victim, await job_log(s, "victim")

    log, victim, victim_log = asyncio.run(go())
    assert "snooped" in log, log
    if "AGENT-FILES-READABLE" in log:
        pytest.skip("process jobs run unsandboxed here (the agent's data dir is readable to them)")
    assert TOKEN not in log and "tk-" not in log, log
    assert victim.state == "DONE" and "token=***" in victim_log
