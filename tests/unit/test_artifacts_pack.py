"""Listing artifacts and reading them back as GetArtifacts does: what is sent, and what is refused."""

import os
from pathlib import Path

import pytest

from lanpool.agent.workspace.artifacts import ArtifactChanged, check_artifact_path, list_artifacts, read_parts
from lanpool.protocol import ArtifactFile


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    (ws / "out" / "ckpt").mkdir(parents=True)
    (ws / "model.bin").write_bytes(b"\x00" * 1000)
    (ws / "out" / "metrics.csv").write_text("epoch,loss\n0,1.5\n")
    (ws / "out" / "ckpt" / "last.ckpt").write_bytes(b"weights")
    (ws / "out" / "empty.txt").write_bytes(b"")
    return ws


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace, with a secret in it."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("TOP SECRET")
    return d


def _pack(ws: Path, paths: list[str]):
    """The files listed, the warnings, and what a controller asking for all of them gets."""
    files, warnings = list_artifacts(ws, paths)
    members = {}
    for f in files:
        try:
            members[f.path] = b"".join(d for _at, d in read_parts(ws, f.path, 0, f.size, 1 << 20))
        except ArtifactChanged:
            pass
    return files, warnings, members, list(members)


def test_files_and_nested_dirs_are_packed(workspace):
    files, warnings, members, names = _pack(workspace, ["model.bin", "out"])
    assert warnings == []
    assert sorted(files, key=lambda f: f.path) == [
        ArtifactFile("model.bin", 1000),
        ArtifactFile("out/ckpt/last.ckpt", 7),
        ArtifactFile("out/empty.txt", 0),
        ArtifactFile("out/metrics.csv", len("epoch,loss\n0,1.5\n")),
    ]
    assert members == {
        "model.bin": b"\x00" * 1000,
        "out/ckpt/last.ckpt": b"weights",
        "out/empty.txt": b"",
        "out/metrics.csv": b"epoch,loss\n0,1.5\n",
    }
    assert sorted(names) == sorted(members)  # regular files only, no directory entries
    assert not (workspace.parent / "artifacts.tar").exists()  # listed, not copied


def test_a_file_inside_a_dir_can_be_named(workspace):
    files, warnings, members, _ = _pack(workspace, ["out/ckpt/last.ckpt"])
    assert warnings == []
    assert files == [ArtifactFile("out/ckpt/last.ckpt", 7)]
    assert list(members) == ["out/ckpt/last.ckpt"]


# An absolute path is a container job's (agent/workspace/abs_artifacts.py): only a malformed one is refused here.
@pytest.mark.parametrize("path", ["../x", "out/../../x", "/", "/opt/../etc", "//opt/x", "/workspace/out", ""])
def test_paths_leaving_the_workspace_are_refused(path):
    reason = check_artifact_path(path)
    assert reason is not None and repr(path) in reason


@pytest.mark.parametrize("path", ["model.bin", "out/ckpt", ".", "a..b", "..hidden", "/opt/conda/envs/x"])
def test_paths_inside_the_workspace_are_allowed(path):
    assert check_artifact_path(path) is None


def test_dotdot_and_absolute_paths_are_skipped_with_a_warning(workspace, outside):
    (workspace.parent / "x").write_text("next to the workspace")
    files, warnings, members, _ = _pack(workspace, ["../x", "/abs", str(outside / "secret.txt"), "model.bin"])
    assert [f.path for f in files] == ["model.bin"]
    assert list(members) == ["model.bin"]
    assert len(warnings) == 3
    assert "skipped" in warnings[0] and "'../x'" in warnings[0]
    # An absolute path is a container's, never this host's: only its copied-out tar could be listed.
    assert warnings[1:] == [
        "artifact '/abs' was not produced by the job",
        f"artifact {str(outside / 'secret.txt')!r} was not produced by the job",
    ]


def test_file_link_leaving_the_workspace_is_skipped(workspace, outside):
    os.symlink(outside / "secret.txt", workspace / "out" / "stolen.txt")
    files, warnings, members, _ = _pack(workspace, ["out"])
    assert "out/stolen.txt" not in {f.path for f in files}
    assert not any(b"TOP SECRET" in data for data in members.values())
    assert any("out/stolen.txt" in w and "leaves the workspace" in w for w in warnings)
    assert "out/metrics.csv" in members  # the rest is still packed


def test_named_file_link_leaving_the_workspace_is_skipped(workspace, outside):
    os.symlink(outside / "secret.txt", workspace / "stolen.txt")
    files, warnings, members, _ = _pack(workspace, ["stolen.txt"])
    assert files == [] and members == {}
    assert len(warnings) == 1 and "leaves the workspace" in warnings[0]


@pytest.mark.parametrize("where", ["out/linked", "linked"])
def test_dir_link_leaving_the_workspace_is_skipped(workspace, outside, where):
    os.symlink(outside, workspace / where, target_is_directory=True)
    files, warnings, members, names = _pack(workspace, ["out", "linked"] if where == "linked" else ["out"])
    assert not any("secret" in n for n in names)
    assert not any(b"TOP SECRET" in data for data in members.values())
    assert any(where in w and "leaves the workspace" in w for w in warnings)


def test_relative_link_escaping_with_dotdot_is_skipped(workspace, outside):
    os.symlink("../../outside/secret.txt", workspace / "out" / "sneaky.txt")
    assert (workspace / "out" / "sneaky.txt").read_text() == "TOP SECRET"
    files, warnings, members, _ = _pack(workspace, ["out/sneaky.txt"])
    assert files == [] and members == {}
    assert any("leaves the workspace" in w for w in warnings)


def test_link_inside_the_workspace_is_followed(workspace):
    os.symlink(workspace / "model.bin", workspace / "out" / "model-link.bin")
    os.symlink("ckpt/last.ckpt", workspace / "out" / "last.ckpt")
    files, warnings, members, _ = _pack(workspace, ["out/model-link.bin", "out/last.ckpt"])
    assert warnings == []
    assert files == [ArtifactFile("out/model-link.bin", 1000), ArtifactFile("out/last.ckpt", 7)]
    assert members == {"out/model-link.bin": b"\x00" * 1000, "out/last.ckpt": b"weights"}


def test_named_dir_link_inside_the_workspace_is_followed(workspace):
    # e.g. a training script's `latest -> run-3` link, named as the artifact
    os.symlink("out/ckpt", workspace / "latest", target_is_directory=True)
    files, warnings, members, _ = _pack(workspace, ["latest"])
    assert warnings == []
    assert files == [ArtifactFile("latest/last.ckpt", 7)]
    assert members == {"latest/last.ckpt": b"weights"}


def test_dir_link_to_an_ancestor_does_not_loop(workspace):
    os.symlink("..", workspace / "out" / "up", target_is_directory=True)
    files, warnings, members, _ = _pack(workspace, ["out"])
    assert {f.path for f in files} == {"out/ckpt/last.ckpt", "out/empty.txt", "out/metrics.csv"}
    assert not any("leaves the workspace" in w for w in warnings)


def test_missing_path_is_reported_as_not_produced(workspace):
    files, warnings, members, _ = _pack(workspace, ["nope.ckpt", "model.bin"])
    assert [f.path for f in files] == ["model.bin"]
    assert warnings == ["artifact 'nope.ckpt' was not produced by the job"]


def test_no_paths_give_an_empty_tar(workspace):
    files, warnings, members, names = _pack(workspace, [])
    assert files == [] and warnings == [] and names == []


def test_dir_reached_through_an_outside_link_is_skipped_once(workspace, outside):
    (outside / "sub").mkdir()
    for i in range(5):
        (outside / "sub" / f"f{i}.txt").write_text("TOP SECRET")
    os.symlink(outside, workspace / "data", target_is_directory=True)
    files, warnings, members, _ = _pack(workspace, ["data/sub"])
    assert files == [] and members == {}
    assert len(warnings) == 1 and "'data/sub'" in warnings[0] and "leaves the workspace" in warnings[0]


def test_dot_packs_the_whole_workspace(workspace):
    files, warnings, members, _ = _pack(workspace, ["."])
    assert warnings == []
    assert set(members) == {"model.bin", "out/ckpt/last.ckpt", "out/empty.txt", "out/metrics.csv"}
