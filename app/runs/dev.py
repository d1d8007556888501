"""A dev environment (`app headless dev`, `dev: true`): the workflow's job with the project's
snapshot, its Python environment and requirements and its resources, kept up for ssh, scp, rsync
and an editor (`app headless ssh-config`) until it is stopped, its max_duration, or its idle limit.

It runs the workflow's commands (the setup: `pip install -e .`, a dataset download), says it is
ready with its working directory, then waits. The runner ends it after `idle_s` with no session
into it (exec, shells, the dev sshd's logins, forwarded connections: agent/jobs/supervision.py),
so a forgotten one does not hold a GPU for the night. It ends STOPPED, so it is never reused as a
finished run.

`ide: jupyter` also starts JupyterLab in it, after its commands: on the runner's loopback, at a
port the runner picks (one more `$PORT_k`, declared, so only its owner's forwards reach it), with a
token the controller makes, which the job gets as LANPOOL_JUPYTER_TOKEN (masked wherever lanpool
shows the job's environment). The job says the port in its log; the controller forwards it and
prints the URL with the token.
"""

import dataclasses
import re

from lanpool.app.workflows.resolve import ResolvedJob

READY = "lanpool: dev environment ready in "  # then its working directory, as the job sees it
# After the commands: the marker, then a wait that any shell has (`sleep infinity` is GNU's only).
STAY_UP = [f'echo "{READY}$(pwd)"', "while :; do sleep 3600; done"]

# Every dev environment keeps one more port the runner picks for an editor's server: VS Code
# Remote-SSH starts its server after the connection and forwards to its port, which the dev sshd
# lets through only when declared before the connection started (PermitOpen). VS Code takes the
# port from `remote.SSH.serverPickPortsFromRange`, which `dev` prints. The job says it in its log.
EDITOR_PORT = "lanpool: editor port "  # then the port on the runner's loopback

JUPYTER = "jupyter"
JUPYTER_READY = "lanpool: jupyter listens on port "  # then its port on the runner's loopback
JUPYTER_TOKEN_ENV = "LANPOOL_JUPYTER_TOKEN"
JUPYTER_START_S = 300  # JupyterLab's first start builds its settings; an installing one takes longer
JUPYTER_LOG = "${TMPDIR:-/tmp}/lanpool-jupyter.log"  # the job's own /tmp: not in its workspace

# Waits for JupyterLab to answer on its port; gives up when it exited (a zombie child of the job's
# shell: its /proc state is Z) or after JUPYTER_START_S. Python, since a job's `sh` may be dash,
# which has no /dev/tcp; `python` is the job's own interpreter, which runs JupyterLab too.
_WAIT = (
    "import os, socket, sys, time\n"
    "port, pid, limit = int(sys.argv[1]), sys.argv[2], time.time() + float(sys.argv[3])\n"
    "while time.time() < limit:\n"
    "    try:\n"
    "        socket.create_connection(('127.0.0.1', port), 1).close()\n"
    "        sys.exit(0)\n"
    "    except OSError:\n"
    "        pass\n"
    "    try:\n"
    "        state = open(f'/proc/{pid}/stat').read().rpartition(')')[2].split()[0]\n"
    "    except OSError:\n"
    "        state = 'X'\n"
    "    if state in 'ZX':\n"
    "        sys.exit('lanpool: jupyter exited before it listened')\n"
    "    time.sleep(0.5)\n"
    "sys.exit('lanpool: jupyter did not listen within %s s' % sys.argv[3])\n"
)


@dataclasses.dataclass(frozen=True)
class DevEnvironment:
    """How a dev environment is kept: its idle limit (0: none) and what it serves besides sshd."""

    idle_s: float
    ide: str = ""  # "" or JUPYTER
    token: str = ""  # JupyterLab's, made by the controller (secrets.token_urlsafe)


def as_dev_environment(job: ResolvedJob, dev: DevEnvironment) -> ResolvedJob:
    """`job` kept up after its commands (and serving JupyterLab when asked), ended by its runner
    after `dev.idle_s` with no session (0: never)."""
    # The editor's port: one more the runner picks, $PORT_k after the workflow's own $PORT_0..$PORT_{k-1}.
    stay_up = [f'echo "{EDITOR_PORT}$PORT_{job.port_count}"', *STAY_UP]
    job = dataclasses.replace(job, idle_s=dev.idle_s, port_count=job.port_count + 1)
    if dev.ide != JUPYTER:
        return dataclasses.replace(job, commands=[*job.commands, *stay_up])
    port = f"$PORT_{job.port_count}"  # and JupyterLab's, one more
    start = [
        "if ! python -c 'import jupyterlab' >/dev/null 2>&1; then "
        "echo \"lanpool: jupyter: installing jupyterlab into this job's environment "
        '(list jupyterlab in its requirements to have it cached on the runner)"; '
        "python -m pip install --quiet jupyterlab; fi",
        # The token goes by its environment (JupyterLab reads JUPYTER_TOKEN), not its command
        # line, which any user of the runner can read in /proc.
        f'JUPYTER_TOKEN="${JUPYTER_TOKEN_ENV}" python -m jupyterlab --no-browser --ServerApp.ip=127.0.0.1 '
        f'--ServerApp.port="{port}" --ServerApp.port_retries=0 --ServerApp.root_dir="$PWD" > "{JUPYTER_LOG}" 2>&1 &',
        f'python -c "{_WAIT}" "{port}" "$!" {JUPYTER_START_S} || {{ tail -n 20 "{JUPYTER_LOG}"; exit 1; }}',
        f'echo "{JUPYTER_READY}{port} (its log: {JUPYTER_LOG})"',
    ]
    return dataclasses.replace(
        job,
        commands=[*job.commands, *start, *stay_up],
        port_count=job.port_count + 1,
        env={**job.env, JUPYTER_TOKEN_ENV: dev.token},
    )


def ready_dir(line: str) -> str | None:
    """The working directory a ready marker names (a line of the job's log), else None."""
    head, found, rest = line.partition(READY)
    return rest.strip() if found and not head.strip() else None


_PORT = re.compile(r"\s*([0-9]{1,5})\b")


def marker_port(line: str, marker: str) -> int | None:
    """The runner port a marker (JUPYTER_READY, EDITOR_PORT) names in a line of the job's log, else None."""
    head, found, rest = line.partition(marker)
    match = _PORT.match(rest) if found and not head.strip() else None
    port = int(match.group(1)) if match else 0
    return port if 0 < port < 65536 else None


def jupyter_url(local_port: int, token: str) -> str:
    return f"http://127.0.0.1:{local_port}/lab?token={token}"
