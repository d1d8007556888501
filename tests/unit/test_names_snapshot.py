"""Run names, and the code snapshot sent with each job."""

import hashlib
import os
import random
import re
import subprocess
from pathlib import Path

import pytest

from lanpool.app.runs.names import ADJECTIVES, ANIMALS, new_run_name
from lanpool.app.transfer.snapshot import build_manifest, list_project_files

NAME = re.compile(r"^([a-z]+)-([a-z]+)-([1-9][0-9]*)$")


# -- run names ---------------------------------------------------------------------


def _candidates(seed: int, count: int) -> list[str]:
    """The first `count` names new_run_name tries with this seed."""
    tried: list[str] = []
    new_run_name(lambda n: (tried.append(n), len(tried) < count)[1], random.Random(seed))
    assert len(tried) == count
    return tried


@pytest.mark.parametrize("seed", range(20))
def test_name_format(seed):
    name = new_run_name(lambda n: False, random.Random(seed))
    m = NAME.match(name)
    assert m, name
    adjective, animal, number = m.groups()
    assert adjective in ADJECTIVES and animal in ANIMALS
    assert 1 <= int(number) <= 9


def test_same_seed_gives_the_same_name():
    assert new_run_name(lambda n: False, random.Random(7)) == new_run_name(lambda n: False, random.Random(7))


@pytest.mark.parametrize("seed", [0, 1, 42])
def test_taken_names_are_avoided(seed):
    first = _candidates(seed, 30)
    taken = set(first[:10])
    asked = []

    def is_taken(n):
        asked.append(n)
        return n in taken

    name = new_run_name(is_taken, random.Random(seed))
    assert name not in taken
    assert name == next(c for c in first if c not in taken)  # the first free candidate, in order
    assert asked[-1] == name and all(a in taken for a in asked[:-1])


def test_numbers_widen_once_collisions_are_common():
    tried: list[str] = []
    with pytest.raises(RuntimeError):
        new_run_name(lambda n: (tried.append(n), True)[1], random.Random(3))
    assert len(tried) == 1000
    numbers = [int(NAME.match(n).group(3)) for n in tried]
    assert max(numbers[:100]) <= 9
    assert max(numbers[900:]) > 9  # attempts 900+ draw from 1..90
    assert all(n <= 90 for n in numbers)


# -- snapshot --------------------------------------------------------------------------


@pytest.fixture
def git_env(monkeypatch, tmp_path: Path):
    """Git that ignores the user's and system's config, and finds no repo above tmp_path."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(var, raising=False)


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def _contents(manifest) -> dict[str, bytes]:
    """Each regular file's bytes, checked against the digest the manifest names for it."""
    out = {}
    for e in manifest.entries:
        if not e.link:
            data = (manifest.root / e.path).read_bytes()
            assert hashlib.sha256(data).hexdigest() == e.sha256 and len(data) == e.size
            out[e.path] = data
    return out


@pytest.fixture
def repo(tmp_path: Path, git_env) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "test@example.com")
    _git(root, "config", "user.name", "Test")
    _git(root, "config", "commit.gpgsign", "false")
    (root / "train.py").write_text("print('committed')\n")
    (root / "src" / "model.py").write_text("LAYERS = 2\n")
    (root / ".gitignore").write_text("*.ckpt\ndata/\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "initial")
    (root / "train.py").write_text("print('edited, not committed')\n")  # modified tracked file
    (root / "notes.md").write_text("untracked\n")  # untracked, not ignored
    (root / "model.ckpt").write_bytes(b"big weights")  # ignored
    (root / "data").mkdir()
    (root / "data" / "train.csv").write_text("1,2\n")  # ignored dir
    return root


def test_git_snapshot_has_tracked_and_untracked_but_not_ignored(repo):
    snap = build_manifest(repo)
    contents = _contents(snap)
    assert set(contents) == {".gitignore", "notes.md", "src/model.py", "train.py"}
    assert len(snap.entries) == 4
    assert contents["train.py"] == b"print('edited, not committed')\n"  # the working tree, not HEAD
    assert contents["notes.md"] == b"untracked\n"


def test_git_snapshot_skips_deleted_tracked_files(repo):
    (repo / "src" / "model.py").unlink()
    assert "src/model.py" not in list_project_files(repo)
    assert "src/model.py" not in _contents(build_manifest(repo))


def test_snapshot_is_deterministic(repo):
    first = build_manifest(repo)
    os.utime(repo / "train.py", (1_000_000, 1_000_000))  # mtimes do not matter
    second = build_manifest(repo)
    assert first.entries == second.entries
    assert first.digest == second.digest and len(first.digest) == 64


def test_a_changed_file_changes_the_hash(repo):
    before = build_manifest(repo).digest
    (repo / "src" / "model.py").write_text("LAYERS = 3\n")
    after = build_manifest(repo).digest
    assert after != before
    (repo / "src" / "model.py").write_text("LAYERS = 2\n")
    assert build_manifest(repo).digest == before


def test_a_new_untracked_file_changes_the_hash_but_an_ignored_one_does_not(repo):
    before = build_manifest(repo).digest
    (repo / "other.ckpt").write_bytes(b"ignored")
    assert build_manifest(repo).digest == before
    (repo / "extra.py").write_text("x = 1\n")
    assert build_manifest(repo).digest != before


def test_entries_are_sorted_with_modes(repo):
    os.chmod(repo / "train.py", 0o775)
    entries = build_manifest(repo).entries
    assert [e.path for e in entries] == sorted(e.path for e in entries)
    modes = {e.path: e.mode for e in entries}
    assert modes["train.py"] == 0o755 and modes["notes.md"] == 0o644  # group/other write dropped


def test_symlinks_are_kept_as_links(repo):
    os.symlink("src/model.py", repo / "model_link.py")
    link = next(e for e in build_manifest(repo).entries if e.path == "model_link.py")
    assert link.link == "src/model.py" and not link.sha256


def test_hard_linked_files_are_all_in_the_snapshot(repo):
    os.link(repo / "src" / "model.py", repo / "src" / "model_copy.py")
    contents = _contents(build_manifest(repo))
    assert contents["src/model.py"] == contents["src/model_copy.py"] == b"LAYERS = 2\n"


def test_outside_git_bulky_dirs_are_skipped(tmp_path: Path, git_env):
    root = tmp_path / "plain"
    for rel, text in {
        "train.py": "x",
        "pkg/mod.py": "y",
        "pkg/__pycache__/mod.cpython-311.pyc": "z",
        "__pycache__/train.cpython-311.pyc": "z",
        ".venv/lib/site.py": "v",
        "venv/bin/python": "v",
        "node_modules/a/index.js": "n",
        ".git/HEAD": "not really a repo",
        ".hidden/kept.txt": "h",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    snap = build_manifest(root)
    assert set(_contents(snap)) == {"train.py", "pkg/mod.py", ".hidden/kept.txt"}
    assert len(snap.entries) == 3
    assert build_manifest(root).digest == snap.digest


def test_git_snapshot_of_a_subdirectory_holds_only_its_files(repo):
    contents = _contents(build_manifest(repo / "src"))
    assert set(contents) == {"model.py"}


def test_outside_git_no_git_process_is_started(tmp_path: Path, git_env, monkeypatch):
    """Outside any repository `git ls-files` could only fail: the walk is taken without it."""
    root = tmp_path / "plain"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("x")

    def no_process(*a, **kw):
        raise AssertionError(f"started {a[0]!r}")

    monkeypatch.setattr(subprocess, "run", no_process)
    assert list_project_files(root) == ["pkg/mod.py"]


def test_a_linked_project_dir_into_a_repo_is_still_a_git_snapshot(repo, tmp_path: Path):
    link = tmp_path / "elsewhere" / "proj"
    link.parent.mkdir()
    link.symlink_to(repo, target_is_directory=True)
    assert set(list_project_files(link)) == {".gitignore", "notes.md", "src/model.py", "train.py"}  # no model.ckpt


def test_git_dir_in_the_environment_still_asks_git(tmp_path: Path, git_env, monkeypatch, repo):
    """GIT_DIR names a repository that no .git above the project shows: git is asked."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.py").write_text("a")
    (work / "b.ckpt").write_text("b")
    (work / ".gitignore").write_text("*.ckpt\n")
    monkeypatch.setenv("GIT_DIR", str(repo / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(work))
    assert "b.ckpt" not in list_project_files(work)  # ignored: git answered (a walk keeps it)
