"""Into a running job: one command, or a shell on a PTY, inside it, for an authorized controller.

The SSH session channel's exec request is the only door, and it takes one fixed
grammar, validated like any peer input: `lanpool-exec JOB_ID [--node K] [--sshd KEY | --dev-sshd KEY] [-- ARGV...]`
(no ARGV: an interactive shell; K: a node of a job this runner runs on several, a Slurm
allocation). The job must be running on this runner. The request is served on the channel
itself: in a process job by agent/shell/process_job.py, in a container job through `docker
exec` (agent/shell/container.py), on node K of a Slurm job as a job step of its own
(agent/shell/slurm_job.py); asked `--sshd`, in a one-time OpenSSH server (agent/shell/sshd.py);
asked `--dev-sshd` with the key that owns the job, in its dev sshd (agent/shell/dev_sshd.py).
"""

import contextlib
import logging
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import asyncssh

from lanpool.agent.errors import JobError
from lanpool.agent.executors import ExecutorError
from lanpool.agent.executors.slurm_job import SlurmExecution
from lanpool.agent.jobs.job import Job
from lanpool.agent.jobs.manager import JobManager
from lanpool.agent.jobs.owner import Owner, owns
from lanpool.agent.jobs.request import check_job_id
from lanpool.agent.shell.process_job import exec_in_process_job
from lanpool.protocol.shell_sshd import DEV_SSHD_FLAG, SSHD_FLAG, SSHD_UNUSED, key_blob_b64
from lanpool.protocol.wire import EXEC_VERB, MAX_EXEC_NODE, NODE_FLAG

if TYPE_CHECKING:
    from lanpool.agent.direct import DirectSender

log = logging.getLogger(__name__)

_MAX_COMMAND = 64 * 1024  # characters of an exec request
NOT_RUNNING_EXIT = 255  # as ssh reports a session that could not run


@dataclass(frozen=True)
class ShellRequest:
    job_id: str
    argv: tuple[str, ...]  # empty: an interactive shell
    sshd_key: str = ""  # a one-time sshd for this key's holder (agent/shell/sshd.py): base64 of an ed25519 key
    node: int | None = None  # node K of a job this runner runs on several nodes (a Slurm allocation)
    dev: bool = False  # sshd_key asks for the job's dev sshd (agent/shell/dev_sshd.py), not a one-time shell

    def describe(self) -> str:
        return shlex.join(self.argv)[:200] if self.argv else "(shell)"


def parse_exec(command: str) -> ShellRequest | None:
    """The request an exec command names, or None when it is not the one grammar allowed."""
    if len(command) > _MAX_COMMAND or "\0" in command:
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if len(words) < 2 or words[0] != EXEC_VERB:
        return None
    try:
        check_job_id(words[1])
    except JobError:
        return None
    rest = words[2:]
    node = None
    if rest and rest[0] == NODE_FLAG:
        if len(rest) < 2 or not rest[1].isascii() or not rest[1].isdigit() or int(rest[1]) >= MAX_EXEC_NODE:
            return None
        node, rest = int(rest[1]), rest[2:]
    sshd_key, dev = "", False
    if rest and rest[0] in (SSHD_FLAG, DEV_SSHD_FLAG):  # one of the two, once
        key = key_blob_b64(rest[1]) if len(rest) > 1 else None
        if key is None:
            return None
        sshd_key, dev, rest = key, rest[0] == DEV_SSHD_FLAG, rest[2:]
    if rest and (rest[0] != "--" or len(rest) == 1):
        return None
    if dev and rest:  # a dev sshd runs what its ssh client asks, session by session: no ARGV here
        return None
    return ShellRequest(words[1], tuple(rest[1:]), sshd_key, node, dev)


def running_job(manager: JobManager, job_id: str, owner: Owner | None) -> Job | None:
    job = manager.jobs.get(job_id)
    if job is None or not owns(owner, job.record) or job.record.terminal or job.execution is None:
        return None
    return job


async def serve_exec(
    process: asyncssh.SSHServerProcess[bytes],
    manager: JobManager,
    request: ShellRequest,
    owner: Owner | None,
    direct: "DirectSender | None" = None,
    dev_host_key: Path | None = None,
) -> None:
    """Run the request in its job, if `owner` submitted it, relaying the channel (asked `--sshd`
    with `direct` given, in a one-time sshd listening in its ports; `--dev-sshd`, in its dev sshd
    with the runner's `dev_host_key`); the channel's exit status is the command's. Another
    controller's job does not exist here."""
    job = running_job(manager, request.job_id, owner)
    if job is None:
        known = manager.jobs.get(request.job_id)
        if known is not None and not owns(owner, known.record):
            known = None
        why = f"ended ({known.record.state})" if known and known.record.terminal else "is not running"
        if known is None:
            why = "does not exist"
        process.stderr.write(f"lanpool: job {request.job_id} {why} on this runner\n".encode())
        process.exit(NOT_RUNNING_EXIT)
        return
    slurm = isinstance(job.execution, SlurmExecution)
    if request.node is not None and not slurm:
        process.stderr.write(f"lanpool: job {request.job_id} runs on one node here: drop --node\n".encode())
        process.exit(NOT_RUNNING_EXIT)
        return
    if request.dev and not _owner_key(owner, request.sshd_key):
        # Only the controller that owns the job logs in to its dev sshd, with the key it owns it by:
        # an `ssh-config` entry's IdentityFile. Another key would be a second way in to rule on.
        process.stderr.write(
            f"lanpool: a dev sshd takes the key of the controller that owns job {request.job_id} only\n".encode()
        )
        process.exit(NOT_RUNNING_EXIT)
        return
    if request.sshd_key:
        await _serve_sshd(process, job, request, direct, dev_host_key if request.dev else None)
        return
    job.session_opened()  # a session into it: a dev environment is not idle meanwhile
    try:
        if slurm:
            from lanpool.agent.shell.slurm_job import exec_in_slurm_job

            code = await exec_in_slurm_job(process, job, manager.request(job), request.argv, request.node)
        elif job.record.container_id:
            from lanpool.agent.shell.container import exec_in_container

            code = await exec_in_container(process, job, request.argv)
        else:
            code = await exec_in_process_job(process, job, request.argv)
    except (
        OSError,
        RuntimeError,
        ValueError,
        subprocess.SubprocessError,
        ExecutorError,
    ) as exc:  # not the whole connection
        log.warning("exec into job %s failed: %s", request.job_id, exc)
        process.stderr.write(f"lanpool: cannot run in job {request.job_id}: {exc}\n".encode())
        code = NOT_RUNNING_EXIT
    finally:
        job.session_closed()
    log.info("exec session in job %s ended (exit %s)", request.job_id, code)
    with contextlib.suppress(OSError, asyncssh.Error):
        process.exit(code)


def _owner_key(owner: Owner | None, key_b64: str) -> bool:
    """Whether `key_b64` (an ed25519 key's base64) is the key `owner` authenticated with."""
    if owner is None:
        return False
    try:
        key = asyncssh.import_public_key(f"ssh-ed25519 {key_b64}")
    except (asyncssh.KeyImportError, ValueError):
        return False
    return bool(key.get_fingerprint("sha256") == owner.fingerprint)


async def _serve_sshd(
    process: asyncssh.SSHServerProcess[bytes],
    job: Job,
    request: ShellRequest,
    direct: "DirectSender | None",
    dev_host_key: Path | None,
) -> None:
    """A one-time sshd for the shell, or the job's dev sshd (agent/shell/sshd.py); the channel's
    exit status says whether a session ran in it (protocol/shell_sshd.py)."""
    from lanpool.agent.shell.sshd import serve_sshd

    listen = direct.listen_plain if direct is not None else None
    if request.dev and dev_host_key is None:
        listen = None  # no dev host key was made (no sshd at start): the offer says `-`
    try:
        outcome = await serve_sshd(
            process, job, request.argv, request.sshd_key, listen, dev_host_key if request.dev else None
        )
    except (OSError, RuntimeError, ValueError, asyncssh.Error, ExecutorError) as exc:
        log.warning("%s in job %s failed: %s", "dev sshd" if request.dev else "sshd shell", request.job_id, exc)
        outcome = SSHD_UNUSED
    with contextlib.suppress(OSError, asyncssh.Error):
        process.exit(outcome)
