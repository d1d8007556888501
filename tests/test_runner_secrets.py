"""A job's secrets on the runner (agent/jobs/masking.py, agent/jobs/kept_secrets.py): written ***
in its log however they are printed (split by terminal control sequences, straddling the cut of
a long line), kept 0600 outside every job's reach across an agent restart, so a queued job
still runs with its real values and a re-adopted container is still masked. Real agents over
real SSH, a real Docker engine for the container tests (skipped where none answers)."""

import asyncio
import hashlib
import re
import signal
import stat
from pathlib import Path

import pytest

from lanpool.agent.executors.docker_stdio import StdioFiles
from lanpool.agent.executors.line_cutter import MAX_LINE
from lanpool.agent.jobs.job import Job
from lanpool.agent.jobs.journal import JobRecord
from lanpool.agent.jobs.masking import HOLD_SLACK, held_tail, mask_secrets
from lanpool.agent.jobs.recovery import adoption_of
from lanpool.agent.workspace.spool import LogSpool
from lanpool.protocol import JobState, SubmitJob
from tests.docker_harness import remove_agent_containers
from tests.harness import start_agent, start_docker_agent
from tests.runner_jobs import ALL_CPUS, across_restart, job_log, open_session, runner, wait_state
from tests.test_docker_executor import _attach, _lines, containers_of, follow, submit

_ = runner  # a fixture from runner_jobs: the tests name it

TOKEN = "tk-9f8e7d6c5b4a-SECRET"
DIGEST = hashlib.sha256(TOKEN.encode()).hexdigest()[:16]
# What a terminal shows of a text: escape sequences and control bytes gone (an oracle of its own, not masking's).
_HIDDEN = re.compile(
    r"\x1b\[[0-9;:?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]"
)


def _shown(text: str) -> str:
    return _HIDDEN.sub("", text)


def _job(job_id: str, commands: list[str], cpu: int | None = None, **extra) -> SubmitJob:
    resources = {"cpu": cpu} if cpu else {}
    return SubmitJob(job_id, "r", "w", commands, resources=resources, **extra)


def _secret_job(job_id: str, commands: list[str], cpu: int | None = None) -> SubmitJob:
    return _job(job_id, commands, cpu, env={"TOKEN": TOKEN, "BEARER": f"Bearer {TOKEN}"}, masked=[TOKEN])


def _files_holding(root: Path, needle: str) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes())


# -- through terminal control sequences -------------------------------------------------------


def test_masking_sees_through_control_sequences_and_leaves_other_text_alone():
    masks = [TOKEN.encode()]
    head, tail = TOKEN[:6].encode(), TOKEN[6:].encode()
    hostile = [
        head + b"\x1b[31m" + tail,  # a colour code inside it
        b"".join(bytes([c]) + b"\x1b[1;3%dm" % (i % 8) for i, c in enumerate(TOKEN.encode())),  # every byte coloured
        head + b"\x1b]0;title\x07" + tail,  # an OSC string inside it
        head + b"\x1b(B" + tail,  # a charset escape
        head + b"\x00\x07\x08\x7f" + tail,  # NUL, BEL, backspace, DEL
        head + b"\r" + tail,  # a carriage return
        b"\x1b]0;" + TOKEN.encode() + b"\x07",  # in the window title
    ]
    for data in hostile:
        masked = mask_secrets(b"before " + data + b" after\n", masks)
        shown = _shown(masked.decode())
        assert TOKEN not in shown and TOKEN.encode() not in masked, masked
        assert shown.startswith("before ") and shown.endswith(" after\n") and "***" in masked.decode()
    # Nothing to mask: the bytes are left exactly as they were, colours and all.
    for data in (b"\x1b[32mgreen\x1b[0m " + head + b"\n", b"progress 10%\rprogress 20%\r\n", b"plain line\n"):
        assert mask_secrets(data, masks) == data
    assert mask_secrets(b"a " + TOKEN.encode() + b" b\n", masks) == b"a *** b\n"  # the fast path


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


# -- across the cut of a long line --------------------------------------------------------------


def test_held_tail_is_what_may_begin_a_secret():
    masks = [TOKEN.encode()]
    body = b"x" * 100
    assert held_tail(body, masks) == 0
    for k in range(1, len(TOKEN)):
        assert held_tail(body + TOKEN[:k].encode(), masks) == k
    assert held_tail(body + TOKEN.encode(), masks) == 0  # whole: masked where it is
    # A cut inside an escape sequence in the middle of it: the sequence's start is held too.
    assert held_tail(body + TOKEN[:5].encode() + b"\x1b[3", masks) == 8
    # Control sequences among its bytes are held with them, within a bound whatever the job
    # interleaves: the secret less a byte, plus HOLD_SLACK.
    assert held_tail(body + TOKEN[:2].encode() + b"\x1b[0m" * 1000, masks) == 4002
    assert held_tail(TOKEN[:1].encode() + b"\x1b[0m" * 100_000, masks) <= len(TOKEN) - 1 + HOLD_SLACK


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


def test_held_bytes_are_read_again_by_a_restarted_agent_with_nothing_lost(tmp_path):
    """A container's stdio/ file read by StdioFiles into a job's spool, the agent gone right
    after a cut whose end was held back (a secret's start): the spool does not hold those
    bytes, so a re-adopted container resumes before them (agent.jobs.recovery) and the
    secret is masked whole, with every byte spooled once."""
    stdio, job_dir = tmp_path / "stdio", tmp_path / "job"
    stdio.mkdir()
    job_dir.mkdir()
    secret = TOKEN.encode()
    # The 15th cut of a long line falls 4 bytes into the secret; the first pass reads 1 MiB.
    long_line = b"x" * (15 * MAX_LINE - 4) + secret + b"y" * (3 * MAX_LINE) + b"\n"
    content = b"first " + secret + b"\n" + long_line + b"after " + secret + b"\n"
    (stdio / "out").write_bytes(content)
    (stdio / "err").write_bytes(b"")
    record = JobRecord("j", "r", "w", ["x"], {}, [], executor="docker", state=JobState.RUNNING)
    record.save(job_dir)

    async def first_agent() -> None:
        job = Job(record, job_dir, LogSpool(job_dir / "log.spool"), masks=[secret])
        files = StdioFiles(stdio, job.sink())
        await files._pass()  # one read of each file, then the agent is killed (nothing flushed)
        files.close()
        assert job.held.get("out", b"") == secret[:4]

    async def second_agent() -> None:
        again = JobRecord.load(job_dir)
        job = Job(again, job_dir, LogSpool(job_dir / "log.spool"), masks=[secret])
        adoption = await adoption_of(job, resumes_output=True)
        assert adoption.delivered["out"] == len(b"first " + secret + b"\n") + 15 * MAX_LINE - 4
        files = StdioFiles(stdio, job.sink(), dict(adoption.delivered))
        await files.catch_up()
        files.close()
        job.flush_output()

    asyncio.run(first_agent())
    asyncio.run(second_agent())
    spool = LogSpool(job_dir / "log.spool", writable=False)
    spooled = b"".join(r.data for r in spool.read(0, 64 * 2**20))
    assert secret not in spooled.replace(b"\n", b"")
    assert spooled.replace(b"\n", b"") == mask_secrets(content, [secret]).replace(b"\n", b"")


# -- kept across a restart, out of every job's reach --------------------------------------------


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


# -- containers: re-adopted jobs masked here too, and the kept file out of their mounts ---------------


def test_a_re_adopted_container_is_still_masked_on_the_runner(tmp_path, controller_home, docker_client, busybox_image):
    """The agent killed while a container prints its secret; the next agent re-adopts it and
    masks its later lines itself (its secrets were kept), resuming at the exact byte."""
    data = tmp_path / "agent"
    agent = start_docker_agent(data, controller_home, "--executor", "docker")
    script = ["i=0", 'while [ $i -lt 60 ]; do i=$((i+1)); echo "line $i $TOKEN"; sleep 0.1; done']
    try:
        submit(agent, "adopt1", script, busybox_image, env={"TOKEN": TOKEN}, masked=[TOKEN])
        before, status = asyncio.run(asyncio.wait_for(_attach(agent, "adopt1", until_out_lines=5), 60))
        assert status is None, "the job ended before the agent could be killed"
        kept = data / "secrets" / "adopt1.json"
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        [container] = containers_of(docker_client, "adopt1")
        sources = [Path(m["Source"]) for m in container.attrs["Mounts"]]
        assert sources and not any(kept.is_relative_to(src) for src in sources), sources  # not in its mounts
        agent.proc.send_signal(signal.SIGKILL)
        agent.proc.wait()
        agent = start_docker_agent(data, controller_home, "--executor", "docker")
        everything, final = follow(agent, "adopt1")
    finally:
        agent.stop()
        remove_agent_containers(docker_client, data)
    out = _lines(everything, "out")
    assert [line.split()[1] for line in out] == [str(i) for i in range(1, 61)], "lines lost or repeated"
    assert all(line.endswith(" ***") for line in out), [line for line in out if not line.endswith("***")]
    assert any("re-attached to container" in line for line in _lines(everything, "sys"))
    assert final.state == JobState.DONE
    # Only the container's own output files (stdio/, written by the job itself) hold what it printed.
    assert not kept.exists() and _files_holding(data, TOKEN) == [data / "jobs" / "adopt1" / "stdio" / "out"]


def test_a_container_job_cannot_reach_kept_secrets(tmp_path, controller_home, docker_client, busybox_image):
    """A container beside a queued job with a secret searches all it sees (its mounts and its
    root) for the kept file or the value: nothing holds them."""
    data = tmp_path / "agent"
    agent = start_docker_agent(data, controller_home, "--executor", "docker", env=ALL_CPUS)
    snoop = [
        "while [ ! -e /workspace/go ]; do sleep 0.1; done",
        "ls -la / /workspace/.. /.lanpool-stdio 2>&1",
        'for d in /*; do case $d in /proc|/sys|/dev) ;; *) grep -rs -l -e tk- -e \'"masked"\' "$d" || true ;; esac; done',
        "echo snooped",
    ]
    busy = {"resources": {"cpu": 2}}
    try:
        submit(agent, "snoop", snoop, busybox_image, **busy)
        victim = submit(
            agent, "victim", ['echo "token=$TOKEN"'], busybox_image, env={"TOKEN": TOKEN}, masked=[TOKEN], **busy
        )
        assert victim.state == JobState.QUEUED
        assert (data / "secrets" / "victim.json").exists()
        (data / "jobs" / "snoop" / "workspace" / "go").touch()
        chunks, final = follow(agent, "snoop")
        victim_chunks, victim_end = follow(agent, "victim")
    finally:
        agent.stop()
        remove_agent_containers(docker_client, data)
    text = b"".join(c.data for c in chunks).decode()
    assert "snooped" in text and final.state == JobState.DONE, text
    assert TOKEN not in text and "victim" not in text and "secrets" not in text, text
    assert victim_end.state == JobState.DONE and _lines(victim_chunks, "out") == ["token=***"]
