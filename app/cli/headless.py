"""`app headless <verb>`: the controller from scripts and CI.

Every verb calls the same Controller API as the TUI. Errors are one line on
stderr and an ExitCode; `run` exits with the job's own exit code.
"""

import argparse
import asyncio
import json
import os
import socket
import sys
from pathlib import Path

from app.cli import render
from app.controller import ARTIFACTS_REFUSED, Controller, JobRow, parse_address
from app.errors import ExitCode, LanpoolError, UsageError
from app.formatting import RUNNER_HEADERS, ago, duration, runner_cells, size, status_text
from app.terminal_text import safe_text
from app.workflows import Project, find_project
from app.workflows.loader import MAX_NODES
from app.workflows.resolve import render_value


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        # No prefixes: `--run 3` would otherwise match `--runner` and `--res` `--resume`,
        # swallowing what `run` keeps as workflow variables.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # one line, exit 2, like every other usage error
        self.exit(ExitCode.USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _node_count(text: str) -> int:
    """`--nodes N`: how many runners, 1 to MAX_NODES (0 or less used to mean one node, silently)."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_NODES:
        raise argparse.ArgumentTypeError(f"expects a whole number of runners from 1 to {MAX_NODES}, not {text[:40]!r}")
    return count


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="app headless", description="lanpool without the TUI: for scripts and CI.")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB", parser_class=_Parser)

    run = sub.add_parser(
        "run",
        add_help=False,
        help="run a workflow on a runner, streaming its logs",
        usage="app headless run [WORKFLOW] [--VARIABLE VALUE ...] [options]",
    )
    run.add_argument("workflow", nargs="?", help="workflow name (omit to list the workflows)")
    run.add_argument(
        "--runner",
        help="a paired or added runner's NAME, or HOST[:PORT]: an address trusts and pins "
        "what answers there, like `runners add` (default: the best-fitting trusted runner)",
    )
    run.add_argument("-d", "--detach", action="store_true", help="submit and return; follow later with `logs -f`")
    run.add_argument(
        "--nodes", type=_node_count, default=None, help="run the workflow on N runners at once (multi-node DDP), N >= 1"
    )
    run.add_argument("--resume", metavar="RUN|JOB", help="resume from that job's checkpoint (placed on every node)")
    _plan_options(run)

    plan = sub.add_parser(
        "plan",
        add_help=False,
        help="show what `run` would do: each job, run or reused, and why",
        usage="app headless plan WORKFLOW [--VARIABLE VALUE ...] [options]",
    )
    plan.add_argument("workflow", help="workflow name")
    _plan_options(plan)

    status = sub.add_parser("status", help="runs and their jobs, newest first")
    status.add_argument("-n", "--limit", type=int, default=20, help="how many runs (default 20)")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--no-refresh", action="store_true", help="do not ask runners about unfinished jobs")

    logs = sub.add_parser("logs", help="print a run's or job's log")
    logs.add_argument("ref", metavar="RUN|JOB")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    logs.add_argument("--node", type=int, default=None, help="only this node's lines (multi-node jobs)")
    logs.add_argument(
        "--raw",
        action="store_true",
        help="the bytes as the job wrote them, escape sequences included (by default a terminal "
        "gets them neutralised; a file or pipe always gets the bytes)",
    )

    stop = sub.add_parser("stop", help="stop a run or job: SIGTERM, then SIGKILL after a grace period")
    stop.add_argument("ref", metavar="RUN|JOB")
    stop.add_argument("--abort", action="store_true", help="do not bring back artifacts")
    stop.add_argument("--grace", type=float, default=None, help="seconds before SIGKILL (default: the runner's, 10)")

    art = sub.add_parser("artifacts", help="list or download a job's artifacts")
    art_sub = art.add_subparsers(dest="art_verb", required=True, metavar="VERB", parser_class=_Parser)
    art_list = art_sub.add_parser("list", help="files a job brought back")
    art_list.add_argument("ref", metavar="RUN|JOB")
    art_list.add_argument("-l", "--long", action="store_true", help="with sizes")
    art_list.add_argument("--json", action="store_true")
    art_dl = art_sub.add_parser("download", help="copy a job's artifacts to a directory")
    art_dl.add_argument("ref", metavar="RUN|JOB")
    art_dl.add_argument("-o", "--output", type=Path, default=None, help="target dir (default ./RUN_NAME)")

    runners = sub.add_parser("runners", help="runners on the LAN and their state (browses mDNS, checks each)")
    runners.add_argument("--json", action="store_true")
    runners.add_argument("--wait", type=float, default=1.5, help="seconds to browse mDNS (0: only check known ones)")
    runners_sub = runners.add_subparsers(dest="runners_verb", metavar="VERB", parser_class=_Parser)
    add = runners_sub.add_parser("add", help="trust the runner at this address, pinning its host key")
    add.add_argument("address", metavar="HOST[:PORT]")
    rm = runners_sub.add_parser("remove", help="forget a runner (and its pinned host key)")
    rm.add_argument("name")
    pair = runners_sub.add_parser("pair", help="pair with a runner using the code `app agent status` shows there")
    pair.add_argument("name", metavar="NAME|HOST[:PORT]")
    pair.add_argument("code")

    metrics = sub.add_parser("metrics", help="a job's training metrics (loss curves), from its metrics logger")
    metrics.add_argument("ref", metavar="RUN|JOB")
    metrics.add_argument("--name", action="append", help="only this metric (repeatable), e.g. train_loss")
    metrics.add_argument("--json", action="store_true", help="every point as JSON")

    sub.add_parser("key", help="print the path of this controller's public key (for `app agent authorize`)")
    parser.verb_parsers = {"run": run, "plan": plan}
    return parser


def _plan_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-h", "--help", action="store_true", help="this help; with a workflow: its variables")
    p.add_argument(
        "--project", type=Path, default=None, help="project dir (default: nearest with .lanpool/ or .dstack/)"
    )
    p.add_argument("--no-cache", action="store_true", help="run every job, even those with a finished twin")
    p.add_argument(
        "--reuse", action="store_true", help="reuse the requested workflow too when its inputs are unchanged"
    )
    p.add_argument("--tag", help="name this run, so `depends-on: [WORKFLOW:TAG]` can use its artifacts")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Like parse_args, but `run`/`plan` keep unknown `--name value` pairs as variable overrides."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.verb not in ("run", "plan"):
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        return args
    args.overrides = _overrides(extra, parser)
    if args.help and not args.workflow:
        parser.verb_parsers[args.verb].print_help()
        parser.exit(ExitCode.OK)
    return args


def _overrides(tokens: list[str], parser: argparse.ArgumentParser) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--") or len(token) == 2:
            parser.error(f"unexpected argument {token!r}: variables are given as --NAME VALUE")
        name, eq, value = token[2:].partition("=")
        if not eq:
            if i + 1 >= len(tokens):
                parser.error(f"--{name} needs a value")
            value = tokens[i + 1]
            i += 1
        out[name.replace("-", "_") if "-" in name else name] = value
        i += 1
    return out


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    handler = _HANDLERS[args.verb]
    ctl = None
    try:
        ctl = Controller()
        return int(asyncio.run(handler(ctl, args)))
    except LanpoolError as exc:
        print(f"app: error: {safe_text(exc.message)}", file=sys.stderr)  # may quote a runner's text
        return int(exc.exit_code)
    except BrokenPipeError:  # `app headless ... | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.OK
    except KeyboardInterrupt:
        print(
            "\napp: interrupted; jobs keep running on their runners (`app headless stop RUN` stops one)",
            file=sys.stderr,
        )
        return 130
    finally:
        if ctl is not None:
            ctl.close()


# -- verbs -----------------------------------------------------------------------


def _project(ctl: Controller, args) -> Project:
    root = args.project or find_project(Path.cwd())
    if root is None:
        raise UsageError("no .lanpool/workflows.yaml (or .dstack/workflows.yaml) here or above: see README 'Workflows'")
    return ctl.load_project(root)


def _workflow_help(ctl: Controller, project: Project, name: str, verb: str) -> None:
    wf = project.get(name)
    print(f"usage: app headless {verb} {name} [--VARIABLE VALUE ...] [options]")
    if wf.help:
        print(f"\n{wf.help}")
    variables = ctl.variables(project, name)
    if variables:
        print("\nvariables (defaults from variables.yaml):")
        width = max(len(v) for v in variables) + 2
        for var, default in sorted(variables.items()):
            print(f"  --{var.ljust(width)} {render_value(default)}")
    else:
        print("\nno variables (define them in .lanpool/variables.yaml)")
    print("\noptions: --runner NAME|HOST[:PORT], -d/--detach, --no-cache, --reuse, --tag NAME, --json")


async def _run(ctl: Controller, args) -> int:
    project = _project(ctl, args)
    if not args.workflow:
        if args.json:
            print(
                json.dumps(
                    [
                        {
                            "name": w.name,
                            "help": w.help,
                            "depends_on": [d.workflow for d in w.depends_on],
                            "variables": project.variables_of(w.name),
                        }
                        for w in project.workflows.values()
                    ],
                    indent=2,
                )
            )
            return ExitCode.OK
        print(f"workflows in {project.workflows_file}:")
        width = max((len(n) for n in project.workflows), default=0)
        for wf in project.workflows.values():
            print(f"  {wf.name.ljust(width)}  {wf.help}".rstrip())
        return ExitCode.OK
    if args.help:
        _workflow_help(ctl, project, args.workflow, "run")
        return ExitCode.OK
    submitted: list = []

    def announce(sub) -> None:
        submitted.append(sub)
        _say(f"run {sub.run_name}: job {sub.job_id} ({ctl.runs.job(sub.job_id).workflow}) on runner {sub.runner}")
        if args.detach:
            _say(
                f"detached: `app headless logs -f {sub.run_name}` follows it, `app headless stop {sub.run_name}` stops it"
            )

    try:
        outcome = await ctl.run(
            project,
            args.workflow,
            args.runner,
            args.overrides,
            sink=render.LogPrinter(),
            say=_say,
            on_submitted=announce,
            follow=not args.detach,
            no_cache=args.no_cache,
            reuse=args.reuse,
            tag=args.tag,
            nodes=args.nodes,
            resume=args.resume,
        )
    except LanpoolError as exc:
        if not submitted:
            raise
        name = submitted[0].run_name
        raise type(exc)(f"{exc.message}; the job may still run: `app headless logs -f {name}` re-attaches") from None
    if args.detach:
        return ExitCode.OK
    job = outcome.last
    if job is None:
        _say(f"run {outcome.run_name}: every job reused; nothing ran")
        return ExitCode.OK
    _say(_summary(ctl, job))
    if job.artifacts_pulled == ARTIFACTS_REFUSED and not job.exit_code:  # it exited 0, but what it made was refused
        return ExitCode.FAILED
    return job.exit_code if job.exit_code is not None else ExitCode.FAILED


async def _plan(ctl: Controller, args) -> int:
    project = _project(ctl, args)
    if args.help:
        _workflow_help(ctl, project, args.workflow, "plan")
        return ExitCode.OK
    plan = ctl.plan(project, args.workflow, args.overrides, args.no_cache, args.reuse)
    if args.json:
        print(json.dumps(plan.to_json(), indent=2))
        return ExitCode.OK
    print(f"plan for {args.workflow}: {len(plan.to_run)} of {len(plan.jobs)} job(s) to run")
    rows = [
        [
            j.workflow,
            j.action.upper(),
            ", ".join(j.deps + [f"{t.workflow}:{t.run_name}" for t in j.tagged]) or "-",
            j.key[:12],
            j.reason,
        ]
        for j in plan.jobs
    ]
    print(render.table(["WORKFLOW", "ACTION", "DEPENDS ON", "KEY", "WHY"], rows))
    return ExitCode.OK


async def _status(ctl: Controller, args) -> int:
    runs = ctl.runs.recent(args.limit)
    jobs = {r.name: ctl.runs.jobs_of(r.name) for r in runs}
    if not args.no_refresh:
        await ctl.refresh([j for js in jobs.values() for j in js])
        jobs = {r.name: ctl.runs.jobs_of(r.name) for r in runs}
    if args.json:
        out = [
            {
                "run": r.name,
                "workflow": r.workflow,
                "created_at": r.created_at,
                "jobs": [_job_json(ctl, j) for j in jobs[r.name]],
            }
            for r in runs
        ]
        print(json.dumps(out, indent=2))
        return ExitCode.OK
    if not runs:
        print("no runs yet: `app headless run WORKFLOW` starts one")
        return ExitCode.OK
    rows = []
    for r in runs:
        for j in jobs[r.name]:
            n_art = len(ctl.runs.artifacts(j.id))
            runner_state = ctl.pool.state_of(j.runner) if j.runner else None
            rows.append(
                [
                    r.name,
                    j.id,
                    j.workflow,
                    j.runner or "-",
                    status_text(j, runner_state, ctl.artifacts.pull_percent(j.id) if not j.artifacts_pulled else None),
                    ago(j.submitted_at),
                    duration(j.started_at, j.finished_at),
                    str(n_art) if n_art else "-",
                ]
            )
    print(render.table(["RUN", "JOB", "WORKFLOW", "RUNNER", "STATUS", "SUBMITTED", "DURATION", "ARTIFACTS"], rows))
    return ExitCode.OK


async def _logs(ctl: Controller, args) -> int:
    jobs = ctl.runs.resolve(args.ref)
    if args.node is not None and len(jobs) > 1:  # a run's jobs: those that have that node
        jobs = [j for j in jobs if ctl.node_count(j.id) > args.node] or jobs[-1:]
    printer = render.LogPrinter(raw=args.raw)
    for job in jobs:
        try:
            await ctl.follow(job.id, printer, follow=args.follow, say=_say, node=args.node)
        except LanpoolError as exc:
            if args.follow or isinstance(exc, UsageError):
                raise
            # The stored log was printed; the runner could not add to it.
            _say(f"(stored log only: {exc.message})")
    return ExitCode.OK


async def _stop(ctl: Controller, args) -> int:
    for job in ctl.runs.resolve(args.ref):
        if job.state.is_terminal():
            _say(f"job {job.id} already ended: {job.status}")
            continue
        job = await ctl.stop(job.id, abort=args.abort, grace_s=args.grace)
        _say(f"job {job.id}: {status_text(job)}")
    return ExitCode.OK


async def _artifacts(ctl: Controller, args) -> int:
    jobs = ctl.runs.resolve(args.ref)
    if args.art_verb == "list":
        await ctl.refresh(jobs)
        listing = {j.id: ctl.runs.artifacts(j.id) for j in jobs}
        if args.json:
            print(
                json.dumps(
                    [{"job": jid, "path": p, "size": s} for jid, files in listing.items() for p, s in files], indent=2
                )
            )
        else:
            for jid, files in listing.items():
                for path, n in files:
                    print(f"{size(n):>10}  {jid}  {path}" if args.long else path)
        return ExitCode.OK
    for job in jobs:
        output = args.output or Path.cwd() / job.run_name
        files = await ctl.download_artifacts(job.id, output)
        total = sum(s for _, s in files)
        _say(f"job {job.id}: {len(files)} file(s), {size(total)} -> {output}")
    return ExitCode.OK


async def _runners(ctl: Controller, args) -> int:
    if args.runners_verb == "remove":
        if not ctl.pool.forget(args.name):
            raise UsageError(f"no runner named {args.name!r}: `app headless runners` lists them")
        _say(f"forgot runner {args.name}")
        return ExitCode.OK
    if args.runners_verb == "pair":
        name = await ctl.pool.pair(args.name, args.code, label=socket.gethostname())
        _say(f"paired with runner {name}: it accepts this controller's key from now on")
        return ExitCode.OK
    if args.runners_verb == "add":
        host, port = parse_address(args.address, ctl.DEFAULT_PORT)
        name = await ctl.add_runner(host, port)
        _say(f"added runner {name} at {host}:{port}: its host key is pinned and it takes jobs from now on")
        return ExitCode.OK
    views = await ctl.pool.refresh(wait_s=max(0.0, args.wait))
    for view in views:
        if view.problem:  # one line each; the other runners are listed as usual
            _say(f"app: {view.problem}")
    if args.json:
        print(json.dumps([v.to_json() for v in views], indent=2))
    elif not views:
        print("no runners found: start `app agent serve` on a GPU machine, or `app headless runners add HOST[:PORT]`")
    else:
        print(render.table(RUNNER_HEADERS, [runner_cells(v) for v in views]))
    return ExitCode.OK


async def _metrics(ctl: Controller, args) -> int:
    jobs = ctl.runs.resolve(args.ref)
    await ctl.refresh(jobs)
    points = [p for j in jobs for p in ctl.metrics(j.id) if not args.name or p["name"] in args.name]
    if args.json:
        print(json.dumps(points, indent=2))
        return ExitCode.OK
    if not points:
        print("no metrics yet (jobs log them through training.metrics.LanpoolMetrics)")
        return ExitCode.OK
    latest: dict[str, dict] = {}
    for p in points:
        latest[p["name"]] = p
    rows = [
        [
            name,
            str(p["step"]),
            f"{p['value']:.6g}" if p["value"] is not None else "nan",
            str(sum(1 for q in points if q["name"] == name)),
        ]
        for name, p in sorted(latest.items())
    ]
    print(render.table(["METRIC", "LAST STEP", "LAST VALUE", "POINTS"], rows))
    return ExitCode.OK


async def _key(ctl: Controller, args) -> int:
    print(ctl.public_key_file)
    return ExitCode.OK


_HANDLERS = {
    "run": _run,
    "plan": _plan,
    "status": _status,
    "logs": _logs,
    "stop": _stop,
    "artifacts": _artifacts,
    "runners": _runners,
    "metrics": _metrics,
    "key": _key,
}


# -- output helpers ----------------------------------------------------------------


def _say(text: str) -> None:
    # Our own lines, but they quote runners and jobs (names, errors): never a control sequence.
    print(safe_text(text), file=sys.stderr, flush=True)


def _summary(ctl: Controller, job: JobRow) -> str:
    text = f"run {job.run_name}: {status_text(job)} in {duration(job.started_at, job.finished_at)}"
    if job.error:
        text += f": {job.error}"
    files = ctl.runs.artifacts(job.id)
    if files:
        text += f"; {len(files)} artifact file(s): `app headless artifacts download {job.run_name}`"
    return text


def _job_json(ctl: Controller, j: JobRow) -> dict:
    return {
        "job": j.id,
        "workflow": j.workflow,
        "runner": j.runner,
        "status": j.status,
        "exit_code": j.exit_code,
        "error": j.error,
        "submitted_at": j.submitted_at,
        "started_at": j.started_at,
        "finished_at": j.finished_at,
        "artifacts": [{"path": p, "size": s} for p, s in ctl.runs.artifacts(j.id)],
    }
