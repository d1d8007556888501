"""The ArtifactData frames the agent builds in place (agent/workspace/artifacts.py frame_batches):
they decode, with every check, to what read_parts reads, and keep its refusals."""

import os
from pathlib import Path

import pytest

from lanpool.agent.workspace.artifacts import ArtifactChanged, frame_batches, read_parts
from lanpool.protocol import ArtifactData, FrameReader, decode_agent_message


def _decoded(batches) -> list[ArtifactData]:
    reader = FrameReader()
    out = []
    for buf in batches:
        for body in reader.feed(bytes(buf)):
            msg = decode_agent_message(body)
            assert isinstance(msg, ArtifactData)
            out.append(msg)
    assert reader.pending == 0
    return out


@pytest.mark.parametrize(
    "size,offset,part,batch",
    [
        (0, 0, 4096, 8192),
        (1, 0, 4096, 8192),
        (100_000, 0, 4096, 10_000),
        (300_000, 7, 65_536, 1 << 20),
        (70_000, 70_000, 4096, 8192),
    ],
)
def test_frames_decode_to_what_read_parts_reads(tmp_path: Path, size, offset, part, batch):
    ws = tmp_path / "workspace"
    (ws / "out").mkdir(parents=True)
    (ws / "out" / "big.bin").write_bytes(os.urandom(size))
    got = _decoded(frame_batches(ws, "job-1", "out/big.bin", offset, size, part, batch))
    want = list(read_parts(ws, "out/big.bin", offset, size, part))
    assert [(m.offset, m.data) for m in got] == want
    assert all(m.job_id == "job-1" and m.path == "out/big.bin" for m in got)


def test_frames_of_a_file_that_shrank_are_refused_and_one_that_grew_is_cut(tmp_path: Path):
    ws = tmp_path / "workspace"
    (ws / "out").mkdir(parents=True)
    big = ws / "out" / "big.bin"
    big.write_bytes(b"y" * 200_000)  # listed at 100_000, grew since
    assert b"".join(m.data for m in _decoded(frame_batches(ws, "j", "out/big.bin", 0, 100_000, 4096, 8192))) == (
        b"y" * 100_000
    )
    os.truncate(big, 10)
    with pytest.raises(ArtifactChanged, match="shrank"):
        list(frame_batches(ws, "j", "out/big.bin", 0, 100_000, 4096, 8192))


def test_frames_never_read_through_a_link_or_a_fifo(tmp_path: Path):
    ws = tmp_path / "workspace"
    (ws / "out").mkdir(parents=True)
    (tmp_path / "secret").write_text("TOP SECRET")
    (ws / "out" / "a.txt").symlink_to(tmp_path / "secret")
    os.mkfifo(ws / "out" / "f")
    for name in ("out/a.txt", "out/f"):
        with pytest.raises(ArtifactChanged):
            list(frame_batches(ws, "j", name, 0, 10, 4096, 8192))
