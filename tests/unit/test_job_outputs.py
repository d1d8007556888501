"""Files a job leaves in its workspace are untrusted: the metrics file, artifacts, and the
tars the agent unpacks. A link to a host file or a FIFO must do nothing: no data shipped,
the agent responsive. Real agents (process executor; Docker too when an engine answers).
The in-process part (unit); the rest: tests/integration/test_job_outputs.py, tests/system/test_job_outputs.py."""

import os
import tarfile
import threading
from pathlib import Path

import pytest

from lanpool.agent.workspace.artifacts import ArtifactChanged, list_artifacts, read_parts
from lanpool.agent.workspace.files import NotARegularFile, open_regular

STOLEN = '{"step": 1, "name": "stolen", "value": 1}\n'


def _host_file(tmp_path: Path) -> Path:
    """A file outside every workspace, that a job would like to read: metric-shaped, so a leak shows."""
    path = tmp_path / "host-secret.jsonl"
    path.write_text(STOLEN)
    return path


def test_open_regular_refuses_links_fifos_and_dirs(tmp_path):
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    (ws / "d" / "f").write_text("ok")
    os.symlink(_host_file(tmp_path), ws / "d" / "link")
    os.mkfifo(ws / "d" / "fifo")
    os.symlink(tmp_path, ws / "up")
    fd = open_regular(ws, "d/f")
    try:
        assert os.read(fd, 10) == b"ok"
    finally:
        os.close(fd)
    for rel in ("d/link", "d/fifo", "up/host-secret.jsonl", "d", "../host-secret.jsonl", "/etc/hostname"):
        with pytest.raises(NotARegularFile):
            open_regular(ws, rel)
    with pytest.raises(FileNotFoundError):
        open_regular(ws, "d/missing")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    (ws / "out").mkdir(parents=True)
    (ws / "out" / "a.txt").write_text("A")
    (ws / "out" / "b.txt").write_text("B")
    return ws


def _swap_after_resolve(monkeypatch, victim: Path, swap) -> None:
    """Make `victim` change (by `swap`) right after the packer resolved its path: the window
    between the check and the read that a racing job would use."""
    real_resolve = Path.resolve

    def resolve(self, strict=False):
        result = real_resolve(self, strict)
        if self == victim and not getattr(resolve, "done", False):
            resolve.done = True
            swap(victim)
        return result

    monkeypatch.setattr(Path, "resolve", resolve)


def _pack_in_thread(ws: Path, paths: list[str]):
    """List, then read each file as GetArtifacts does, in a thread (a FIFO must not hang it)."""
    result: dict = {}

    def work() -> None:
        files, warnings = list_artifacts(ws, paths)
        members = {}
        for f in files:
            try:
                members[f.path] = (tarfile.REGTYPE, b"".join(d for _at, d in read_parts(ws, f.path, 0, f.size, 4096)))
            except ArtifactChanged:
                pass
        result["out"] = ((files, warnings), members)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "listing or reading hangs on a FIFO"
    return result["out"]


def test_a_file_swapped_for_a_link_after_the_check_is_not_followed(workspace, tmp_path, monkeypatch):
    secret = _host_file(tmp_path)

    def to_link(path: Path) -> None:
        path.unlink()
        os.symlink(secret, path)

    _swap_after_resolve(monkeypatch, workspace / "out" / "a.txt", to_link)
    (files, _warnings), members = _pack_in_thread(workspace, ["out"])
    assert [f.path for f in files] == ["out/b.txt"]
    assert members == {"out/b.txt": (tarfile.REGTYPE, b"B")}  # no link member, no secret


def test_a_file_swapped_for_a_fifo_after_the_check_is_not_waited_on(workspace, monkeypatch):
    def to_fifo(path: Path) -> None:
        path.unlink()
        os.mkfifo(path)

    _swap_after_resolve(monkeypatch, workspace / "out" / "a.txt", to_fifo)
    (files, _warnings), members = _pack_in_thread(workspace, ["out"])
    assert [f.path for f in files] == ["out/b.txt"]
    assert set(members) == {"out/b.txt"}


def test_a_file_that_changed_after_it_was_listed_is_sent_at_its_listed_size_or_refused(workspace):
    big = workspace / "out" / "big.bin"
    big.write_bytes(b"x" * 100_000)
    files, _warnings = list_artifacts(workspace, ["out"])
    assert {f.path: f.size for f in files}["out/big.bin"] == 100_000
    big.write_bytes(b"y" * 200_000)  # grew: what was listed goes, no more
    assert b"".join(d for _at, d in read_parts(workspace, "out/big.bin", 0, 100_000, 4096)) == b"y" * 100_000
    os.truncate(big, 10)  # shrank: refused where it ends, not padded
    with pytest.raises(ArtifactChanged, match="shrank"):
        list(read_parts(workspace, "out/big.bin", 0, 100_000, 4096))
    assert [at for at, _d in read_parts(workspace, "out/big.bin", 4, 10, 4)] == [4, 8]  # from an offset
