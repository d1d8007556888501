"""`app headless attach RUN`: a run's log followed and its job's ports forwarded, in one command
(dstack's `attach`). Ctrl-C detaches: the job keeps running (app/cli/headless.py says so).

The run's unfinished jobs are followed in order (a detached chain's steps one after the other),
each with its declared ports on this machine's 127.0.0.1 while it runs, as `run` does; it exits
with the last job's exit code, as `run` would have. A run that already ended is said in one line.
"""

import argparse
import asyncio
import json

from lanpool.app.cli import render
from lanpool.app.cli.render import say
from lanpool.app.controller import Controller, JobRow
from lanpool.app.errors import ExitCode
from lanpool.app.views.formatting import duration, status_text


async def attach(ctl: Controller, args: argparse.Namespace) -> int:
    from lanpool.app.notify import notify_command

    command = notify_command(args.notify_cmd) if args.notify_cmd is not None else None  # checked before anything
    jobs = ctl.runs.resolve(args.ref)
    await ctl.refresh(jobs)
    jobs = [ctl.runs.job(j.id) for j in jobs]
    left = [j for j in jobs if not j.state.is_terminal()]
    if not left:
        last = jobs[-1]
        say(
            f"run {last.run_name} already ended: {status_text(last)}; "
            f"`app headless logs {last.run_name}` prints its log, `status {last.run_name}` the rest"
        )
        return _exit_code(last)
    printer = render.LogPrinter()
    job = left[0]
    for job in left:
        say(f"attached to run {job.run_name}: job {job.id} ({job.workflow}) on runner {job.runner or '-'}")
        forward = None if args.no_ports else _forward(ctl, job)
        try:
            job = await ctl.follow(job.id, printer, follow=True, say=say)
        finally:
            if forward is not None:
                forward.cancel()
        say(f"run {job.run_name}: {status_text(job)} in {duration(job.started_at, job.finished_at)}")
        if args.notify or command:
            notify_end(job, command, args.notify)
    return _exit_code(job)


def _forward(ctl: Controller, job: JobRow) -> "asyncio.Task[None] | None":
    """Its declared ports forwarded while it runs (imported only for a job that has some)."""
    try:
        declared = json.loads(job.spec or "{}").get("ports")
    except (ValueError, AttributeError):
        return None
    if not declared:
        return None
    from lanpool.app.cli.shell_verbs import forward_while_running

    return forward_while_running(ctl, job.id, say)


def notify_end(job: JobRow, command: list[str] | None, desktop: bool) -> None:
    """`--notify`, `--notify-cmd`: the job's end shown (app/notify.py); a problem is one line, never a failure."""
    from lanpool.app.notify import JobEnd, notify_job_end

    end = JobEnd(job.run_name, job.id, job.workflow, job.status, job.exit_code)
    for problem in notify_job_end(end, command, desktop=desktop):
        say(problem)


def _exit_code(job: JobRow) -> int:
    return job.exit_code if job.exit_code is not None else (ExitCode.OK if job.status == "DONE" else ExitCode.FAILED)
