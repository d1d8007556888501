"""A container job's absolute artifacts, their tar checked member by member
(agent/workspace/abs_artifacts.py): the happy path and tars made to attack it."""

import io
import tarfile

import pytest

from lanpool.agent.workspace.abs_artifacts import (
    META_MAX,
    TarRefused,
    check_absolute,
    copy_checked,
    original_path,
    stored_name,
)


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _file(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info, data


def _entry(name: str, kind: bytes, target: str = "", mode: int = 0o755) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, target, mode
    return info, None


def _copy(data: bytes, src_root: str = "x", dst_root: str = "opt/conda/envs/x", limit: int = 1 << 30, chunked=False):
    out = io.BytesIO()
    src = [data[i : i + 7] for i in range(0, len(data), 7)] if chunked else io.BytesIO(data)
    kept, skipped = copy_checked(src, out, src_root, dst_root, limit, owner=(1234, 5678))
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        members = {m.name: m for m in tar.getmembers()}
        contents = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isreg()}
    return kept, skipped, members, contents


def test_the_mapping_both_ways():
    assert stored_name("/opt/conda/envs/x") == ".lanpool-abs/opt/conda/envs/x.tar"
    assert original_path(".lanpool-abs/opt/conda/envs/x.tar") == "/opt/conda/envs/x"
    assert original_path("out/model.tar") is None
    assert original_path(".lanpool-abs/x.txt") is None
    assert check_absolute("/root/.cache/huggingface/hub") is None
    assert check_absolute("/opt/conda/envs/x/") is None
    for bad in ("/", "/opt/../etc", "//opt", "/opt/./x", "/a\0b"):
        assert check_absolute(bad), bad
    assert "relative ('out')" in check_absolute("/workspace/out")


def test_a_conda_like_tree_keeps_modes_links_and_hard_links():
    data = _tar(
        [
            _entry("x", tarfile.DIRTYPE),
            _entry("x/bin", tarfile.DIRTYPE),
            _file("x/bin/python3.10", b"ELF", 0o4755),  # setuid dropped
            _entry("x/bin/python", tarfile.SYMTYPE, "python3.10"),
            _entry("x/bin/py", tarfile.SYMTYPE, "/opt/conda/envs/x/bin/python3.10"),  # absolute, inside
            _entry("x/lib", tarfile.DIRTYPE),
            _entry("x/lib/up", tarfile.SYMTYPE, "../bin/python"),
            _entry("x/bin/hard", tarfile.LNKTYPE, "x/bin/python3.10"),
        ]
    )
    for chunked in (False, True):  # a file, or the engine's stream of chunks
        kept, skipped, members, contents = _copy(data, chunked=chunked)
        assert skipped == [] and kept == 8
        exe = members["opt/conda/envs/x/bin/python3.10"]
        assert exe.mode == 0o755 and (exe.uid, exe.gid) == (1234, 5678)
        assert contents["opt/conda/envs/x/bin/python3.10"] == b"ELF"
        assert members["opt/conda/envs/x/bin/python"].linkname == "python3.10"
        assert members["opt/conda/envs/x/bin/py"].linkname == "python3.10"  # made relative
        assert members["opt/conda/envs/x/lib/up"].linkname == "../bin/python"
        hard = members["opt/conda/envs/x/bin/hard"]
        assert hard.islnk() and hard.linkname == "opt/conda/envs/x/bin/python3.10"


def test_a_staged_tar_is_checked_again_under_its_own_name():
    data = _tar([_entry("opt/x", tarfile.DIRTYPE), _file("opt/x/a", b"1"), _file("etc/passwd", b"root")])
    kept, skipped, members, _ = _copy(data, "opt/x", "opt/x")
    assert kept == 2 and set(members) == {"opt/x", "opt/x/a"}
    assert skipped == ["left out 'etc/passwd': outside the artifact"]


def test_members_that_climb_or_are_absolute_are_left_out():
    data = _tar(
        [
            _entry("x", tarfile.DIRTYPE),
            _file("x/../../etc/cron.d/evil", b"* * * * * root sh"),
            _file("/etc/shadow", b"root::"),
            _file("x/./a", b"a"),
            _file("x/ok", b"ok"),
        ]
    )
    kept, skipped, members, _ = _copy(data)
    assert set(members) == {"opt/conda/envs/x", "opt/conda/envs/x/ok"}
    assert len(skipped) == 3 and all("'..'" in line for line in skipped)


def test_links_leading_out_and_what_lies_below_a_link_are_left_out():
    data = _tar(
        [
            _entry("x", tarfile.DIRTYPE),
            _entry("x/etc", tarfile.SYMTYPE, "/etc"),  # a symlink to /etc
            _file("x/etc/passwd", b"root::0:0"),  # written through it: left out too
            _entry("x/up", tarfile.SYMTYPE, "../.."),
            _entry("x/self", tarfile.SYMTYPE, "."),
            _entry("x/self/esc", tarfile.SYMTYPE, "../y"),  # below a kept link
            _entry("x/back", tarfile.SYMTYPE, "self/../.."),  # climbs after descending
            _entry("x/hard", tarfile.LNKTYPE, "/etc/shadow"),
            _entry("x/hard2", tarfile.LNKTYPE, "x/missing"),
            _entry("x/dev", tarfile.CHRTYPE),
            _entry("x/fifo", tarfile.FIFOTYPE),
            _file("x/ok", b"ok"),
            _file("x/ok", b"again"),  # named twice: the first stays
        ]
    )
    kept, skipped, members, contents = _copy(data)
    assert set(members) == {"opt/conda/envs/x", "opt/conda/envs/x/self", "opt/conda/envs/x/ok"}
    assert contents["opt/conda/envs/x/ok"] == b"ok"
    assert len(skipped) == 6 and skipped[-1] == "left out 5 more members"
    assert "a symlink leading out" in skipped[0] and "below a symlink" in skipped[1]


def test_a_file_beyond_the_bound_refuses_the_tar():
    data = _tar([_entry("x", tarfile.DIRTYPE), _file("x/small", b"s" * 10), _file("x/huge", b"h" * 5000)])
    with pytest.raises(TarRefused, match="over 1000 bytes"):
        _copy(data, limit=1000)
    assert _copy(data, limit=5010)[0] == 3


def test_a_huge_pax_header_is_refused_before_it_is_read():
    info = tarfile.TarInfo("x/a")
    info.pax_headers = {"comment": "c" * (META_MAX + 10)}
    with pytest.raises(TarRefused, match="tar header"):
        _copy(_tar([(info, b"")]))


@pytest.mark.parametrize("data", [b"", b"not a tar at all" * 100])
def test_what_is_no_tar_is_refused_in_one_line(data):
    with pytest.raises(TarRefused):
        _copy(data)


def test_a_tar_cut_short_is_refused():
    data = _tar([_entry("x", tarfile.DIRTYPE), _file("x/a", b"a" * 20000)])
    with pytest.raises(TarRefused):
        _copy(data[:9000])
