"""`app headless ssh-config` and `ssh-proxy`: the running jobs as OpenSSH hosts (`ssh lanpool-RUN`,
scp, sftp, rsync, VS Code Remote-SSH), through each runner's dev sshd (app/shell/ssh_config.py
writes the entries, app/shell/dev_proxy.py is their ProxyCommand; docs/jobs.md#dev-environments)."""

import argparse
import asyncio
import json
import sys
from pathlib import Path

from lanpool.app.cli.render import say
from lanpool.app.controller import Controller
from lanpool.app.errors import ExitCode, LanpoolError, UsageError
from lanpool.app.jobs.remote import RemoteJob
from lanpool.app.shell.dev_proxy import PROXY_FAILED, proxy
from lanpool.app.shell.into_job import JobTarget, running_target
from lanpool.app.shell.ssh_config import (
    HostEntry,
    aliases,
    include_line,
    install_include,
    runner_alias,
    write_ssh_config,
)
from lanpool.app.views.terminal_text import safe_text
from lanpool.protocol import JobState
from lanpool.protocol.shell_sshd import DEV_SSHD, DEV_SSHD_CONTAINERS

HELLO_S = 10.0  # per runner, for its Hello's dev sshd fields


async def ssh_proxy(ctl: Controller, args: argparse.Namespace) -> int:
    """ssh's ProxyCommand: every error is one `lanpool:` line on stderr, exit 255 (ssh shows it)."""
    try:
        target = await _running(ctl, args.job, args.node)
        async with await ctl.connect(target.host, target.port) as session:
            if DEV_SSHD not in session.hello.features or not session.hello.sshd_host_key:
                raise UsageError(
                    f"runner {target.runner} offers no dev sshd (install openssh-server there; "
                    "LANPOOL_SSHD_SHELLS=0 turns it off)"
                )
            key_b64 = ctl.client_key.export_public_key().decode().split()[1]
            known_hosts = ctl.home.ssh_dir / "known_hosts"
            return await proxy(
                session, target.job_id, target.runner_node, key_b64, known_hosts, runner_alias(target.runner)
            )
    except LanpoolError as exc:
        print(f"lanpool: {safe_text(exc.message)}", file=sys.stderr, flush=True)
        return PROXY_FAILED


async def _running(ctl: Controller, ref: str, node: int | None) -> JobTarget:
    """The running job `ref` names; a job the store has not seen run yet is asked of its runner
    first (the store may lag behind a `run -d` of a second ago)."""
    jobs = ctl.runs.resolve(ref)
    if not jobs:
        raise UsageError(f"no run or job named {ref!r} (`app headless status` lists them)")
    stale = [j for j in jobs if j.state in (JobState.SUBMITTED, JobState.QUEUED) and j.runner]
    if stale:
        await ctl.refresh(stale)
        jobs = ctl.runs.resolve(ref)
    return running_target(ctl.jobs, jobs, ref, node)


async def entries(ctl: Controller) -> tuple[list[HostEntry], dict[str, str], list[str]]:
    """The Host entries of this controller's running jobs (the store refreshed from their runners
    first), the host key of each runner they are on, and a line for each runner left out."""
    await ctl.refresh(ctl.store.unfinished_jobs())
    running = [j for j in ctl.store.unfinished_jobs() if j.state is JobState.RUNNING]
    per_run: dict[str, int] = {}
    for job in running:
        per_run[job.run_name] = per_run.get(job.run_name, 0) + 1
    # A Slurm job: its runner offers no dev sshd for it, so an entry would only fail.
    elsewhere = {j.id for j in running if RemoteJob(ctl.jobs, j.id).slurm}
    notes = [f"job {j} runs on Slurm: no dev sshd for it (`app headless ssh` works)" for j in elsewhere]
    boxed = {j.id for j in running if json.loads(j.spec or "{}").get("image")}
    nodes = [(job, at) for job in running if job.id not in elsewhere for at in RemoteJob(ctl.jobs, job.id).nodes]
    # (host, port) -> (runner, user, host key, whether it takes container jobs)
    hellos: dict[tuple[str, int], tuple[str, str, str, bool]] = {}

    async def ask(runner: str, host: str, port: int) -> None:
        try:
            async with asyncio.timeout(HELLO_S):
                async with await ctl.connect(host, port) as session:
                    hello = session.hello
        except (LanpoolError, TimeoutError) as exc:
            notes.append(
                f"runner {runner} not reached ({getattr(exc, 'message', None) or 'timed out'}): its jobs left out"
            )
            return
        if DEV_SSHD not in hello.features or not hello.sshd_user or not hello.sshd_host_key:
            notes.append(
                f"runner {runner} offers no dev sshd (install openssh-server there; LANPOOL_SSHD_SHELLS=0 turns "
                "it off): its jobs left out"
            )
            return
        hellos[host, port] = (runner, hello.sshd_user, hello.sshd_host_key, DEV_SSHD_CONTAINERS in hello.features)

    where = {(at.host, at.port): at.runner for _job, at in nodes}
    await asyncio.gather(*(ask(runner, host, port) for (host, port), runner in where.items()))
    found: list[HostEntry] = []
    keys: dict[str, str] = {}
    for job, at in nodes:
        said = hellos.get((at.host, at.port))
        if said is None:
            continue
        runner, user, host_key, containers = said
        if job.id in boxed and not containers:
            notes.append(
                f"job {job.id} runs in a container and runner {runner} has no `docker` command for its dev sshd "
                "(or is older): left out (`app headless ssh` works)"
            )
            continue
        keys[runner] = host_key
        names = aliases(job.run_name, job.id, at.node, per_run[job.run_name] == 1)
        found.append(HostEntry(names, job.id, at.node, runner, user, host_key))
    return found, keys, notes


async def ssh_config(ctl: Controller, args: argparse.Namespace) -> int:
    found, keys, notes = await entries(ctl)
    home = ctl.home.root
    text = write_ssh_config(home, found, sys.executable, keys.items(), control_master=not args.no_control_master)
    for note in notes:
        say(note)
    user_config = Path.home() / ".ssh" / "config"
    installed = install_include(home, user_config) if args.install else False
    if args.json:
        rows = [
            {"hosts": list(e.aliases), "job": e.job_id, "node": e.node, "runner": e.runner, "user": e.user}
            for e in found
        ]
        print(json.dumps({"config": str(home / "ssh" / "config"), "entries": rows}, indent=2))
    else:
        print(text, end="")
    if args.install:
        say(f"{user_config}: {'Include added as its first line' if installed else 'it includes ours already'}")
    elif not _included(home, user_config):
        say(
            f"(not in {user_config} yet: `app headless ssh-config --install`, or "
            f"ssh -F {home / 'ssh' / 'config'} lanpool-RUN)"
        )
    if not found:
        say("no running job of this controller on a runner with a dev sshd: no Host entry")
    return ExitCode.OK


def _included(home: Path, user_config: Path) -> bool:
    try:
        return include_line(home) in user_config.read_text()
    except OSError:
        return False
