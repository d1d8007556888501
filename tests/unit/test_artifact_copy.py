"""A job's artifacts copied out of the controller's store (app/transfer/files.py copy_file), as
`artifacts download` and a dependent job's placement do."""

from lanpool.app.transfer.files import copy_file


def test_copying_the_same_artifacts_again_leaves_no_temporary_file(tmp_path):
    """`artifacts download` twice into one directory: the second hard link is renamed over the
    first, a rename between two links of one inode does nothing, and its temporary name stayed."""
    store, out = tmp_path / "store", tmp_path / "out"
    (store / "ck").mkdir(parents=True)
    out.mkdir()
    (store / "ck" / "last.ckpt").write_bytes(b"weights")
    (store / "metrics.csv").write_text("a,b\n")
    for _ in range(3):
        assert copy_file(store, ["ck", "last.ckpt"], out) == 7
        assert copy_file(store, ["metrics.csv"], out) == 4
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == ["ck", "ck/last.ckpt", "metrics.csv"]
    assert (out / "ck" / "last.ckpt").read_bytes() == b"weights"
    assert (out / "metrics.csv").stat().st_ino == (store / "metrics.csv").stat().st_ino  # a link, not a copy


def test_a_file_changed_in_the_store_replaces_the_copy(tmp_path):
    store, out = tmp_path / "store", tmp_path / "out"
    store.mkdir()
    out.mkdir()
    (store / "a.txt").write_text("one")
    copy_file(store, ["a.txt"], out)
    (store / "a.txt").unlink()
    (store / "a.txt").write_text("two!")
    assert copy_file(store, ["a.txt"], out) == 4
    assert [p.name for p in out.iterdir()] == ["a.txt"] and (out / "a.txt").read_text() == "two!"
