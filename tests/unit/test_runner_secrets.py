"""A job's secrets on the runner (agent/jobs/masking.py, agent/jobs/kept_secrets.py): written ***
in its log however they are printed (split by terminal control sequences, straddling the cut of
a long line), kept 0600 outside every job's reach across an agent restart, so a queued job
still runs with its real values and a re-adopted container is still masked. Real agents over
real SSH, a real Docker engine for the container tests (skipped where none answers).
The in-process part (unit); the rest: tests/integration/test_runner_secrets.py, tests/system/test_runner_secrets.py."""

import asyncio
import re

from lanpool.agent.executors.docker_stdio import StdioFiles
from lanpool.agent.executors.line_cutter import MAX_LINE
from lanpool.agent.jobs.job import Job
from lanpool.agent.jobs.journal import JobRecord
from lanpool.agent.jobs.masking import HOLD_SLACK, held_tail, mask_secrets
from lanpool.agent.jobs.recovery import adoption_of
from lanpool.agent.workspace.spool import LogSpool
from lanpool.protocol import JobState

TOKEN = "tk-9f8e7d6c5b4a-SECRET"


# What a terminal shows of a text: escape sequences and control bytes gone (an oracle of its own, not masking's).
_HIDDEN = re.compile(
    r"\x1b\[[0-9;:?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]"
)


def _shown(text: str) -> str:
    return _HIDDEN.sub("", text)


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
