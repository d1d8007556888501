"""Code goes up by content: through the real CLI and a real agent, files, modes and
links arrive; a second run after a one-file edit sends one blob; a reused
dependency's artifacts arrive; a file changing under the upload fails it.
The in-process part (unit); the rest: tests/integration/test_uploads.py."""

import pytest

from lanpool.app.transfer.snapshot import list_project_files
from lanpool.app.transfer.uploads import UploadError, WorkspaceFiles, _parts, _Progress
from lanpool.protocol import FileEntry


def test_a_file_changed_while_uploading_fails_in_one_line(tmp_path):
    f = tmp_path / "a.txt"
    f.write_bytes(b"12345")
    files = WorkspaceFiles()
    files.add(FileEntry("a.txt", "0" * 64, 5), f)  # hashed before it changed
    with pytest.raises(UploadError, match=r"a.txt changed while uploading; run again"):
        list(_parts(files, ["0" * 64], _Progress(1, 5, print)))


def test_snapshot_leaves_out_lanpool_outputs(tmp_path, monkeypatch):
    root = tmp_path / "p"
    (root / ".lanpool").mkdir(parents=True)
    (root / ".lanpool" / "state").write_text("x")
    (root / "home").mkdir()
    (root / "home" / "lanpool.db").write_text("x")
    (root / "dl" / "run-1").mkdir(parents=True)
    (root / "dl" / "run-1" / "model.ckpt").write_text("x")
    (root / "train.py").write_text("print()")
    monkeypatch.setenv("LANPOOL_HOME", str(root / "home"))
    monkeypatch.setenv("LANPOOL_DOWNLOADS", str(root / "dl"))
    assert list_project_files(root) == ["train.py"]
