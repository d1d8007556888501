"""Whose socket listens on a port of this machine: read from /proc (Linux), so that a forward
reaches only a port that a process of the job itself listens on.

A job declares its ports, but a declared port may be one that something else listens on: the
agent's own SSH server, another agent, another controller's job. The listening sockets of the
port are found in /proc/net/tcp and tcp6 (this network namespace: container jobs share the
host's), the processes holding them by their file descriptors, and a process is the job's when
its environment carries the job's LANPOOL_JOB_ID, which every process of a job inherits
(a server that left the job's process group with setsid too; containers' processes alike).
"""

import os
from pathlib import Path

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[int] | None:
    """Inodes of the sockets listening on `port`, any local address; None when /proc says nothing
    (not Linux): the caller cannot tell whose they are."""
    found: set[int] = set()
    read_any = False
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        read_any = True
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(int(fields[9]))
    return found if read_any else None


def holders(inodes: set[int], proc: Path = Path("/proc")) -> set[int]:
    """The pids holding any of these sockets (those whose fds this process may read)."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    pids: set[int] = set()
    if not wanted:
        return pids
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            with os.scandir(f"{entry.path}/fd") as fds:
                for fd in fds:
                    try:
                        if os.readlink(fd.path) in wanted:
                            pids.add(int(entry.name))
                            break
                    except OSError:
                        continue
        except OSError:  # gone, or not ours to read
            continue
    return pids


def of_job(pid: int, job_id: str, proc: Path = Path("/proc")) -> bool:
    try:
        env = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"LANPOOL_JOB_ID={job_id}".encode() in env.split(b"\0")


def job_listens(job_id: str, port: int) -> bool | None:
    """Whether a process of the job listens on `port`; None when nothing listens there (the
    connection then fails as to any closed port) or this machine cannot tell."""
    inodes = listening_inodes(port)
    if not inodes:
        return None
    return any(of_job(pid, job_id) for pid in holders(inodes))
