"""`app headless ssh`, `exec` and `ports`: into a running job over its runner's SSH connection."""

import argparse
import asyncio
import json
import time
from collections.abc import Callable

from lanpool.app.cli.render import say
from lanpool.app.controller import Controller
from lanpool.app.errors import ExitCode, LanpoolError, UsageError
from lanpool.app.jobs.remote import RemoteJob
from lanpool.app.runs.dev import EDITOR_PORT, JUPYTER_READY, JUPYTER_TOKEN_ENV, jupyter_url, marker_port
from lanpool.app.shell.into_job import JobTarget, forward_ports, hold_forwards, run_command, run_shell, running_target
from lanpool.protocol import JobState

START_WAIT_S = 30.0  # how long a job that its runner is starting (SUBMITTED) is waited for


async def _target(ctl: Controller, args: argparse.Namespace) -> JobTarget:
    """The running job `args.ref` names, in its runner's word, not the store's (a `run -d` a second
    ago, or another controller, may have left the store behind); one its runner is still starting
    is waited for, up to START_WAIT_S."""
    jobs = ctl.runs.resolve(args.ref)
    if not jobs:
        raise UsageError(f"no run or job {args.ref!r}: `app headless status` lists them")
    deadline, said = time.monotonic() + START_WAIT_S, False
    while True:
        stale = [j for j in jobs if j.state in (JobState.SUBMITTED, JobState.QUEUED) and j.runner]
        if not stale:
            break
        await ctl.refresh(stale)
        jobs = ctl.runs.resolve(args.ref)
        starting = [j for j in jobs if j.state is JobState.SUBMITTED]
        if not starting or time.monotonic() > deadline:
            break
        if not said:
            say(f"job {starting[0].id} is starting on runner {starting[0].runner}: waiting for it to run")
            said = True
        await asyncio.sleep(0.5)
    return running_target(ctl.jobs, jobs, args.ref, args.node)


async def ssh(ctl: Controller, args: argparse.Namespace) -> int:
    target = await _target(ctl, args)
    async with await ctl.connect(target.host, target.port) as session:
        return await run_shell(session, target.job_id, node=target.runner_node)


async def exec_(ctl: Controller, args: argparse.Namespace) -> int:
    argv = _node_before_command(args, list(args.command))
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("exec needs a command: app headless exec JOB -- CMD ...")
    target = await _target(ctl, args)
    async with await ctl.connect(target.host, target.port) as session:
        return await run_command(session, target.job_id, argv, target.runner_node)


def _node_before_command(args: argparse.Namespace, argv: list[str]) -> list[str]:
    """`exec JOB --node K -- CMD` as documented: argparse hands everything after JOB to the
    command (REMAINDER), so a `--node K` before `--` is taken here."""
    if argv[:1] == ["--node"] or (argv and argv[0].startswith("--node=")):
        value, rest = (argv[1] if len(argv) > 1 else "", argv[2:]) if argv[0] == "--node" else (argv[0][7:], argv[1:])
        if not value.isascii() or not value.isdigit():
            raise UsageError(f"--node {value!r}: give a node number, 0 or more (app headless exec JOB --node K -- CMD)")
        args.node = int(value)
        return rest
    return argv


async def ports(ctl: Controller, args: argparse.Namespace) -> int:
    target = await _target(ctl, args)
    declared = target.ports
    if not declared:
        raise UsageError(f"job {target.job_id} declared no ports (`ports:` in its workflow, or `run --port N`)")
    jupyter = await jupyter_of(ctl, target.job_id)
    editor = editor_port_of(ctl, target.job_id)  # the log as jupyter_of just read it
    async with await ctl.connect(target.host, target.port) as session:
        listeners = await forward_ports(session, declared)
        urls = {port: f"http://127.0.0.1:{listener.get_port()}" for port, listener in listeners.items()}
        lab = None
        if jupyter and jupyter[0] in listeners:
            lab = (jupyter[0], jupyter_url(listeners[jupyter[0]].get_port(), jupyter[1]))
        if args.json:
            rows = [
                {
                    "port": p,
                    "url": u,
                    **({"jupyter": lab[1]} if lab and lab[0] == p else {}),
                    **({"editor": True} if p == editor else {}),
                }
                for p, u in urls.items()
            ]
            print(json.dumps(rows), flush=True)
        else:
            for port, url in urls.items():
                print(f"port {port}: {url}", flush=True)
            if editor in urls:  # on stderr: the lines above keep one form for scripts
                say(f"port {editor} is kept for an editor's server (VS Code's serverPickPortsFromRange)")
            if lab:
                print(f"jupyter: {lab[1]}", flush=True)
            say(f"forwarding until job {target.job_id} ends (Ctrl-C stops forwarding; the job keeps running)")
        state = await hold_forwards(session, target.job_id, listeners, say)
    if not args.json:
        say(f"job {target.job_id} {state}: forwards closed")
    return ExitCode.OK


async def jupyter_of(ctl: Controller, job_id: str) -> tuple[int, str] | None:
    """The runner port and token of the JupyterLab a dev environment serves (`ide: jupyter`,
    app/runs/dev.py), once its log says it listens; None for any other job."""
    env = json.loads(ctl.runs.job(job_id).spec or "{}").get("env") or {}
    token = env.get(JUPYTER_TOKEN_ENV) if isinstance(env, dict) else None
    if not isinstance(token, str) or not token:
        return None
    await ctl.follow(job_id, follow=False)  # its log so far, into the store
    ports = [p for line in ctl.runs.search_log(job_id, JUPYTER_READY, 20) if (p := marker_port(line, JUPYTER_READY))]
    return (ports[-1], token) if ports else None


def editor_port_of(ctl: Controller, job_id: str) -> int | None:
    """The runner port a dev environment keeps for an editor's server (app/runs/dev.py), as its
    log in the store says; None for any other job."""
    ports = [p for line in ctl.runs.search_log(job_id, EDITOR_PORT, 5) if (p := marker_port(line, EDITOR_PORT))]
    return ports[-1] if ports else None


def forward_while_running(ctl: Controller, job_id: str, say: Callable[[str], None]) -> "asyncio.Task[None] | None":
    """For `run`: forward the just-submitted job's declared ports until it ends (None: it declared none)."""
    job = ctl.runs.job(job_id)
    remote = RemoteJob(ctl.jobs, job_id)
    declared = [p for p in json.loads(job.spec or "{}").get("ports", []) if isinstance(p, int)]
    if not declared or not remote.nodes:
        return None
    at = remote.nodes[0]

    async def forward() -> None:
        try:
            async with await ctl.connect(at.host, at.port) as session:
                listeners = await forward_ports(session, declared)
                for port, listener in listeners.items():
                    say(f"port {port}: http://127.0.0.1:{listener.get_port()}")
                await hold_forwards(session, job_id, listeners, say)
        except LanpoolError as exc:
            say(f"ports not forwarded: {exc.message}")

    return asyncio.ensure_future(forward())
