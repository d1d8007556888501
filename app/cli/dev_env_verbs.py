"""`app headless dev [WORKFLOW]` (= `run --dev`, and `run` of a `dev: true` workflow): a dev
environment (app/runs/dev.py). It sends the job, waits until its commands have run and it says it
is ready, then prints how to get in (`ssh lanpool-RUN`, the editor's line) and returns: the job
stays up on its runner until stopped, its max_duration, or its idle limit."""

import argparse
import asyncio
import json
import secrets
from pathlib import Path

from lanpool.app.cli.dev_verbs import included, write_entries
from lanpool.app.cli.render import say
from lanpool.app.cli.run_options import options_of_run
from lanpool.app.cli.shell_verbs import editor_port_of, jupyter_of, ports
from lanpool.app.controller import Controller, JobRow
from lanpool.app.errors import ExitCode, LanpoolError, UsageError
from lanpool.app.runs.dev import JUPYTER, READY, DevEnvironment, ready_dir
from lanpool.app.startup.import_paused import import_paused
from lanpool.app.views.formatting import status_text
from lanpool.app.views.terminal_text import safe_line
from lanpool.app.workflows import Project
from lanpool.app.workflows.entry import DEFAULT_IDLE_S, IDES, MAX_PORTS

READY_POLL_S = 1.0  # how often its log is read for the ready line while its commands run


async def run_dev(ctl: Controller, project: Project, args: argparse.Namespace) -> int:
    wf = project.get(args.workflow)
    if args.sweep or wf.sweep is not None:
        raise UsageError("a dev environment is one job: drop --sweep (and the workflow's `sweep:`)")
    if args.nodes and args.nodes > 1 or wf.nodes not in (1, "1"):
        raise UsageError("a dev environment runs on one runner: drop --nodes (or `nodes:` in the workflow)")
    if args.notify or args.notify_cmd is not None:
        raise UsageError(
            "--notify follows a job to its end: a dev environment stays up (`app headless attach RUN --notify`)"
        )
    idle = args.idle if args.idle is not None else wf.idle_s if wf.idle_s is not None else DEFAULT_IDLE_S
    ide = args.ide if args.ide is not None else wf.ide
    if ide not in ("", *IDES):
        raise UsageError(f"--ide {ide!r}: lanpool starts {', '.join(IDES)} (ssh editors need no --ide: ssh-config)")
    # The runner allows MAX_PORTS a job; a dev environment takes one more for an editor's server
    # (app/runs/dev.py), and JupyterLab one more: said here, not as the runner's count of 17.
    extra = 1 + (ide == JUPYTER)
    declared = len(set(wf.ports)) + wf.port_count
    if declared + extra > MAX_PORTS:
        served = "an editor's server and JupyterLab" if extra == 2 else "an editor's server"
        raise UsageError(
            f"{args.workflow} declares {declared} ports and a dev environment keeps {extra} more ({served}): "
            f"a job has at most {MAX_PORTS}, so declare at most {MAX_PORTS - extra}"
        )
    # JupyterLab's token: made here, given to the job only (masked wherever its env is shown).
    dev = DevEnvironment(idle, ide, secrets.token_urlsafe(24) if ide == JUPYTER else "")
    options = {**options_of_run(args), "follow": False, "no_cache": True, "reuse": False, "dev": dev}
    import_paused("lanpool.app.runs.loop")  # the SSH stack (as `run`)
    outcome = await ctl.run(project, args.workflow, say=say, **options)
    mine = [s for s in outcome.submitted if ctl.runs.job(s.job_id).workflow == args.workflow]
    if not mine:
        raise LanpoolError(f"run {outcome.run_name}: no job of {args.workflow} was sent")
    job_id = mine[0].job_id
    say(f"dev environment: job {job_id} (run {outcome.run_name}) on runner {mine[0].runner}; its commands run first")
    try:
        row, workdir = await _ready(ctl, job_id)
    except asyncio.CancelledError:
        say(
            f"run {outcome.run_name} keeps starting: `app headless logs -f {outcome.run_name}`, `app headless stop {outcome.run_name}`"
        )
        raise
    host = f"lanpool-{row.run_name}"
    # Its Host entry now (with the other running jobs'), so that `ssh lanpool-RUN` works at once.
    found, notes, _text = await write_entries(ctl)
    entry = any(e.job_id == job_id for e in found)
    config = ctl.home.root / "ssh" / "config"
    editor = editor_port_of(ctl, job_id)  # said before the ready line: in the store already
    limit = "no idle limit" if not idle else f"{_human(idle)} with no session"
    lab = await jupyter_of(ctl, job_id) if ide == JUPYTER else None
    if ide == JUPYTER and lab is None:  # its marker comes before the ready line: this is no JupyterLab of ours
        raise LanpoolError(f"run {row.run_name}: its log names no JupyterLab port: `app headless logs {row.run_name}`")
    if args.json:
        ready: dict[str, object] = {
            "run": row.run_name,
            "job_id": job_id,
            "runner": row.runner,
            "workdir": workdir,
            "host": host,
            "ssh_config": str(config) if entry else None,
            "editor_port": editor,
        }
        if lab:  # the runner's port: `app headless ports RUN --json` forwards it and gives the URL
            ready["jupyter"] = {"port": lab[0], "token": lab[1]}
        print(json.dumps({**ready, "idle_s": idle}))
        return ExitCode.OK
    print(f"dev environment ready: run {row.run_name} on runner {row.runner}, in {workdir}")
    if entry and included(ctl.home.root, Path.home() / ".ssh" / "config"):
        print(f"  ssh {host}")
        print(f"  code --remote ssh-remote+{host} {workdir}")
    elif entry:
        print(f"  ssh -F {config} {host}     (`app headless ssh-config --install`, once: `ssh {host}`, editors)")
        print(f"  code --remote ssh-remote+{host} {workdir}   (after --install)")
    else:
        for note in notes:
            say(note)
    if entry and editor:
        # VS Code forwards to its server's port, which the dev sshd lets through when declared.
        pick = json.dumps({host: f"{editor}-{editor}"})
        print(f'  VS Code, in its settings.json: "remote.SSH.serverPickPortsFromRange": {pick}')
    print(f"  app headless ssh {row.run_name}         (a shell, without ssh-config)")
    print(f"it stays up until `app headless stop {row.run_name}`, its max_duration, or {limit}")
    if lab is None:
        return ExitCode.OK
    # JupyterLab is reached through a forward: held here, as `ports` holds one (Ctrl-C ends the
    # forward, not the job; `app headless ports RUN` forwards it again, with the same URL's token).
    print(
        f"jupyter: JupyterLab in {workdir}, forwarded while this runs (Ctrl-C: `app headless ports {row.run_name}` again)"
    )
    return await ports(ctl, argparse.Namespace(ref=job_id, node=None, json=False))


async def _ready(ctl: Controller, job_id: str) -> tuple[JobRow, str]:
    """The job once its ready line is in its log, with the directory it names; a job that ended
    first is one line with its state and where its log is."""
    told = False
    while True:
        row = await ctl.follow(job_id, follow=False)  # its log so far, into the store
        for line in ctl.runs.search_log(job_id, READY, 5):
            workdir = ready_dir(line)
            if workdir:
                return row, safe_line(workdir)[:1000]
        if row.state.is_terminal():
            raise LanpoolError(
                f"the dev environment ended before it was ready: {status_text(row)}; "
                f"its log: `app headless logs {row.run_name}`"
            )
        if not told and row.status == "RUNNING":
            say(f"waiting for its commands to finish (`app headless logs -f {row.run_name}` shows them)")
            told = True
        await asyncio.sleep(READY_POLL_S)


def _human(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{(s % 3600) // 60:02d}m" if s >= 3600 else f"{s // 60}m" if s >= 60 else f"{s}s"
