"""A dev environment (`app headless dev`, `dev: true`): the workflow's job with the project's
snapshot, its Python environment and requirements and its resources, kept up for ssh, scp, rsync
and an editor (`app headless ssh-config`) until it is stopped, its max_duration, or its idle limit.

It runs the workflow's commands (the setup: `pip install -e .`, a dataset download), says it is
ready with its working directory, then waits. The runner ends it after `idle_s` with no session
into it (exec, shells, the dev sshd's logins: agent/jobs/supervision.py), so a forgotten one does
not hold a GPU for the night. It ends STOPPED, so it is never reused as a finished run.
"""

import dataclasses

from lanpool.app.workflows.resolve import ResolvedJob

READY = "lanpool: dev environment ready in "  # then its working directory, as the job sees it
# After the commands: the marker, then a wait that any shell has (`sleep infinity` is GNU's only).
STAY_UP = [f'echo "{READY}$(pwd)"', "while :; do sleep 3600; done"]


def as_dev_environment(job: ResolvedJob, idle_s: float) -> ResolvedJob:
    """`job` kept up after its commands, ended by its runner after `idle_s` with no session (0: never)."""
    return dataclasses.replace(job, commands=[*job.commands, *STAY_UP], idle_s=idle_s)


def ready_dir(line: str) -> str | None:
    """The working directory a ready marker names (a line of the job's log), else None."""
    head, found, rest = line.partition(READY)
    return rest.strip() if found and not head.strip() else None
