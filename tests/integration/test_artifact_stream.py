"""Artifacts come back as streamed files (GetArtifacts), checked on the controller.

Happy path against a real agent: several files in nested dirs arrive byte-exact and
`artifacts download` puts them in place. Against a hostile runner (tests/hostile_runner.py:
real asyncssh, the real protocol encoder, crafted streams): nothing is written outside the
store, each refusal is one stored line, a cut stream resumes from the bytes already there,
and `status` neither cuts a slow pull short nor calls its runner OFFLINE.
The part with real agents and the CLI (integration); the rest: tests/unit/test_artifact_stream.py."""

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import pytest

from lanpool.app.controller import Controller
from lanpool.app.errors import ArtifactsRefused, LanpoolError
from lanpool.app.store import ARTIFACTS_REFUSED
from lanpool.app.transfer.pull import _pull_lock, staging_dir
from lanpool.protocol import ArtifactData, ArtifactEnd, ArtifactsSent, Error, ErrorCode, JobState
from tests.hostile_runner import BASHRC, Script, hostile, seed_job

_ = hostile  # a fixture from hostile_runner: the tests name it


def _follow(ctl: Controller, job_id: str, timeout: float = 30.0):
    return asyncio.run(asyncio.wait_for(ctl.follow(job_id, follow=True), timeout))


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_a_real_jobs_files_arrive_byte_exact_and_download_links_them(agent, cli, make_project, tmp_path):
    project = make_project(
        "workflows:\n  - name: wf\n    commands:\n"
        "      - 'mkdir -p out/sub/deeper && printf hello > out/a.txt && touch out/empty'\n"
        "      - 'seq 1 60000 > out/sub/deeper/r.txt'\n"
        "    artifacts: [out]\n"
    )
    cli("headless", "run", "wf", "--runner", agent.address, cwd=project, check=True)
    [entry] = json.loads(cli("headless", "status", "--json", check=True).stdout)
    [row] = entry["jobs"]
    files = {
        "out/a.txt": b"hello",
        "out/empty": b"",
        "out/sub/deeper/r.txt": "".join(f"{i}\n" for i in range(1, 60001)).encode(),
    }
    ctl = Controller()
    try:
        store = ctl.home.job_artifacts(row["job"])
        assert {p: (store / p).read_bytes() for p in files} == files
        assert dict(ctl.store.artifacts(row["job"])) == {p: len(d) for p, d in files.items()}
        assert not staging_dir(ctl.home.artifacts, row["job"]).exists()
    finally:
        ctl.close()
    dest = tmp_path / "dl"
    cli("headless", "artifacts", "download", row["job"], "--output", str(dest), check=True)
    assert {p: (dest / p).read_bytes() for p in files} == files
    # Written once: the download is the store's file, linked.
    assert (dest / "out/sub/deeper/r.txt").stat().st_ino == (store / "out/sub/deeper/r.txt").stat().st_ino


def _cases(home: Path) -> dict[str, tuple[Script, str]]:
    """name: (the job's script, a fragment of the refusal line)."""
    ok = {"ok.txt": b"fine"}
    okd = [("ok.txt", 4)]

    def frames(*msgs, declared=okd) -> Script:
        return Script(declared=declared, artifact_frames=list(msgs))

    def data(path: str, offset: int, blob: bytes) -> ArtifactData:
        return ArtifactData("JOB", path, offset, blob)

    return {
        "declared-dotdot": (Script(files=ok, declared=[("../../home/.bashrc", 4)]), "'..'"),
        "declared-absolute": (Script(files=ok, declared=[(str(home / ".bashrc"), 4)]), "absolute"),
        "declared-twice-as-file-and-dir": (
            Script(files={"d": b"x", "d/x": b"y"}, declared=[("d", 1), ("d/x", 1)]),
            "not a directory",
        ),
        "sent-dotdot": (frames(data("../../home/.bashrc", 0, b"pwned")), "'..'"),
        "sent-absolute": (frames(data(str(home / ".bashrc"), 0, b"pwned")), "absolute"),
        "sent-undeclared": (frames(data("extra.txt", 0, b"x")), "not asked for"),
        "more-than-declared": (Script(files=ok, declared=[("ok.txt", 3)]), "more of 'ok.txt'"),
        "wrong-offset": (frames(data("ok.txt", 2, b"ne")), "expected 0"),
        "ended-early": (
            frames(data("ok.txt", 0, b"fi"), ArtifactEnd("JOB", "ok.txt", 4), ArtifactsSent("JOB")),
            "4 declared",
        ),
        "sent-twice": (
            frames(data("ok.txt", 0, b"fine"), ArtifactEnd("JOB", "ok.txt", 4), data("ok.txt", 0, b"fine")),
            "sent twice",
        ),
        "nothing-sent": (frames(ArtifactsSent("JOB")), "without 1 declared"),
        "runner-error": (frames(Error(ErrorCode.BAD_REQUEST, "artifact 'ok.txt' shrank", "JOB")), "shrank"),
        "more-than-the-disk": (Script(files=ok, declared=[("ok.txt", 4), ("huge", 1 << 60)]), "limit of"),
    }


def _script(script: Script, job_id: str) -> Script:
    """The case's script for `job_id` (its hand-made frames name the job)."""
    script.job_id = job_id
    if script.artifact_frames is not None:
        script.artifact_frames = [
            type(m)(**{**m.__dict__, "job_id": job_id}) if hasattr(m, "job_id") else m for m in script.artifact_frames
        ]
    return script


def test_every_hostile_stream_is_refused_and_writes_nothing_outside(hostile, ctl, home, tmp_path, cli):
    before_home = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    row = ctl.store.runner(hostile.name)
    seed_job(ctl.store, row, "honest", run_name="other-run")
    hostile.add(Script(job_id="honest", files={"a.txt": b"a"}, declared=[("a.txt", 1)]))
    assert _follow(ctl, "honest").artifacts_pulled == 1
    for name, (script, fragment) in _cases(home).items():
        job_id = f"job-{name}"
        seed_job(ctl.store, row, job_id)
        hostile.add(_script(script, job_id))
        started = time.monotonic()
        job = _follow(ctl, job_id)
        assert time.monotonic() - started < 15, name
        assert job.state is JobState.FAILED and job.synced == 1, (name, job)
        assert job.error.startswith("artifacts refused: ") and fragment in job.error, (name, job.error)
        assert "\n" not in job.error
        assert job.artifacts_pulled == ARTIFACTS_REFUSED and ctl.store.artifacts(job_id) == [], name
        with pytest.raises(ArtifactsRefused, match="nothing to download"):
            asyncio.run(ctl.download_artifacts(job_id, tmp_path / "out" / name))
    assert {p: p.read_bytes() for p in home.rglob("*") if p.is_file()} == before_home
    # Only the honest job's files are in the store: no staging dir, part file or stray path left.
    assert _tree(ctl.home.artifacts) == {"honest", "honest/a.txt"}, _tree(ctl.home.artifacts)
    status = cli("headless", "status", timeout=60)
    assert status.returncode == 0 and "Traceback" not in status.stderr
    assert "other-run" in status.stdout and "DONE (0)" in status.stdout


@pytest.mark.parametrize(
    ("env", "value", "fragment"), [("FILES", "2", "3 artifact files"), ("BYTES", "10", "12 bytes")]
)
def test_limits_per_job_refuse_before_anything_is_asked(hostile, ctl, monkeypatch, env, value, fragment):
    monkeypatch.setenv(f"LANPOOL_MAX_ARTIFACT_{env}", value)
    seed_job(ctl.store, ctl.store.runner(hostile.name), "big")
    files = {"a": b"aaaa", "b": b"bbbb", "c": b"cccc"}
    hostile.add(Script(job_id="big", files=files, declared=[(p, len(d)) for p, d in files.items()]))
    job = _follow(ctl, "big")
    assert job.artifacts_pulled == ARTIFACTS_REFUSED
    assert fragment in job.error and f"LANPOOL_MAX_ARTIFACT_{env}" in job.error, job.error
    assert hostile.counters.artifact_requests == []


def test_a_symlink_planted_in_the_staging_dir_is_not_written_through(hostile, ctl, home):
    seed_job(ctl.store, ctl.store.runner(hostile.name), "planted")
    staging = staging_dir(ctl.home.artifacts, "planted")
    staging.mkdir(parents=True)
    (staging / "d").symlink_to(home)  # as if left by something else: a resume must not follow it
    hostile.add(Script(job_id="planted", files={"d/.bashrc": b"pwned"}, declared=[("d/.bashrc", 5)]))
    job = _follow(ctl, "planted")
    assert (home / ".bashrc").read_bytes() == BASHRC
    assert job.artifacts_pulled == 1
    assert (ctl.home.job_artifacts("planted") / "d" / ".bashrc").read_bytes() == b"pwned"
    assert not (ctl.home.job_artifacts("planted") / "d").is_symlink()


def test_a_stream_cut_half_way_resumes_from_the_bytes_already_there(hostile, ctl):
    blob = os.urandom(600_000)
    seed_job(ctl.store, ctl.store.runner(hostile.name), "cut")
    script = hostile.add(
        Script(job_id="cut", files={"a.txt": b"A", "m.bin": blob}, declared=[("a.txt", 1), ("m.bin", len(blob))])
    )
    script.cut_after = 200_000
    with pytest.raises(LanpoolError):
        _follow(ctl, "cut")
    job = ctl.store.job("cut")
    assert job.state is JobState.DONE and not job.synced and not job.artifacts_pulled
    pct = ctl.artifacts.pull_percent("cut")
    assert pct is not None and 0 < pct < 100
    have = (staging_dir(ctl.home.artifacts, "cut") / "m.bin").stat().st_size
    assert 0 < have < len(blob)

    script.cut_after = None
    asyncio.run(ctl.refresh([ctl.store.job("cut")]))
    job = ctl.store.job("cut")
    assert job.synced == 1 and job.artifacts_pulled == 1
    assert hostile.counters.artifact_requests[-1] == [("m.bin", have)]  # a.txt was whole already
    assert (ctl.home.job_artifacts("cut") / "m.bin").read_bytes() == blob
    assert ctl.artifacts.pull_percent("cut") is None
    assert not staging_dir(ctl.home.artifacts, "cut").exists()


def test_status_does_not_cut_a_slow_pull_or_call_its_runner_offline(hostile, ctl):
    blob = os.urandom(16 * 64 * 1024)
    seed_job(ctl.store, ctl.store.runner(hostile.name), "slow", state="DONE")
    hostile.add(Script(job_id="slow", files={"m.bin": blob}, declared=[("m.bin", len(blob))], slow_s=0.15))
    started = time.monotonic()
    asyncio.run(ctl.refresh([ctl.store.job("slow")], timeout_s=1.0))
    assert time.monotonic() - started > 1.5  # the pull outlived the status timeout...
    job = ctl.store.job("slow")
    assert job.artifacts_pulled == 1 and job.synced == 1  # ...and finished
    assert (ctl.home.job_artifacts("slow") / "m.bin").read_bytes() == blob
    assert ctl.store.runner(hostile.name)["state"] != "OFFLINE"


def test_download_of_a_job_that_ended_while_detached_brings_it_up_to_date(hostile, ctl, tmp_path):
    seed_job(ctl.store, ctl.store.runner(hostile.name), "detached")  # RUNNING, as far as the store knows
    hostile.add(Script(job_id="detached", files={"o/x.txt": b"x" * 10}, declared=[("o/x.txt", 10)]))
    files = asyncio.run(ctl.download_artifacts("detached", tmp_path / "out"))
    assert files == [("o/x.txt", 10)] and (tmp_path / "out" / "o" / "x.txt").read_bytes() == b"x" * 10
    assert ctl.store.job("detached").state is JobState.DONE


def test_download_waits_for_another_process_pulling_the_same_job(hostile, ctl, tmp_path):
    """`artifacts download` while a `logs -f` elsewhere holds the job's pull: it waits for that
    pull to end (then finds the job up to date or pulls what is left), never "try again"."""
    seed_job(ctl.store, ctl.store.runner(hostile.name), "shared")
    hostile.add(Script(job_id="shared", files={"o/y.txt": b"y" * 10}, declared=[("o/y.txt", 10)]))
    held, release = threading.Event(), threading.Event()

    def other_process() -> None:
        ctl.home.artifacts.mkdir(parents=True, exist_ok=True)
        with _pull_lock(ctl.home.artifacts, "shared"):  # its own open file: flock keeps us out
            held.set()
            release.wait(30)

    holder = threading.Thread(target=other_process)
    holder.start()
    assert held.wait(10)
    threading.Timer(1.5, release.set).start()
    try:
        files = asyncio.run(asyncio.wait_for(ctl.download_artifacts("shared", tmp_path / "out"), 60))
    finally:
        release.set()
        holder.join()
    assert files == [("o/y.txt", 10)] and (tmp_path / "out" / "o" / "y.txt").read_bytes() == b"y" * 10
