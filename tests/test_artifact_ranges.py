"""A large artifact pulled in byte ranges over several connections (app/transfer/ranges.py).

Against tests/hostile_runner.py (real asyncssh, the real protocol): an honest runner's
file arrives byte-exact in disjoint ranges, each from a worker process of its own; a
runner that sends past a range, or bytes before it (overlapping another range), is
refused with one line and nothing kept; a pull cut off resumes each range from where
it got to; a worker given any host key but the pinned one connects to nothing.
Against a real agent: the agent sends exactly the range asked.
"""

import asyncio
import json
import os
import subprocess
import sys

import asyncssh
import pytest

import lanpool.app.transfer.ranges as ranges
from lanpool.app.controller import Controller
from lanpool.app.errors import LanpoolError
from lanpool.app.store import ARTIFACTS_REFUSED
from lanpool.app.transfer.pull import staging_dir
from lanpool.protocol import JobState
from tests.hostile_runner import HostileRunner, Script, hostile, seed_job

_ = hostile  # a fixture from hostile_runner: the tests name it

BLOB = os.urandom(3 * 2**20 + 12345)  # cut into 3 ranges of ~1 MiB


@pytest.fixture
def small_ranges(monkeypatch):
    """Files of 1 MiB and more go in ranges of at least 512 KiB, 3 at a time."""
    monkeypatch.setattr(ranges, "PARALLEL_MIN_BYTES", 2**20)
    monkeypatch.setattr(ranges, "RANGE_MIN_BYTES", 2**19)
    monkeypatch.setenv(ranges.STREAMS_ENV, "3")


def _follow(ctl: Controller, job_id: str, timeout: float = 60.0):
    return asyncio.run(asyncio.wait_for(ctl.follow(job_id, follow=True), timeout))


def _sidecars(ctl: Controller) -> list[str]:
    return sorted(p.name for p in ctl.home.artifacts.glob("*.part*"))


def _add(hostile: HostileRunner, ctl: Controller, job_id: str, **kw) -> Script:
    seed_job(ctl.store, ctl.store.runner(hostile.name), job_id)
    files = {"small.txt": b"tiny", "big.bin": BLOB}
    return hostile.add(Script(job_id=job_id, files=files, declared=[(p, len(d)) for p, d in files.items()], **kw))


def test_a_large_file_comes_in_disjoint_ranges_byte_exact(hostile, ctl, small_ranges):
    _add(hostile, ctl, "par")
    job = _follow(ctl, "par")
    assert job.artifacts_pulled == 1 and job.state is JobState.DONE, job.error
    assert (ctl.home.job_artifacts("par") / "big.bin").read_bytes() == BLOB
    assert (ctl.home.job_artifacts("par") / "small.txt").read_bytes() == b"tiny"
    asked = hostile.counters.artifact_requests
    assert [("small.txt", 0)] in asked  # the small file: the node's one stream
    spans = sorted(r[0][1:] for r in asked if r[0][0] == "big.bin")
    assert len(spans) == 3 and spans[0][0] == 0  # three workers, one range each...
    assert all(a + n == b for (a, n), (b, _) in zip(spans, spans[1:], strict=False))  # ...disjoint, no gap
    assert spans[-1][0] + spans[-1][1] == len(BLOB)
    assert _sidecars(ctl) == []


@pytest.mark.parametrize("why", ["asked for", "an agent from before ranges"])
def test_one_stream_when_asked_for_or_the_agent_has_no_ranges(hostile, ctl, small_ranges, monkeypatch, why):
    if why == "asked for":
        monkeypatch.setenv(ranges.STREAMS_ENV, "1")
    else:
        hostile.features = []  # it would send each file to its end, whatever the range
    _add(hostile, ctl, "one")
    assert _follow(ctl, "one").artifacts_pulled == 1
    assert hostile.counters.artifact_requests == [[("small.txt", 0), ("big.bin", 0)]]


@pytest.mark.parametrize("value", ["many", "0", "99"])
def test_a_bad_stream_count_is_one_line(hostile, ctl, monkeypatch, value):
    monkeypatch.setenv(ranges.STREAMS_ENV, value)
    _add(hostile, ctl, "bad")
    with pytest.raises(LanpoolError, match=ranges.STREAMS_ENV) as err:
        _follow(ctl, "bad")
    assert "\n" not in err.value.message
    assert ctl.store.job("bad").artifacts_pulled != ARTIFACTS_REFUSED  # nothing lost: fix it and go on


@pytest.mark.parametrize(
    ("misbehaviour", "fragment"),
    [({"ignore_length": True}, "than the range asked"), ({"overlap": 4096}, "expected")],
)
def test_a_runner_sending_outside_a_range_is_refused(hostile, ctl, home, small_ranges, misbehaviour, fragment):
    _add(hostile, ctl, "evil", **misbehaviour)
    job = _follow(ctl, "evil")
    assert job.artifacts_pulled == ARTIFACTS_REFUSED and job.state is JobState.FAILED
    assert fragment in job.error and "\n" not in job.error, job.error
    assert ctl.store.artifacts("evil") == []
    assert not staging_dir(ctl.home.artifacts, "evil").exists() and _sidecars(ctl) == []
    assert not ctl.home.job_artifacts("evil").exists()


def test_an_interrupted_parallel_pull_resumes_each_range(hostile, ctl, small_ranges):
    script = _add(hostile, ctl, "cut")
    script.cut_after = 1_500_000
    with pytest.raises(LanpoolError):
        _follow(ctl, "cut")
    job = ctl.store.job("cut")
    assert job.state is JobState.DONE and not job.artifacts_pulled
    pct = ctl.artifacts.pull_percent("cut")
    assert pct is not None and 0 < pct < 100, pct
    assert "cut.part.ranges" in _sidecars(ctl) and "cut.part.done" in _sidecars(ctl)
    first = [r[0] for r in hostile.counters.artifact_requests if r[0][0] == "big.bin"]

    script.cut_after = None
    n_before = len(hostile.counters.artifact_requests)
    asyncio.run(ctl.refresh([ctl.store.job("cut")]))
    job = ctl.store.job("cut")
    assert job.synced == 1 and job.artifacts_pulled == 1, job.error
    assert (ctl.home.job_artifacts("cut") / "big.bin").read_bytes() == BLOB
    again = [r[0] for r in hostile.counters.artifact_requests[n_before:] if r[0][0] == "big.bin"]
    # each range asked again from where it got to, not from its start: what arrived is kept
    assert again and sum(n for _p, _o, n in again) < sum(n for _p, _o, n in first)
    ends = {o + n for _p, o, n in first}
    assert all(o + n in ends for _p, o, n in again)
    assert _sidecars(ctl) == [] and ctl.artifacts.pull_percent("cut") is None


def test_a_worker_connects_only_to_the_pinned_host_key(hostile, ctl, tmp_path, small_ranges):
    """Were the runner's address taken over between the controller's connection and a
    worker's, the worker refuses the impostor's host key: nothing is asked or written."""
    _add(hostile, ctl, "pin")
    staging = tmp_path / "staging"
    staging.mkdir()
    done = tmp_path / "done"
    done.write_bytes(bytes(8))
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    host, port = hostile.address.rsplit(":", 1)
    spec = {
        "host": host,
        "port": int(port),
        "host_key": " ".join(other.split()[:2]),
        "key_path": str(ctl.home.key),
        "job_id": "pin",
        "staging": str(staging),
        "prefix": "",
        "path": "big.bin",
        "size": len(BLOB),
        "start": 0,
        "end": len(BLOB),
        "done_file": str(done),
        "slot": 0,
    }
    out = subprocess.run(
        [sys.executable, "-m", "lanpool.app.transfer.range_worker"],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
    )
    line = json.loads(out.stdout)
    assert out.returncode == 1 and line["kind"] == "lost" and "different host key" in line["message"], out
    assert hostile.counters.artifact_requests == [] and list(staging.iterdir()) == []
    assert done.read_bytes() == bytes(8)


def test_a_real_agent_sends_exactly_the_ranges_asked(agent, cli, make_project, tmp_path, monkeypatch):
    """~71 MB, over the 64 MiB floor: two ranges from a real agent. Had it sent a byte past a
    range, the controller would have refused the file."""
    monkeypatch.setenv(ranges.STREAMS_ENV, "2")
    project = make_project(
        "workflows:\n  - name: wf\n    commands:\n"
        "      - 'mkdir -p out && seq 1 9000000 > out/big.txt'\n"
        "    artifacts: [out]\n"
    )
    cli("headless", "run", "wf", "--runner", agent.address, cwd=project, check=True, timeout=300)
    [entry] = json.loads(cli("headless", "status", "--json", check=True).stdout)
    [row] = entry["jobs"]
    out = tmp_path / "dl"
    cli("headless", "artifacts", "download", row["job"], "--output", str(out), check=True, timeout=300)
    want = "".join(f"{i}\n" for i in range(1, 9_000_001)).encode()
    assert len(want) > ranges.PARALLEL_MIN_BYTES
    assert (out / "out" / "big.txt").read_bytes() == want


def test_a_ranged_file_gone_from_staging_starts_over_not_refused(hostile, ctl, small_ranges):
    script = _add(hostile, ctl, "gone")
    script.cut_after = 1_500_000
    with pytest.raises(LanpoolError):
        _follow(ctl, "gone")
    (staging_dir(ctl.home.artifacts, "gone") / "big.bin").unlink()  # the done offsets now say nothing
    script.cut_after = None
    asyncio.run(ctl.refresh([ctl.store.job("gone")]))
    job = ctl.store.job("gone")
    assert job.artifacts_pulled == 1, job.error
    assert (ctl.home.job_artifacts("gone") / "big.bin").read_bytes() == BLOB


@pytest.mark.parametrize(
    ("offset", "length", "ok"),
    [(0, 0, (0, 100)), (10, 20, (10, 30)), (90, 10, (90, 100)), (100, 0, (100, 100)), (90, 11, None), (101, 0, None)],
)
def test_the_agent_serves_only_ranges_inside_a_listed_file(offset, length, ok):
    from types import SimpleNamespace

    from lanpool.agent.errors import JobError
    from lanpool.agent.ssh.session import ChannelSession
    from lanpool.protocol import ArtifactRange, GetArtifacts

    job = SimpleNamespace(record=SimpleNamespace(terminal=True, artifact_files=[{"path": "m.bin", "size": 100}]))
    msg = GetArtifacts("j", [ArtifactRange("m.bin", offset, length)])
    if ok is None:
        with pytest.raises(JobError, match="outside artifact"):
            ChannelSession._artifact_ranges(job, msg)
    else:
        assert ChannelSession._artifact_ranges(job, msg) == [("m.bin", *ok, 100)]
