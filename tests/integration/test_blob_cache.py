"""The runner's blob cache and staging, attacked frame by frame through a real agent.

Every PutBlob is untrusted: wrong content, gaps, size lies and oversized parts are
refused in one line and leave nothing behind; a SubmitJob.files list cannot write
outside its workspace or name a blob the runner does not have.
The part with real agents and the CLI (integration); the rest: tests/unit/test_blob_cache.py."""

import asyncio
import os
import time
from pathlib import Path

import asyncssh
import pytest

from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key
from lanpool.protocol import (
    PROTOCOL_VERSION,
    BlobStored,
    ClientHello,
    Error,
    ErrorCode,
    FileEntry,
    HaveBlobs,
    Hello,
    JobAccepted,
    JobStatus,
    MissingBlobs,
    PutBlob,
    SubmitJob,
)
from tests.raw_channel import RawChannel
from tests.unit.test_blob_cache import _sha


async def _channel(agent):
    conn = await asyncssh.connect(
        agent.host,
        agent.port,
        username="lanpool",
        client_keys=[load_or_create_client_key(ControllerHome.default().key)],
        known_hosts=None,
        agent_path=None,
        config=[],
    )
    proc = await conn.create_process(subsystem="lanpool", encoding=None)
    chan = RawChannel(proc)
    assert isinstance(await chan.recv(), Hello)
    chan.send(ClientHello(PROTOCOL_VERSION, "test"))
    return conn, chan


def _blobs(agent) -> Path:
    return agent.data_dir / "blobs"


def _parts_left(agent) -> list[str]:
    return os.listdir(_blobs(agent) / "tmp")


async def _put_attacks(agent) -> None:
    conn, chan = await _channel(agent)
    async with conn:
        good = b"hello blob\n"
        # Wrong content for its name.
        chan.send(PutBlob(_sha(b"other"), 0, len(good), good))
        reply = await chan.recv()
        assert isinstance(reply, Error) and "does not hash to its name" in reply.message
        # A gap: the second part skips bytes.
        sha = _sha(good)
        chan.send(PutBlob(sha, 0, len(good), good[:4]))
        chan.send(PutBlob(sha, 6, len(good), good[6:]))
        reply = await chan.recv()
        assert isinstance(reply, Error) and "expected 4" in reply.message
        # A size lie: the size changes between parts.
        chan.send(PutBlob(sha, 0, len(good), good[:4]))
        chan.send(PutBlob(sha, 4, len(good) + 100, good[4:]))
        reply = await chan.recv()
        assert isinstance(reply, Error) and "says" in reply.message
        # More bytes than declared.
        chan.send(PutBlob(sha, 0, 3, good))
        reply = await chan.recv()
        assert isinstance(reply, Error) and "more than the 3 bytes" in reply.message
        # Larger than the disk can take.
        chan.send(PutBlob(sha, 0, 2**61, b"x"))
        reply = await chan.recv()
        assert isinstance(reply, Error) and ("does not fit" in reply.message or "in progress" in reply.message)
        # A part of no upload.
        chan.send(PutBlob(sha, 5, len(good), good[5:]))
        reply = await chan.recv()
        assert isinstance(reply, Error) and "of no upload" in reply.message
        assert not (_blobs(agent) / sha).exists()
        assert _parts_left(agent) == []
        # The same channel still works: the real blob is stored, and then known.
        chan.send(PutBlob(sha, 0, len(good), good[:5]))
        chan.send(PutBlob(sha, 5, len(good), good[5:]))
        assert await chan.recv() == BlobStored(sha)
        assert (_blobs(agent) / sha).read_bytes() == good
        chan.send(HaveBlobs([sha, _sha(b"nope")]))
        assert await chan.recv() == MissingBlobs([_sha(b"nope")])
        # A blob never completed: dropped when the channel closes.
        big = os.urandom(300_000)
        chan.send(PutBlob(_sha(big), 0, len(big), big[:1000]))
        await asyncio.sleep(0.5)
        assert len(_parts_left(agent)) == 1
    deadline = time.time() + 10
    while _parts_left(agent) and time.time() < deadline:
        await asyncio.sleep(0.1)
    assert _parts_left(agent) == []
    assert not (_blobs(agent) / _sha(big)).exists()


def test_put_blob_lies_are_refused_and_leave_nothing(agent):
    asyncio.run(_put_attacks(agent))


async def _submit(agent, job_id: str, files: list[FileEntry], blobs: dict[str, bytes]) -> JobStatus:
    conn, chan = await _channel(agent)
    async with conn:
        for sha, data in blobs.items():
            chan.send(PutBlob(sha, 0, len(data), data))
            assert await chan.recv() == BlobStored(sha)
        chan.send(SubmitJob(job_id, "r", "w", ["ls -la; cat f.txt || true"], files=files))
        reply = await chan.recv()
        if isinstance(reply, Error):
            raise AssertionError(reply.message)
        assert isinstance(reply, JobAccepted)
        status = await chan.recv()
        assert isinstance(status, JobStatus)
        return status


BAD_FILES = {
    "dot-dot": ([FileEntry("../escape.txt", "S", 5)], "not a normalised path"),
    "dot-dot inside": ([FileEntry("a/../../escape.txt", "S", 5)], "not a normalised path"),
    "absolute": ([FileEntry("/tmp/escape.txt", "S", 5)], "not a normalised path"),
    "not normalised": ([FileEntry("a//b.txt", "S", 5)], "not a normalised path"),
    "link leaving": ([FileEntry("out", link="../../..")], "leads out of the workspace"),
    "absolute link": ([FileEntry("out", link="/etc")], "leads out of the workspace"),
    "link chain": (
        [FileEntry("a", link="b"), FileEntry("b", link="c/../.."), FileEntry("c", link=".")],
        "leads out of the workspace",
    ),
    "file through a link": ([FileEntry("d", link="/tmp"), FileEntry("d/x.txt", "S", 5)], "as a file and as a dir"),
    "size lie": ([FileEntry("f.txt", "S", 999)], "its blob holds 5"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_submit_files_cannot_leave_the_workspace(agent, tmp_path, case):
    data = b"evil\n"
    files, problem = BAD_FILES[case]
    files = [FileEntry(f.path, _sha(data), f.size, f.mode, f.link) if f.sha256 == "S" else f for f in files]
    job_id = f"bad-{abs(hash(case)) % 10**8}"
    status = asyncio.run(_submit(agent, job_id, files, {_sha(data): data}))
    assert status.state == "FAILED", status
    assert problem in status.error and "\n" not in status.error
    job_dir = agent.data_dir / "jobs" / job_id
    for outside in (Path("/tmp/escape.txt"), job_dir / "escape.txt", agent.data_dir / "escape.txt"):
        assert not outside.exists() or outside.read_bytes() != data
    ws = job_dir / "workspace"
    root = ws.resolve()
    for dirpath, dirnames, filenames in os.walk(ws):  # whatever stayed resolves inside
        for name in dirnames + filenames:
            assert (Path(dirpath) / name).resolve().is_relative_to(root)


async def _refused_submit(agent, job_id: str, files: list[FileEntry]) -> Error:
    conn, chan = await _channel(agent)
    async with conn:
        chan.send(SubmitJob(job_id, "r", "w", ["cat f.txt"], files=files))
        reply = await chan.recv()
        assert isinstance(reply, Error), reply
        return reply


def test_a_blob_not_on_the_runner_is_asked_for_again_and_no_job_is_left(agent):
    reply = asyncio.run(_refused_submit(agent, "nb-1", [FileEntry("f.txt", "0" * 64, 5)]))
    assert reply.code == ErrorCode.MISSING_BLOBS and "is not on this runner (send it again)" in reply.message
    assert not (agent.data_dir / "jobs" / "nb-1").exists()  # as if never sent: the controller submits again


@pytest.mark.parametrize("damage", ["same size", "shorter"])
def test_a_blob_damaged_in_the_cache_is_never_staged(agent, damage):
    """What job code that reached the cache could do (`../../../blobs/SHA` from a workspace):
    the next job naming that file gets the right bytes or none, never the written ones."""
    data = b"echo the right bytes\n"
    sha = _sha(data)
    status = asyncio.run(_submit(agent, "ok-1", [FileEntry("f.txt", sha, len(data))], {sha: data}))
    assert status.state != "FAILED", status
    blob = _blobs(agent) / sha
    blob.write_bytes(b"echo POISONED bytes!\n"[: len(data)] if damage == "same size" else data[:-3])
    reply = asyncio.run(_refused_submit(agent, "ok-2", [FileEntry("f.txt", sha, len(data))]))
    assert reply.code == ErrorCode.MISSING_BLOBS and "damaged here, removed" in reply.message
    assert not blob.exists() and not (agent.data_dir / "jobs" / "ok-2").exists()
    # Sent again, it is staged as it should be.
    status = asyncio.run(_submit(agent, "ok-3", [FileEntry("f.txt", sha, len(data))], {sha: data}))
    assert status.state != "FAILED", status
    assert (agent.data_dir / "jobs" / "ok-3" / "workspace" / "f.txt").read_bytes() == data


def test_good_files_and_links_are_staged(agent):
    data, script = b"hello\n", b"#!/bin/sh\necho hi\n"
    files = [
        FileEntry("f.txt", _sha(data), len(data), 0o644),
        FileEntry("bin/run.sh", _sha(script), len(script), 0o4777),  # setuid and o+w dropped
        FileEntry("link", link="f.txt"),
        FileEntry("bin/up", link="../f.txt"),
    ]
    status = asyncio.run(_submit(agent, "good-1", files, {_sha(data): data, _sha(script): script}))
    assert status.state != "FAILED", status
    ws = agent.data_dir / "jobs" / "good-1" / "workspace"
    assert (ws / "f.txt").read_bytes() == data
    assert (ws / "bin" / "run.sh").stat().st_mode & 0o7777 == 0o755
    assert os.readlink(ws / "link") == "f.txt" and (ws / "bin" / "up").read_bytes() == data
    # A copy, not the cache's file: a job changing its files leaves the blob intact.
    assert (ws / "f.txt").stat().st_ino != (agent.data_dir / "blobs" / _sha(data)).stat().st_ino


async def _local_failure(agent) -> None:
    conn, chan = await _channel(agent)
    async with conn:
        good = b"a blob the disk refuses\n"
        tmp = _blobs(agent) / "tmp"
        tmp.rename(tmp.with_name("tmp.away"))
        tmp.write_text("not a directory")  # every part file now fails to open: an OSError on the runner
        try:
            chan.send(PutBlob(_sha(good), 0, len(good), good))
            reply = await asyncio.wait_for(chan.recv(), 30)
        finally:
            tmp.unlink()
            tmp.with_name("tmp.away").rename(tmp)
        # Said, with its cause, on a channel that stays open (not a silent close the controller
        # could only call "runner closed the connection").
        assert isinstance(reply, Error) and reply.code == "internal", reply
        assert "the runner failed on this request" in reply.message and "Not a directory" in reply.message
        chan.send(PutBlob(_sha(good), 0, len(good), good))
        assert isinstance(await asyncio.wait_for(chan.recv(), 30), BlobStored)


def test_a_local_failure_on_the_runner_is_an_error_reply_and_the_channel_stays(agent):
    asyncio.run(_local_failure(agent))
