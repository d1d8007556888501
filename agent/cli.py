"""`app agent <verb>`: run and manage the runner daemon on this machine."""

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import platformdirs

from lanpool.agent.errors import AgentError
from lanpool.agent.executors import MODES
from lanpool.agent.executors.sandbox import DEFAULT_JOB_USER
from lanpool.agent.executors.sandbox import MODES as SANDBOX_MODES
from lanpool.agent.home import AgentHome
from lanpool.agent.jobs.admission import DEFAULT_MAX_QUEUED, DEFAULT_STAGED_SHARE
from lanpool.agent.jobs.journal import JobRecord
from lanpool.agent.jobs.manager import DEFAULT_GRACE_S
from lanpool.agent.jobs.turns import queue_rows, span
from lanpool.agent.jobs.usage import parse_window, read_usage, render, summarize
from lanpool.agent.retention import collect, parse_size
from lanpool.agent.ssh.keys import authorize_key
from lanpool.agent.ssh.pairing import Pairing
from lanpool.protocol import DEFAULT_PORT
from lanpool.protocol.pairing import sanitize_label
from lanpool.protocol.runtime import event_loop
from lanpool.protocol.schema import name_problem

log = logging.getLogger(__name__)


def default_data_dir() -> Path:
    env = os.environ.get("LANPOOL_AGENT_HOME")
    return Path(env) if env else Path(platformdirs.user_data_dir("lanpool")) / "agent"


class _NoAbbrevParser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # one line, exit 2, as `app headless` says usage errors
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(prog: str = "app agent") -> argparse.ArgumentParser:
    # allow_abbrev=False everywhere: a prefix (`--na`) must not silently pick an option.
    parser = _NoAbbrevParser(prog=prog, description="Run and manage a lanpool runner agent.")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB", parser_class=_NoAbbrevParser)

    serve = sub.add_parser("serve", help="run the agent (SSH server) in the foreground")
    serve.add_argument("--host", default="0.0.0.0", help="address to listen on (default: all IPv4)")
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"TCP port, 0 for any free one (default {DEFAULT_PORT})"
    )
    serve.add_argument("--name", type=_runner_name, help="runner name shown to controllers (default: host name)")
    serve.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="keys, jobs and logs (default: $LANPOOL_AGENT_HOME or the user data dir)",
    )
    serve.add_argument(
        "--grace",
        type=_number(0, 24 * 3600, "seconds", low_ok=True),
        default=DEFAULT_GRACE_S,
        help="seconds between SIGTERM and SIGKILL on stop (default 10)",
    )
    serve.add_argument(
        "--executor",
        choices=MODES,
        default="auto",
        help="how jobs run: docker (containers only), process (plain processes only), slurm (plain "
        "processes through Slurm's sbatch, from a login node), or auto "
        "(default: jobs with an image run in a container when a Docker engine answers)",
    )
    serve.add_argument(
        "--docker-volume",
        action="append",
        default=[],
        metavar="HOST:CONTAINER[:ro]",
        help="bind-mount a host path into every job container (repeatable)",
    )
    serve.add_argument(
        "--mdns-interface",
        action="append",
        default=[],
        metavar="IP",
        help="announce on the interface with this IPv4 address (repeatable; default: the --host "
        "address, or every LAN interface when listening on all)",
    )
    serve.add_argument("--no-mdns", action="store_true", help="do not announce on the LAN (add by address instead)")
    serve.add_argument(
        "--pairing-ttl",
        type=_number(0, 7 * 24 * 60, "minutes"),
        default=15.0,
        metavar="MIN",
        help="minutes a pairing code stays valid (default 15)",
    )
    serve.add_argument(
        "--max-queued-per-owner",
        "--max-queued-per-controller",
        dest="max_queued_per_controller",
        type=_number(1, 1_000_000, "jobs", integer=True, low_ok=True),
        default=DEFAULT_MAX_QUEUED,
        metavar="N",
        help=f"jobs of one controller (its key: the jobs' owner) that may wait in this runner's queue "
        f"(default {DEFAULT_MAX_QUEUED}); past it a submit is refused with the reason",
    )
    serve.add_argument(
        "--max-gpus-per-owner",
        type=_number(1, 4096, "GPUs", integer=True, low_ok=True),
        default=None,
        metavar="N",
        help="GPUs one controller's running jobs may hold at once on this runner (default: all); its "
        "next job waits, saying so, and a job asking for more is refused",
    )
    serve.add_argument(
        "--private-occupancy",
        action="store_true",
        help="tell controllers only how many jobs hold this runner, never whose, which workflows or since when",
    )
    serve.add_argument(
        "--max-staged-per-controller",
        type=_size,
        default=None,
        metavar="SIZE",
        help="bytes (e.g. 50G) the workspaces of one controller's unfinished jobs may take on this runner "
        f"(default: {DEFAULT_STAGED_SHARE:.0%}% of the disk holding them); past it a submit is refused with the reason",
    )
    serve.add_argument(
        "--blob-cache-size",
        default=None,
        metavar="SIZE",
        help="bound on the cache of uploaded files (e.g. 20G, the default); least recently used go first",
    )
    serve.add_argument(
        "--job-python",
        default=None,
        metavar="PATH",
        help="the interpreter process jobs' environments are layered on: its packages (torch, "
        "Lightning) are theirs (default: the agent's own); python3.X on PATH and pyenv's serve `version:`",
    )
    serve.add_argument(
        "--job-sandbox",
        choices=SANDBOX_MODES,
        default="auto",
        help="process jobs in a bubblewrap sandbox: they see the system read-only, their own workspace, /tmp "
        "and /proc, nothing of the data dir (auto, the default: when bwrap runs here; bwrap: refuse to start "
        "without it; off)",
    )
    serve.add_argument(
        "--job-user",
        default=None,
        metavar="USER",
        help=f"an agent running as root runs sandboxed process jobs as this unprivileged user "
        f"(default {DEFAULT_JOB_USER}; a dedicated one is better: useradd --system lanpool-job)",
    )
    serve.add_argument(
        "--slurm-dir",
        type=Path,
        default=None,
        metavar="SHARED_DIR",
        help="--executor slurm: where jobs (workspace, logs, artifacts) live, on storage every compute node "
        "sees (default: the data dir's jobs/)",
    )
    for option in ("partition", "account", "qos"):
        serve.add_argument(
            f"--{option}", default="", help=f"--executor slurm: the Slurm {option} of jobs whose workflow names none"
        )
    serve.add_argument(
        "--no-direct-transfers",
        action="store_true",
        help="send artifacts only on the SSH channel, never on a TLS connection of their own "
        "(for a firewall that lets only the agent's port through; pulls then run at ~0.75x scp instead of ~1.2x)",
    )
    serve.add_argument(
        "--direct-ports",
        default=None,
        metavar="LO-HI",
        help="the ports artifact transfers listen on, to open in a firewall (e.g. 7423-7430; default: any free port)",
    )
    serve.add_argument("-v", "--verbose", action="store_true", help="log every connection and job")

    auth = sub.add_parser("authorize", help="allow a controller's public key to connect")
    auth.add_argument("pubkey_file", type=Path, help="the controller's .pub file (app headless key prints its path)")
    auth.add_argument(
        "--label",
        default="",
        metavar="NAME",
        help="the name its jobs go by on this runner (other controllers' queue reasons, `status`, `usage`); "
        "a key already authorized gets this label",
    )
    auth.add_argument("--data-dir", type=Path, default=None)

    status = sub.add_parser("status", help="is the agent running, its address, its pairing code, its jobs")
    status.add_argument("--data-dir", type=Path, default=None)
    status.add_argument("--json", action="store_true")

    pair = sub.add_parser("pair", help="make a new pairing code (to add another controller)")
    pair.add_argument("--data-dir", type=Path, default=None)
    pair.add_argument(
        "--ttl",
        type=_number(0, 7 * 24 * 60, "minutes"),
        default=15.0,
        metavar="MIN",
        help="minutes it stays valid (default 15)",
    )

    gc = sub.add_parser(
        "gc", help="remove leftover job containers, and finished jobs' files and cached blobs beyond a budget"
    )
    gc.add_argument("--data-dir", type=Path, default=None)
    gc.add_argument(
        "--keep-days",
        type=_number(0, 100_000, "days", low_ok=True),
        default=None,
        metavar="N",
        help="remove jobs finished over N days ago",
    )
    gc.add_argument(
        "--max-size",
        default=None,
        metavar="SIZE",
        help="keep finished jobs and cached blobs within SIZE (e.g. 50G), oldest removed first",
    )
    gc.add_argument(
        "--queued",
        action="store_true",
        help="also cancel every queued job and free its files (staged workspace); only with the agent "
        "stopped (default: they are counted and kept)",
    )
    gc.add_argument("--json", action="store_true")

    usage = sub.add_parser(
        "usage", help="GPU-, CPU- and wall-hours of the jobs that ran here, by controller key or workflow (sreport)"
    )
    usage.add_argument("--data-dir", type=Path, default=None)
    usage.add_argument(
        "--since",
        type=_window,
        default="30d",
        metavar="AGE",
        help="the last AGE: 12h, 30d, 2w ... (default 30d); a job that started before counts from then",
    )
    usage.add_argument(
        "--by",
        choices=("owner", "workflow"),
        default="owner",
        help="a row per controller key (its label: the name it paired with) or per workflow (default owner). "
        "GPU-hours: GPUs held x hours; CPU-hours: CPUs asked x hours (a job that asked none counts 0)",
    )
    usage.add_argument("--json", action="store_true", help="rows, total and each job counted, as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    home = AgentHome((args.data_dir or default_data_dir()).expanduser().resolve())
    try:
        if args.verb == "serve":
            logging.basicConfig(
                level=logging.INFO if args.verbose else logging.WARNING,
                format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            )
            event_loop.run(_serve(home, args), prefer_uvloop=False)  # why: protocol/runtime/event_loop.py
        elif args.verb == "authorize":
            home.create()
            done = authorize_key(home.authorized_keys, args.pubkey_file, args.label)
            named = f" as {sanitize_label(args.label)!r}" if args.label else ""
            print(f"{done}{named}: {args.pubkey_file} -> {home.authorized_keys}")
        elif args.verb == "gc":
            _gc(home, args)
        elif args.verb == "status":
            return _status(home, args.json)
        elif args.verb == "usage":
            _usage(home, args)
        elif args.verb == "pair":
            home.create()
            state = Pairing(home.root / "pairing.json", args.ttl * 60).issue()
            print(
                f"pairing code: {state.code} (valid {args.ttl:g} min): on the controller run "
                f"`app headless runners pair NAME {state.code}`"
            )
    except AgentError as exc:
        print(f"app agent: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"app agent: error: {exc.strerror or exc}: {getattr(exc, 'filename', '') or ''}".rstrip(": "),
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


async def _serve(home: AgentHome, args: argparse.Namespace) -> None:
    from lanpool.agent.daemon import Agent, serve

    slurm = None
    if args.executor == "slurm":
        from lanpool.agent.executors import ExecutorError
        from lanpool.agent.executors.slurm_cli import SlurmOptions

        slurm = SlurmOptions(args.partition, args.account, args.qos)
        try:
            slurm.merged({})  # the names checked
        except ExecutorError as exc:
            raise AgentError(str(exc)) from None
        if args.slurm_dir is not None:
            home = dataclasses.replace(home, jobs_root=args.slurm_dir.expanduser().resolve() / "jobs")
    elif args.slurm_dir is not None or args.partition or args.account or args.qos:
        raise AgentError("--slurm-dir, --partition, --account and --qos go with --executor slurm")
    agent = Agent(
        home,
        args.name or socket.gethostname(),
        args.host,
        args.port,
        args.grace,
        args.executor,
        args.docker_volume,
        mdns=not args.no_mdns,
        mdns_interfaces=args.mdns_interface or None,
        pairing_ttl_s=args.pairing_ttl * 60,
        blob_cache_size=parse_size(args.blob_cache_size) if args.blob_cache_size else None,
        job_python=args.job_python,
        slurm=slurm,
        direct_transfers=not args.no_direct_transfers,
        direct_ports=_port_range(args.direct_ports) if args.direct_ports else None,
        max_queued_per_owner=args.max_queued_per_controller,
        max_gpus_per_owner=args.max_gpus_per_owner,
        private_occupancy=args.private_occupancy,
        max_staged_per_owner=args.max_staged_per_controller,
        job_sandbox=args.job_sandbox,
        job_user=args.job_user,
    )
    # Which loop it runs on (protocol/runtime/event_loop.py): asyncio's unless LANPOOL_EVENT_LOOP=uvloop.
    log.info("event loop: %s", type(asyncio.get_running_loop()).__module__.split(".")[0])
    await serve(agent)


def _number(low: float, high: float, unit: str, *, integer: bool = False, low_ok: bool = False) -> Any:
    """An argparse type: a finite number of `unit` in (low, high] (or [low, high] when `low_ok`),
    so that a mistyped option (`--pairing-ttl -1`, `nan`) is one line, not a broken agent."""

    def parse(text: str) -> float:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {unit}") from None
        if not (low <= value if low_ok else low < value) or not value <= high:  # nan fails both
            bound = "at least" if low_ok else "more than"
            raise argparse.ArgumentTypeError(f"{text} {unit}: give {bound} {_plain(low)} and at most {_plain(high)}")
        return value

    return parse


def _runner_name(text: str) -> str:
    """An argparse type: a name controllers accept in the agent's hello (protocol/schema.py
    name_problem), so a bad `--name` is one line here, not a runner every controller refuses."""
    if problem := name_problem(text):
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise argparse.ArgumentTypeError(f"{shown!r}: a runner's name {problem}; give another")
    return text


def _window(text: str) -> float:
    """An argparse type: `--since 30d` as seconds (agent/jobs/usage.py parse_window), in one line when not."""
    try:
        return parse_window(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _usage(home: AgentHome, args: argparse.Namespace) -> None:
    """What the ledger says (agent/jobs/usage.py): read from the file, whether or not the agent runs."""
    until = time.time()
    since = until - args.since
    report = summarize(read_usage(home.usage_ledger, since, until), args.by, since, until)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return
    print(render(report, home.root))


def _size(text: str) -> int:
    """An argparse type: a size (agent/retention.py parse_size) of at least one byte, in one line when not."""
    try:
        value = parse_size(text)
    except AgentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: give a size of at least 1 byte, such as 500M or 50G")
    return value


def _plain(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _port_range(text: str) -> range:
    lo, sep, hi = text.partition("-")
    try:
        first, last = int(lo), int(hi if sep else lo)
    except ValueError:
        raise AgentError(f"--direct-ports {text!r}: give a port or a range such as 7423-7430") from None
    if not 1 <= first <= last <= 65535:
        raise AgentError(f"--direct-ports {text!r}: ports are 1 to 65535, the first no larger than the last")
    return range(first, last + 1)


def _status(home: AgentHome, as_json: bool) -> int:
    info = _running_info(home)
    pairing = Pairing(home.root / "pairing.json").current()
    keys = home.authorized_keys.read_text().splitlines() if home.authorized_keys.exists() else []
    records: list[JobRecord] = []
    if home.jobs.is_dir():
        for job_dir in sorted(home.jobs.iterdir()):
            try:
                records.append(JobRecord.load(job_dir))
            except (OSError, ValueError, TypeError):  # a job dir half made, or a journal from elsewhere
                continue
    jobs = [{"job": r.job_id, "run": r.run_name, "state": str(r.state)} for r in records]
    now = time.time()
    queue = queue_rows(records, now)  # running, then waiting in their turns (agent.jobs.turns)
    out = {
        "running": info is not None,
        "data_dir": str(home.root),
        "name": info.get("name") if info else None,
        "address": f"{info['host']}:{info['port']}" if info else None,
        "pid": info.get("pid") if info else None,
        "mdns": info.get("mdns", []) if info else [],
        "pairing_code": pairing.code if pairing else None,
        "pairing_expires_at": pairing.expires_at if pairing else None,
        "authorized_controllers": len([k for k in keys if k.strip()]),
        "jobs_running": sum(j["state"] in ("SUBMITTED", "RUNNING") for j in jobs),
        "jobs_total": len(jobs),
        "jobs": queue,
    }
    if as_json:
        print(json.dumps(out, indent=2))
        return 0 if info else 1
    if info:
        print(f"agent {out['name']}: running (pid {out['pid']}) on {out['address']}, data dir {home.root}")
        print(f"mDNS: {', '.join(out['mdns']) or 'off'}")
    else:
        print(f"agent: not running (data dir {home.root})")
    print(f"authorized controllers: {out['authorized_controllers']}")
    if pairing:
        mins = max(0, int(pairing.expires_at - time.time()) // 60)
        print(f"pairing code: {pairing.code} (valid {mins} more min): `app headless runners pair NAME {pairing.code}`")
    else:
        print("pairing code: none (`app agent pair` makes one)")
    print(f"jobs: {out['jobs_running']} running, {out['jobs_total']} in the journal")
    if queue:
        print(_queue_table(queue, now))
    return 0 if info else 1


def _queue_table(rows: list[dict[str, Any]], now: float) -> str:
    """Running and waiting jobs, with whose they are (`app agent status`)."""
    head = ["JOB", "STATE", "TURN", "OWNER", "WORKFLOW", "RUN", "GPU", "CPU", "SINCE"]
    lines = []
    for r in rows:
        since = r["started_at"] or r["submitted_at"]
        took = span(max(0.0, now - since)) if since else "-"
        limit = f" of {span(r['max_duration_s'])}" if r["started_at"] and r["max_duration_s"] else ""
        lines.append(
            [
                str(r["job_id"])[:12],
                str(r["state"]),
                str(r["turn"] or "-"),
                str(r["owner"]),
                str(r["workflow"])[:32],
                str(r["run"])[:32],
                str(r["gpus"]),
                f"{r['cpus']:g}",
                took + limit,
            ]
        )
    widths = [max(len(h), *(len(row[i]) for row in lines)) for i, h in enumerate(head)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [head, *lines])


_LIVE_GRACE_S = 3600.0


def _running_info(home: AgentHome) -> dict[str, Any] | None:
    """agent.json of a live agent, or None (a stale file from a killed agent counts as not running)."""
    try:
        info: dict[str, Any] = json.loads(home.info_file.read_text())
        os.kill(int(info["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info


def _gc(home: AgentHome, args: argparse.Namespace) -> None:
    """Containers first (see _gc_containers), then files within the budget (agent/retention.py)."""
    max_size = parse_size(args.max_size) if args.max_size is not None else None
    if args.keep_days is not None and args.keep_days < 0:
        raise AgentError("--keep-days must be 0 or more")
    lock = _stopped_agent_lock(home) if args.queued else None
    try:
        containers = _gc_containers(home, quiet=args.json)
        # A live agent may be about to use a blob or serve a finished job's artifacts: keep the last hour's.
        recent_s = _LIVE_GRACE_S if _running_info(home) else 0
        report = collect(home, args.keep_days, max_size, recent_s=recent_s, queued=args.queued)
    finally:
        if lock is not None:
            os.close(lock)
    if args.json:
        print(json.dumps({"containers_removed": containers, **dataclasses.asdict(report)}, indent=2))
        return
    for job_id in report.queued_cancelled:
        print(f"cancelled queued job {job_id}: its files freed")
    for job_id in report.jobs_removed:
        print(f"removed job {job_id}")
    print(
        f"freed {_mb(report.bytes_freed)}: {len(report.jobs_removed)} finished job(s), "
        f"{report.blobs_removed} cached blob(s), {report.pyenvs_removed} requirements env(s); kept {_mb(report.bytes_kept)} and "
        f"{report.kept_unfinished} unfinished job(s) in {home.root}"
    )
    if report.kept_recent:
        print(
            f"kept {report.kept_recent} job(s)/blob(s) used in the last hour: the agent is running "
            "(stop it for gc to take them too)"
        )
    if report.queued_kept:
        print(
            f"kept {report.queued_kept} queued job(s) holding {_mb(report.queued_bytes)}: `--queued`, with the "
            "agent stopped, cancels them and frees their files"
        )


def _stopped_agent_lock(home: AgentHome) -> int | None:
    """The data dir's lock, exclusive (AgentHome.lock): an agent running on it, or starting, holds it
    shared, and must not find a queued job's files gone under it. AgentError while one does;
    None when there is no data dir (nothing queued either)."""
    if not home.root.is_dir():
        return None
    info = _running_info(home)
    fd = home.lock(exclusive=True)
    if fd is None or info is not None:
        if fd is not None:
            os.close(fd)
        pid = f" (pid {info['pid']})" if info else ""
        raise AgentError(
            f"--queued: the agent on {home.root} is running{pid}: stop it first, or have the jobs' "
            "controllers stop them (`app headless stop`)"
        )
    return fd


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _gc_containers(home: AgentHome, quiet: bool) -> int:
    """Remove containers of this agent (by label) that no unfinished job of its journal runs in.

    Containers of unfinished jobs stay: a running agent is using them, or the
    next start re-adopts them. No Docker engine: nothing to remove.
    """
    from lanpool.agent.executors import ExecutorError
    from lanpool.agent.executors.docker import DockerExecutor, DockerUnavailable

    try:
        docker = DockerExecutor.connect(str(home.root))
    except DockerUnavailable as exc:
        if not quiet:
            print(f"containers: none removed ({exc})")
        return 0
    active = set()
    if home.jobs.is_dir():
        for job_dir in home.jobs.iterdir():
            if (job_dir / "job.json").exists():
                record = JobRecord.load(job_dir)
                if not record.terminal:
                    active.add(record.job_id)
    try:
        leftovers = docker.leftovers(active)
    except ExecutorError as exc:
        raise AgentError(str(exc)) from None
    for container in leftovers:
        docker.remove(container)
        if not quiet:
            print(
                f"removed container {container.short_id} (job {container.labels.get('lanpool.job', '?')}, "
                f"{container.status})"
            )
    if not quiet:
        print(f"{len(leftovers)} leftover container(s) removed; {len(active)} unfinished job(s) in {home.root}")
    return len(leftovers)
