"""Packing a job's artifact paths into one tar, never reaching outside the workspace."""

import os
import tarfile
from pathlib import Path, PurePosixPath

from protocol import ArtifactFile


def check_artifact_path(path: str) -> str | None:
    """Why `path` may not be an artifact path, or None if it may."""
    p = PurePosixPath(path)
    if not path or p.is_absolute():
        return f"artifact path {path!r} must be relative to the workspace"
    if ".." in p.parts:
        return f"artifact path {path!r} leaves the workspace ('..')"
    return None


def pack_artifacts(workspace: Path, paths: list[str], dest: Path) -> tuple[list[ArtifactFile], list[str]]:
    """Write the regular files under `paths` into the tar `dest`.

    Returns the files packed and one warning line per path or file skipped.
    Symlinks are followed only while they stay inside the workspace.
    """
    root = workspace.resolve()
    files: list[ArtifactFile] = []
    warnings: list[str] = []
    tmp = dest.with_name(dest.name + ".tmp")
    with tarfile.open(tmp, "w") as tar:
        for path in paths:
            problem = check_artifact_path(path)
            if problem:
                warnings.append(problem + "; skipped")
                continue
            target = workspace / path
            if not target.exists() and not target.is_symlink():
                warnings.append(f"artifact {path!r} was not produced by the job")
                continue
            for file in _walk(target, root):
                rel = file.relative_to(workspace).as_posix()
                real = file.resolve()
                if not real.is_relative_to(root):
                    warnings.append(f"artifact {rel!r} is a link that leaves the workspace; skipped")
                    continue
                if not real.is_file():
                    continue
                tar.add(real, arcname=rel, recursive=False)
                files.append(ArtifactFile(path=rel, size=real.stat().st_size))
    os.replace(tmp, dest)
    return files, warnings


def _walk(target: Path, root: Path):
    """Files under `target` (or target itself), not descending into linked dirs below it.

    A linked dir named as the artifact itself is walked when it stays inside `root`.
    """
    if not target.is_dir() or not target.resolve().is_relative_to(root):
        yield target  # a file, or a dir outside the workspace that the caller reports
        return
    for dirpath, dirnames, filenames in os.walk(target):
        base = Path(dirpath)
        for name in sorted(filenames):
            yield base / name
        for name in sorted(dirnames):
            if (base / name).is_symlink():
                yield base / name  # reported as leaving, or skipped as not a file
        dirnames[:] = sorted(d for d in dirnames if not (base / d).is_symlink())
