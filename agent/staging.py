"""A job's workspace: its snapshot and inputs, unpacked from tars uploaded to the runner.

The tars are untrusted (an input may be another runner's artifacts); `extract_tar`
states what it lets through.
"""

import asyncio
import os
import stat
import tarfile
from pathlib import Path

from agent.home import AgentHome
from agent.job_request import JobError
from agent.workspace_files import remove_entry
from protocol import ErrorCode, SubmitJob
from protocol.errors import clip


async def stage_workspace(home: AgentHome, req: SubmitJob, workspace: Path) -> Path:
    """Unpack the snapshot, then each input over it; the job's working directory.

    Raises JobError (the request is at fault), OSError or tarfile.TarError.
    """
    if req.snapshot:
        await asyncio.to_thread(extract_tar, home, req.snapshot, (home.snapshots,), workspace, True)
    for tar in req.inputs:
        await asyncio.to_thread(extract_tar, home, tar, (home.artifacts, home.inputs), workspace, False)
    working_dir = (workspace / req.working_dir).resolve()
    if not working_dir.is_relative_to(workspace.resolve()) or not working_dir.is_dir():
        raise JobError(ErrorCode.BAD_REQUEST, f"working_dir {req.working_dir!r} is not a directory in the workspace")
    return working_dir


def extract_tar(home: AgentHome, tar_path: str, allowed: tuple[Path, ...], workspace: Path, links: bool) -> None:
    """Unpack an uploaded tar (snapshot or input) that must sit in one of the `allowed` dirs.

    The tar is untrusted (an input may be another runner's artifacts): a plain
    tar only (mode "r:": no compression to inflate 100 KB into gigabytes);
    regular files and directories, no hard links, devices, FIFOs or sparse
    files, so what is written is at most the tar's own size; symlinks only
    with `links` (a snapshot keeps the repo's links), created after every
    file (nothing of the tar is written through one), and each must resolve
    inside the workspace once all exist.
    """
    src = (home.transfer / tar_path).resolve()
    missing = JobError(ErrorCode.BAD_REQUEST, f"{clip(repr(tar_path))} was not uploaded to this runner")
    if not any(src.is_relative_to(d.resolve()) for d in allowed):
        raise missing
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        raise missing from None
    with os.fdopen(fd, "rb") as fh:
        tar_size = os.fstat(fd).st_size
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise missing
        with tarfile.open(fileobj=fh, mode="r:") as tar:
            files, symlinks, total = [], [], 0
            for member in tar:  # headers only: nothing is written before every member is checked
                if member.isdir() or (member.isreg() and not member.issparse()):
                    total += member.size
                    if total > tar_size:
                        raise tarfile.TarError(f"{tar_path}: members claim more bytes than the tar holds")
                    files.append(member)
                elif member.issym() and links:
                    symlinks.append(member)
                else:
                    raise JobError(
                        ErrorCode.BAD_REQUEST,
                        f"{clip(repr(tar_path))}: {clip(repr(member.name))} is "
                        f"{_member_kind(member)}: only files and directories"
                        f"{' (and links inside the workspace)' if links else ''} "
                        "are unpacked",
                    )
            tar.extractall(workspace, members=files, filter="data")  # 'data' refuses paths leaving the dir
            tar.extractall(workspace, members=symlinks, filter="data")
    root = workspace.resolve()
    # Checked with all links in place, so a chain of links (each fine alone) cannot lead out either.
    leaving = [m.name for m in symlinks if not (workspace / m.name).resolve().is_relative_to(root)]
    for name in leaving:
        remove_entry(workspace, name)  # nothing later may follow it (its parents are not followed either)
    if leaving:
        raise JobError(
            ErrorCode.BAD_REQUEST, f"{clip(repr(tar_path))}: link {clip(repr(leaving[0]))} leads out of the workspace"
        )


def _member_kind(member: tarfile.TarInfo) -> str:
    if member.islnk():
        return "a hard link"
    if member.issym():
        return "a symlink"
    if member.issparse():
        return "a sparse file"
    if member.isfifo():
        return "a FIFO"
    if member.isdev():
        return "a device"
    return f"of tar type {member.type!r}"
