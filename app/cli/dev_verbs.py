"""`app headless ssh-config`: the running jobs as OpenSSH hosts (`ssh lanpool-RUN`, scp, sftp, rsync,
VS Code Remote-SSH), through each runner's dev sshd (app/shell/ssh_config.py writes the entries,
app/shell/ssh_hop.py is their ProxyCommand; docs/jobs.md#dev-environments)."""

import argparse
import asyncio
import json
import sys
from pathlib import Path

from lanpool.app.cli.render import say
from lanpool.app.controller import Controller
from lanpool.app.errors import ExitCode, LanpoolError
from lanpool.app.jobs.remote import RemoteJob
from lanpool.app.shell.ssh_config import HostEntry, aliases, include_line, install_include, write_ssh_config
from lanpool.protocol import JobState
from lanpool.protocol.shell_sshd import DEV_SSHD, DEV_SSHD_CONTAINERS

HELLO_S = 10.0  # per runner, for its Hello's dev sshd fields


async def entries(ctl: Controller) -> tuple[list[HostEntry], list[str]]:
    """The Host entries of this controller's running jobs (the store refreshed from their runners
    first), and a line for each runner or job left out."""
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
    # (host, port) -> (runner, user, dev host key, whether it takes container jobs, the agent's host key)
    hellos: dict[tuple[str, int], tuple[str, str, str, bool, str]] = {}

    async def ask(runner: str, host: str, port: int) -> None:
        try:
            async with asyncio.timeout(HELLO_S):
                async with await ctl.connect(host, port) as session:
                    hello, agent_key = session.hello, session.host_key
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
        containers = DEV_SSHD_CONTAINERS in hello.features
        hellos[host, port] = (runner, hello.sshd_user, hello.sshd_host_key, containers, agent_key)

    where = {(at.host, at.port): at.runner for _job, at in nodes}
    await asyncio.gather(*(ask(runner, host, port) for (host, port), runner in where.items()))
    found: list[HostEntry] = []
    for job, at in nodes:
        said = hellos.get((at.host, at.port))
        if said is None:
            continue
        runner, user, host_key, containers, agent_key = said
        if job.id in boxed and not containers:
            notes.append(
                f"job {job.id} runs in a container and runner {runner} has no `docker` command for its dev sshd "
                "(or is older): left out (`app headless ssh` works)"
            )
            continue
        names = aliases(job.run_name, job.id, at.node, per_run[job.run_name] == 1)
        found.append(HostEntry(names, job.id, at.node, runner, user, host_key, at.host, at.port, agent_key))
    return found, notes


async def write_entries(ctl: Controller, control_master: bool = True) -> tuple[list[HostEntry], list[str], str]:
    """<LANPOOL_HOME>/ssh/config written again for the running jobs (`ssh-config`, and `dev` once
    its job is ready): the entries, the notes of what was left out, the config's text."""
    found, notes = await entries(ctl)
    key_b64 = ctl.client_key.export_public_key().decode().split()[1]
    return found, notes, write_ssh_config(ctl.home.root, found, sys.executable, key_b64, control_master)


async def ssh_config(ctl: Controller, args: argparse.Namespace) -> int:
    found, notes, text = await write_entries(ctl, control_master=not args.no_control_master)
    home = ctl.home.root
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
    elif not included(home, user_config):
        say(
            f"(not in {user_config} yet: `app headless ssh-config --install`, or "
            f"ssh -F {home / 'ssh' / 'config'} lanpool-RUN)"
        )
    if not found:
        say("no running job of this controller on a runner with a dev sshd: no Host entry")
    return ExitCode.OK


def included(home: Path, user_config: Path) -> bool:
    try:
        return include_line(home) in user_config.read_text()
    except OSError:
        return False
