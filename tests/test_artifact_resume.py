"""A pull whose controller process dies resumes from what reached the disk, and only from that.

The controller is a real `app headless artifacts download` subprocess, SIGKILLed half-way
through a slow stream from tests/hostile_runner.py (real asyncssh, the real protocol):
run again, it asks for the file from the bytes already staged (the runner's byte counter
says how much was sent again) and the result is byte-identical. Attack twins: resume
files edited to claim more than arrived, or another size, are not trusted: the result is
still byte-identical, never a file with a gap of zeros.
"""

import asyncio
import os
import signal
import struct
import subprocess
import time

import pytest

import lanpool.app.transfer.ranges as ranges
from lanpool.app.controller import Controller
from lanpool.app.errors import LanpoolError
from lanpool.app.transfer.pull import staging_dir
from tests.hostile_runner import Script, hostile, seed_job

_ = hostile  # a fixture from hostile_runner: the tests name it

BLOB = os.urandom(4 * 2**20 + 777)


def _staged(ctl: Controller, job_id: str, name: str) -> int:
    try:
        return (staging_dir(ctl.home.artifacts, job_id) / name).stat().st_size
    except FileNotFoundError:
        return 0


def test_a_killed_download_resumes_from_the_staged_offset(hostile, ctl, cli, tmp_path, monkeypatch):
    monkeypatch.setenv(ranges.STREAMS_ENV, "1")
    seed_job(ctl.store, ctl.store.runner(hostile.name), "killed", state="DONE")
    script = hostile.add(
        Script(job_id="killed", files={"m.bin": BLOB}, declared=[("m.bin", len(BLOB))], slow_s=0.05)
    )  # 65 parts of 64 KiB, 50 ms apart: ~3 s of pull to kill it in
    out = tmp_path / "out"
    proc = cli.popen(
        "headless", "artifacts", "download", "killed", "--output", str(out),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while _staged(ctl, "killed", "m.bin") < 512 * 1024:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the pull never got going"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        if proc.stderr:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    have = _staged(ctl, "killed", "m.bin")
    assert 512 * 1024 <= have < len(BLOB)
    assert not out.exists()

    script.slow_s = 0.0
    sent_before = hostile.counters.artifact_bytes
    done = cli("headless", "artifacts", "download", "killed", "--output", str(out), timeout=120)
    assert done.returncode == 0, done.stderr
    assert hostile.counters.artifact_requests[-1] == [("m.bin", have)]  # from the staged offset...
    assert hostile.counters.artifact_bytes - sent_before == len(BLOB) - have  # ...and only what was missing
    assert (out / "m.bin").read_bytes() == BLOB
    assert not list(ctl.home.artifacts.glob("killed.part*"))


@pytest.fixture
def small_ranges(monkeypatch):
    monkeypatch.setattr(ranges, "PARALLEL_MIN_BYTES", 2**20)
    monkeypatch.setattr(ranges, "RANGE_MIN_BYTES", 2**19)
    monkeypatch.setenv(ranges.STREAMS_ENV, "3")


@pytest.mark.parametrize("edit", ["claims every range whole", "claims another size"])
def test_edited_range_resume_files_are_not_trusted(hostile, ctl, small_ranges, edit):
    seed_job(ctl.store, ctl.store.runner(hostile.name), "edited", state="DONE")
    script = hostile.add(Script(job_id="edited", files={"big.bin": BLOB}, declared=[("big.bin", len(BLOB))]))
    script.cut_after = 1_200_000  # every range a little way in, then the connection drops
    with pytest.raises(LanpoolError):  # the connection dropped
        asyncio.run(asyncio.wait_for(ctl.follow("edited", follow=True), 60))
    state = ranges.RangeState(ctl.home.artifacts, "edited")
    assert state.load({"big.bin": len(BLOB)}) and any(
        at < r.end for r, at in zip(state.ranges, state.done, strict=True)
    )
    if edit == "claims every range whole":
        state.done_path.write_bytes(b"".join(struct.pack("<q", r.end) for r in state.ranges))
    else:
        state.layout.write_text(state.layout.read_text().replace(f'"size": {len(BLOB)}', '"size": 9999999'))

    script.cut_after = None
    n_before = len(hostile.counters.artifact_requests)
    asyncio.run(ctl.refresh([ctl.store.job("edited")]))
    job = ctl.store.job("edited")
    assert job.artifacts_pulled == 1, job.error
    assert (ctl.home.job_artifacts("edited") / "big.bin").read_bytes() == BLOB  # no gap of zeros
    assert len(hostile.counters.artifact_requests) > n_before  # the claimed bytes were asked for again
    assert not list(ctl.home.artifacts.glob("edited.part*"))
