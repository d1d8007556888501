"""A pull whose controller process dies resumes from what reached the disk, and only from that.

The controller is a real `app headless artifacts download` subprocess, SIGKILLed half-way
through a slow stream from tests/hostile_runner.py (real asyncssh, the real protocol):
run again, it asks for the file from the bytes already staged (the runner's byte counter
says how much was sent again) and the result is byte-identical. A pull an older lanpool
left cut off in byte ranges (staged files filled out of order) is not resumed from its
sizes: it starts over, never leaving a file with a gap of zeros.
"""

import asyncio
import json
import os
import signal
import subprocess
import time

from lanpool.app.controller import Controller
from lanpool.app.transfer.pull import staging_dir
from tests.hostile_runner import Script, hostile, seed_job

_ = hostile  # a fixture from hostile_runner: the tests name it

BLOB = os.urandom(4 * 2**20 + 777)


def _staged(ctl: Controller, job_id: str, name: str) -> int:
    try:
        return (staging_dir(ctl.home.artifacts, job_id) / name).stat().st_size
    except FileNotFoundError:
        return 0


def test_a_killed_download_resumes_from_the_staged_offset(hostile, ctl, cli, tmp_path):
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


def test_a_pull_an_older_lanpool_left_in_byte_ranges_starts_over(hostile, ctl):
    """Its `<job>.part.ranges`/`.part.done` beside the staging dir say the staged file was filled
    out of order: one of the full size may hold gaps of zeros, so it is asked for from byte 0."""
    seed_job(ctl.store, ctl.store.runner(hostile.name), "ranged", state="DONE")
    hostile.add(Script(job_id="ranged", files={"big.bin": BLOB}, declared=[("big.bin", len(BLOB))]))
    staging = staging_dir(ctl.home.artifacts, "ranged")
    staging.mkdir(parents=True)
    (staging / "big.bin").write_bytes(bytes(len(BLOB)))  # the declared size, every byte a zero
    (ctl.home.artifacts / "ranged.part.json").write_text(json.dumps({"total": len(BLOB)}))
    (ctl.home.artifacts / "ranged.part.ranges").write_text('{"ranges": []}')
    (ctl.home.artifacts / "ranged.part.done").write_bytes(bytes(8))
    asyncio.run(ctl.refresh([ctl.store.job("ranged")]))
    job = ctl.store.job("ranged")
    assert job.artifacts_pulled == 1, job.error
    assert hostile.counters.artifact_requests[-1] == [("big.bin", 0)]
    assert (ctl.home.job_artifacts("ranged") / "big.bin").read_bytes() == BLOB
    assert not list(ctl.home.artifacts.glob("ranged.part*"))
