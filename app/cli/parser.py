"""The command line of `app headless`: its verbs and options. `run` and `plan` take
lanpool's options before the workflow name and its variables (`--NAME VALUE`) after
it: app/cli/workflow_args.py reads those."""

import argparse
import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from lanpool import __version__
from lanpool.app.errors import ExitCode, UsageError

if TYPE_CHECKING:  # read only by `run` and `plan`: imported there (start-up of the other verbs)
    from lanpool.app.cli.workflow_args import Options

# Every verb builds the whole parser: what its option types need (the controller, the workflow
# loader and yaml) is imported when an option of that type is given, not here (start-up time).
DEFAULT_PRUNE_AGE = "7d"  # app/runs/retention.py's, for --help (tests/integration/test_import_budget.py agrees)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No prefixes: `--run 3` would otherwise match `--runner` and `--res` `--resume`,
        # swallowing what `run` keeps as workflow variables.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        # `run`'s and `plan`'s own parsers, for their --help without a workflow.
        self.verb_parsers: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other usage error
        self.exit(ExitCode.USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _max_parallel(text: str) -> int:
    """`--max-parallel N`: 1 to a sweep's most points."""
    from lanpool.app.workflows.sweep_spec import MAX_POINTS

    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_POINTS:
        raise argparse.ArgumentTypeError(f"expects a whole number of points from 1 to {MAX_POINTS}, not {text[:40]!r}")
    return count


def _node_count(text: str) -> int:
    """`--nodes N`: how many runners, 1 to MAX_NODES (0 or less used to mean one node, silently)."""
    from lanpool.app.workflows.loader import MAX_NODES

    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_NODES:
        raise argparse.ArgumentTypeError(f"expects a whole number of runners from 1 to {MAX_NODES}, not {text[:40]!r}")
    return count


def age_seconds(text: str) -> float:
    """`--older-than 7d` as seconds (app/runs/retention.py reads it, for the TUI too)."""
    from lanpool.app.controller import parse_age

    try:
        return parse_age(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def build_parser(only: str | None = None) -> _Parser:
    """The whole command line; with `only` ("run" or "plan"), that verb alone: what parsing
    a `run` needs, without building the other verbs (argparse's gettext look-ups for every
    help text were ~10 ms of each `run`)."""
    parser = _Parser(prog="app headless", description="lanpool without the TUI: for scripts and CI.")
    parser.add_argument("-V", "--version", action="version", version=f"lanpool {__version__}")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB", parser_class=_Parser)
    if only == "run":
        parser.verb_parsers = {"run": _add_run(sub)}
        return parser
    if only == "plan":
        parser.verb_parsers = {"plan": _add_plan(sub)}
        return parser
    run = _add_run(sub)
    plan = _add_plan(sub)
    # Listed for help only: parse_args reads `dev ...` as `run --dev ...` (app/cli/dev_env_verbs.py).
    sub.add_parser(
        "dev",
        add_help=False,
        help="a dev environment: a job that stays up for ssh, scp, rsync and your editor (run --dev)",
        usage="app headless dev [options] [WORKFLOW [--VARIABLE VALUE ...]]",
    )

    status = sub.add_parser("status", help="runs and their jobs, newest first; with RUN: that run in full")
    status.add_argument(
        "ref", nargs="?", metavar="RUN|JOB", help="one run (or job) in full: jobs, nodes, resources ..."
    )
    status.add_argument("-n", "--limit", type=int, default=20, help="how many runs (default 20)")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--no-refresh", action="store_true", help="do not ask runners about unfinished jobs")
    status.add_argument(
        "-w",
        "--watch",
        nargs="?",
        type=float,
        const=2.0,
        default=None,
        metavar="SECONDS",
        help="redraw every SECONDS (default 2) until Ctrl-C, like `watch`",
    )
    _status_filters(status)

    logs = sub.add_parser("logs", help="print a run's or job's log")
    logs.add_argument("ref", metavar="RUN|JOB")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    logs.add_argument("--node", type=int, default=None, help="only this node's lines (multi-node jobs)")
    logs.add_argument("--tail", type=int, default=None, metavar="N", help="only the last N lines (of each node)")
    logs.add_argument(
        "--since",
        metavar="WHEN",
        help="only lines since then: 10m, 2h, 1d ago, or a local time (2025-05-01 14:00, 14:00)",
    )
    logs.add_argument("-t", "--timestamps", action="store_true", help="each line with the time its runner received it")
    logs.add_argument(
        "--raw",
        action="store_true",
        help="the bytes as the job wrote them, escape sequences included (by default a terminal "
        "gets them neutralised; a file or pipe always gets the bytes)",
    )

    _add_stop(sub)
    _add_attach(sub)

    art = sub.add_parser("artifacts", help="list or download a job's artifacts")
    art_sub = art.add_subparsers(dest="art_verb", required=True, metavar="VERB", parser_class=_Parser)
    art_list = art_sub.add_parser("list", help="files a job brought back")
    art_list.add_argument("ref", metavar="RUN|JOB")
    art_list.add_argument("-l", "--long", action="store_true", help="with sizes")
    art_list.add_argument("--json", action="store_true")
    art_dl = art_sub.add_parser("download", help="copy a job's artifacts to a directory")
    art_dl.add_argument("ref", metavar="RUN|JOB")
    art_dl.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="target dir (default: $LANPOOL_DOWNLOADS/RUN, else your downloads dir /lanpool/RUN; never the project)",
    )

    rm = sub.add_parser(
        "rm", help="delete runs (or a job's run) with their logs and artifacts, printing the space freed"
    )
    rm.add_argument("refs", nargs="+", metavar="RUN|JOB")
    rm.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    rm.add_argument("--json", action="store_true", help="machine-readable output")

    prune = sub.add_parser("prune", help="delete ended runs older than an age, with their logs and artifacts")
    prune.add_argument(
        "--older-than",
        type=age_seconds,
        default=DEFAULT_PRUNE_AGE,  # a string default goes through `type` when parsed, only if used
        metavar="AGE",
        help=f"runs created longer ago than AGE: 12h, 7d, 2w ... (default {DEFAULT_PRUNE_AGE})",
    )
    prune.add_argument("--keep-tagged", action="store_true", help="keep runs that carry a tag (--tag)")
    prune.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    prune.add_argument("--json", action="store_true", help="machine-readable output")

    runners = sub.add_parser("runners", help="runners on the LAN and their state (browses mDNS, checks each)")
    runners.add_argument("--json", action="store_true")
    runners.add_argument("--wait", type=float, default=1.5, help="seconds to browse mDNS (0: only check known ones)")
    runners_sub = runners.add_subparsers(dest="runners_verb", metavar="VERB", parser_class=_Parser)
    add = runners_sub.add_parser("add", help="trust the runner at this address, pinning its host key")
    add.add_argument("address", metavar="HOST[:PORT]")
    forget = runners_sub.add_parser("remove", help="forget a runner (and its pinned host key)")
    forget.add_argument("name")
    pair = runners_sub.add_parser("pair", help="pair with a runner using the code `app agent status` shows there")
    pair.add_argument("name", metavar="NAME|HOST[:PORT]")
    pair.add_argument("code")

    metrics = sub.add_parser("metrics", help="a job's training metrics (loss curves), from its metrics logger")
    metrics.add_argument("ref", metavar="RUN|JOB")
    metrics.add_argument("--name", action="append", help="only this metric (repeatable), e.g. train_loss")
    metrics.add_argument("--json", action="store_true", help="every point as JSON")
    metrics.add_argument("--gpu", action="store_true", help="only the GPU figures the runner sampled (gpuN_util, ...)")

    compare = sub.add_parser(
        "compare", help="runs side by side: the variables that differ, state, duration, each metric's last and best"
    )
    compare.add_argument("refs", nargs="+", metavar="RUN|JOB", help="runs (their workflow's jobs) or job ids")
    compare.add_argument("--metric", action="append", help="only this metric (repeatable; default: every one logged)")
    compare.add_argument("--sort", metavar="METRIC", help="order the rows by this metric's best, best first")
    compare.add_argument(
        "--mode",
        choices=("min", "max"),
        help="which way is better (default: max for names like acc, f1, score; else min, as for a loss)",
    )
    compare.add_argument("--json", action="store_true", help="the rows as JSON: variables, status, each metric")

    usage = sub.add_parser(
        "usage", help="GPU-, CPU- and wall-hours of this controller's jobs by runner, workflow or run (sreport)"
    )
    usage.add_argument(
        "--since",
        default="30d",
        metavar="AGE",
        help="the last AGE: 12h, 30d, 2w ... (default 30d); a job that started before counts from then",
    )
    usage.add_argument(
        "--by",
        choices=("runner", "workflow", "run"),
        default="runner",
        help="a row per runner, workflow or run (default runner). GPUs and CPUs as each job asked, on each of its "
        "nodes: GPU-hours = GPUs x hours; CPU-hours = CPUs x hours (a job that asked none counts 0)",
    )
    usage.add_argument("--json", action="store_true", help="rows, total and each job's nodes counted, as JSON")

    sub.add_parser("key", help="print the path of this controller's public key (for `app agent authorize`)")

    # Into a running job (app/cli/shell_verbs.py).
    ssh = sub.add_parser("ssh", help="an interactive shell inside a running job (its container, or its workspace)")
    ssh.add_argument("ref", metavar="RUN|JOB")
    ssh.add_argument("--node", type=int, default=None, help="that node of a multi-node job (default 0)")
    exe = sub.add_parser("exec", help="run one command inside a running job; exits with its exit code")
    exe.add_argument("ref", metavar="RUN|JOB")
    exe.add_argument("--node", type=int, default=None, help="that node of a multi-node job (default 0)")
    exe.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    ports = sub.add_parser("ports", help="forward a running job's declared ports to this machine's 127.0.0.1")
    ports.add_argument("ref", metavar="RUN|JOB")
    ports.add_argument("--node", type=int, default=None, help="that node of a multi-node job (default 0)")
    ports.add_argument("--json", action="store_true", help="the forwards as JSON (one line), then hold them")
    # Running jobs as OpenSSH hosts (app/cli/dev_verbs.py): `ssh lanpool-RUN`, scp, rsync, VS Code.
    ssh_config = sub.add_parser(
        "ssh-config", help="an ssh Host entry per running job (ssh/scp/rsync/VS Code to lanpool-RUN)"
    )
    ssh_config.add_argument(
        "--install", action="store_true", help="make ~/.ssh/config include it (its first line; once)"
    )
    ssh_config.add_argument("--json", action="store_true", help="the entries as JSON")
    ssh_config.add_argument(
        "--no-control-master", action="store_true", help="no ControlMaster: each ssh opens its own connection"
    )
    secrets = sub.add_parser("secrets", help="values for `${{ secrets.NAME }}` in a workflow's env (kept 0600)")
    secrets_sub = secrets.add_subparsers(dest="secrets_verb", required=True, metavar="VERB", parser_class=_Parser)
    secret_set = secrets_sub.add_parser("set", help="set a secret; the value from stdin or a prompt, never argv")
    secret_set.add_argument("name", metavar="NAME")
    secret_set.add_argument("--from-file", type=Path, metavar="FILE", help="read the value from FILE")
    secret_list = secrets_sub.add_parser("list", help="the secrets' names (never their values)")
    secret_list.add_argument("--json", action="store_true")
    secret_rm = secrets_sub.add_parser("rm", help="remove a secret")
    secret_rm.add_argument("name", metavar="NAME")
    parser.verb_parsers = {"run": run, "plan": plan}
    return parser


def _status_filters(status: argparse.ArgumentParser) -> None:
    status.add_argument(
        "--state",
        dest="states",
        type=_states,
        action="append",
        default=None,
        metavar="STATE[,STATE]",
        help="only runs with a job in one of these states: queued, submitted, running, done, failed, "
        "stopped, aborted, lost, or `active` (the first three) (repeatable)",
    )
    status.add_argument("--workflow", help="only runs of this workflow (or with a job of it)")
    status.add_argument("--runner", help="only runs with a job on this runner")
    status.add_argument("--tag", help="only the run with this tag")
    status.add_argument("--project", help="only runs of this project: its name (the dir's last part) or its dir")


_ACTIVE = ("QUEUED", "SUBMITTED", "RUNNING")  # `--state active`: what `stop --all` would stop


def _states(text: str) -> tuple[str, ...]:
    """`--state running,failed` as job states (JobState values), checked."""
    from lanpool.protocol import JobState

    states: list[str] = []
    for word in (w.strip().upper() for w in text.split(",")):
        if word == "ACTIVE":
            states += _ACTIVE
        elif word in JobState.__members__:
            states.append(word)
        else:
            valid = ", ".join(s.lower() for s in JobState.__members__)
            raise argparse.ArgumentTypeError(f"{word.lower()[:40]!r} is not a state; give one of {valid}, or active")
    return tuple(states)


def _add_stop(sub: Any) -> None:
    stop = sub.add_parser("stop", help="stop runs or jobs: SIGTERM, then SIGKILL after a grace period")
    stop.add_argument("refs", nargs="*", metavar="RUN|JOB", help="one or more runs or jobs")
    stop.add_argument("--all", action="store_true", help="every unfinished run of this controller (asks first)")
    stop.add_argument("-y", "--yes", action="store_true", help="with --all: no question (needed without a terminal)")
    stop.add_argument("--abort", action="store_true", help="do not bring back artifacts")
    stop.add_argument("--grace", type=float, default=None, help="seconds before SIGKILL (default: the runner's, 10)")


def _add_attach(sub: Any) -> None:
    attach = sub.add_parser(
        "attach", help="follow a run's log and forward its job's ports, in one command (Ctrl-C detaches)"
    )
    attach.add_argument("ref", metavar="RUN|JOB")
    attach.add_argument("--no-ports", action="store_true", help="follow the log only")
    _notify_options(attach)


def _notify_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--notify",
        action="store_true",
        help="a desktop notification when the job ends (notify-send with a display, osascript on macOS)",
    )
    p.add_argument(
        "--notify-cmd",
        metavar="CMD",
        help="run CMD when the job ends, with LANPOOL_RUN_NAME, LANPOOL_JOB_ID, LANPOOL_WORKFLOW, "
        "LANPOOL_JOB_STATE and LANPOOL_EXIT_CODE in its env (split like a shell line, run without one)",
    )


def _add_run(sub: Any) -> argparse.ArgumentParser:
    run: argparse.ArgumentParser = sub.add_parser(
        "run",
        add_help=False,
        help="run a workflow on a runner, streaming its logs",
        usage="app headless run [options] [WORKFLOW [--VARIABLE VALUE ...]]",
        description="lanpool's options go before the workflow name, the workflow's variables after it.",
    )
    run.add_argument("workflow", nargs="?", help="workflow name (omit to list the workflows)")
    _run_options(run)
    _run_name_option(run)
    _notify_options(run)
    _resource_options(run)
    _plan_options(run)
    return run


def _add_plan(sub: Any) -> argparse.ArgumentParser:
    plan: argparse.ArgumentParser = sub.add_parser(
        "plan",
        add_help=False,
        help="show what `run` would do: each job, run or reused, and why",
        usage="app headless plan [options] WORKFLOW [--VARIABLE VALUE ...]",
        description="lanpool's options go before the workflow name, the workflow's variables after it.",
    )
    plan.add_argument("workflow", help="workflow name")
    _resource_options(plan)
    _plan_options(plan)
    return plan


def _idle(text: str) -> float:
    """`--idle 2h`; `0`, `off` or `never`: no idle limit."""
    if text.strip().lower() in ("0", "off", "never"):
        return 0.0
    return _duration(366 * 24 * 3600)(text)


def _duration(most: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        from lanpool.app.workflows.limits import parse_duration

        try:
            return parse_duration(text, "duration", most)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--runner",
        help="a paired or added runner's NAME, or HOST[:PORT]: an address trusts and pins "
        "what answers there, like `runners add` (default: the best-fitting trusted runner)",
    )
    p.add_argument("-d", "--detach", action="store_true", help="submit and return; follow later with `logs -f`")
    p.add_argument(
        "--max-parallel",
        type=_max_parallel,
        default=None,
        metavar="N",
        help="a sweep's points: at most N sent and not ended at once; the next is sent as one ends (not with -d)",
    )
    p.add_argument(
        "--dev",
        action="store_true",
        help="a dev environment (`app headless dev`): the job stays up after its commands for ssh, scp, "
        "rsync and your editor (`app headless ssh-config`), until stopped, its max_duration or --idle",
    )
    p.add_argument(
        "--idle",
        type=_idle,
        default=None,
        metavar="DURATION",
        help="a dev environment ends after this long with no session into it (default: the workflow's "
        "`idle:`, else 2h; 0: never)",
    )
    p.add_argument(
        "--ide",
        default=None,
        metavar="jupyter",
        help="a dev environment that also serves JupyterLab: `dev` forwards it and prints its URL with its "
        "token (default: the workflow's `ide:`)",
    )
    p.add_argument(
        "--nodes", type=_node_count, default=None, help="run the workflow on N runners at once (multi-node DDP), N >= 1"
    )
    p.add_argument("--resume", metavar="RUN|JOB", help="resume from that job's checkpoint (placed on every node)")
    p.add_argument(
        "--port",
        dest="ports",
        type=_port,
        action="append",
        default=None,
        help="forward this port of the job (the runner's 127.0.0.1) to this machine while it runs (repeatable)",
    )
    p.add_argument(
        "--max-duration",
        type=_duration(366 * 24 * 3600),
        metavar="DURATION",
        help="stop the job after this long (2h, 90m, 30s); the runner keeps the limit (like `max_duration:`)",
    )
    p.add_argument(
        "--queue-timeout",
        type=_duration(366 * 24 * 3600),
        metavar="DURATION",
        help="give up when no runner could take the job for this long (its runner offline); default: wait",
    )


def _run_name_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--name",
        dest="run_name",
        type=_run_name,
        metavar="NAME",
        help="the run's name (unique; letters, digits, - _ .), instead of a new one like pink-fly-1",
    )


def _resource_options(p: argparse.ArgumentParser) -> None:
    """`--gpu`, `--cpu`, `--memory`: the requested workflow's `resources:` at run time, checked by
    the workflow's own rule (app/workflows/resources.py). A workflow variable of the same name
    is still given after the workflow name (app/cli/workflow_args.py: there a variable wins)."""
    p.add_argument(
        "--gpu",
        type=_resource("gpu"),
        metavar="N|NAME:N",
        help="GPUs for the job, over the workflow's resources.gpu (2, or A100:2; 0: none)",
    )
    p.add_argument("--cpu", type=_resource("cpu"), metavar="N", help="CPUs for the job, over resources.cpu")
    p.add_argument(
        "--memory",
        type=_resource("memory"),
        metavar="SIZE",
        help="memory for the job (32G, 512MB), over resources.memory",
    )


def _resource(key: str) -> Callable[[str], dict[str, int | str]]:
    def parse(text: str) -> dict[str, int | str]:
        from lanpool.app.workflows.resources import normalize_resources

        value: object = text
        if key == "gpu" and ":" in text:  # NAME:COUNT, as `sky launch --gpus A100:2`
            name, _, count = text.rpartition(":")
            value = {"name": name.strip(), "count": count.strip()}
            if not name.strip():
                raise argparse.ArgumentTypeError(f"{text!r}: give N or NAME:N (A100:2)")
        try:
            return normalize_resources({key: value})
        except ValueError as exc:  # its message names `resources.KEY`: here the option was given
            raise argparse.ArgumentTypeError(
                str(exc).replace(f"resources.{key}.count", f"--{key}").replace(f"resources.{key}", f"--{key}")
            ) from None

    return parse


_RUN_NAME_CHARS = 64


def _run_name(text: str) -> str:
    """`--name`: it names directories (downloads) and is typed in commands: a plain word."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", text) or len(text) > _RUN_NAME_CHARS:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a run name: up to {_RUN_NAME_CHARS} letters, digits, '-', '_' or '.', "
            "starting with a letter or digit"
        )
    return text


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
    p.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="VAR=V1,V2,...",
        help="one job per value, all in one run (repeatable: every combination); a point that ran before "
        "with the same inputs is reused; `compare RUN` puts them side by side",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env for the run's jobs, over the workflow's env (repeatable; LANPOOL_*/MASTER_* are lanpool's)",
    )
    p.add_argument(
        "--env-file",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="KEY=VALUE lines (dotenv: # comments, quotes), applied before --env",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line as a Namespace. For `run` and `plan` only the options before the
    workflow name are read here; the words after it stay in `tail` until the workflow's
    variables are known (app/cli/workflow_args.py: read_tail, through `apply_tail`)."""
    if argv and argv[0] == "dev":  # `dev W ...` is `run --dev W ...`: the same options and variables
        argv = ["run", "--dev", *argv[1:]]
    if not argv or argv[0] not in ("run", "plan"):
        return build_parser().parse_args(argv)
    verb = argv[0]
    parser = _verb_parser(verb)
    head, workflow, tail = _split_at_workflow(parser, verb, argv[1:])
    args = parser.parse_args([verb, *head, *(["--", workflow] if workflow is not None else [])])
    args.tail, args.overrides = tail, {}
    if args.help and not args.workflow:
        parser.verb_parsers[verb].print_help()
        parser.exit(ExitCode.OK)
    return args


def verb_options(verb: str) -> "Options":
    """`run`'s or `plan`'s option spellings, for reading the words after the workflow name."""
    return _options(_verb_parser(verb).verb_parsers[verb])


@functools.cache
def _verb_parser(verb: str) -> _Parser:
    """`run`'s or `plan`'s parser alone, built once: parse_args and verb_options both read it."""
    return build_parser(only=verb)


def apply_options(verb: str, words: list[str], args: argparse.Namespace) -> None:
    """Set on `args` the lanpool options given after the workflow name (checked and typed as before it)."""
    if not words:
        return
    _options_parser(verb).parse_args(words, namespace=args)  # what was given before the name stays unless repeated here


@functools.cache
def _options_parser(verb: str) -> _Parser:
    """The lanpool options of `verb` alone (no workflow name), built once."""
    only = _Parser(prog=f"app headless {verb}", add_help=False)
    if verb == "run":
        _run_options(only)
        _run_name_option(only)
        _notify_options(only)
    _resource_options(only)
    _plan_options(only)
    return only


def _options(verb_parser: argparse.ArgumentParser) -> "Options":
    from lanpool.app.cli.workflow_args import Options

    takes_value: dict[str, bool] = {}
    aliases: dict[str, tuple[str, ...]] = {}
    for action in verb_parser._actions:
        for spelling in action.option_strings:
            takes_value[spelling] = action.nargs != 0
            aliases[spelling] = tuple(action.option_strings)
    return Options(takes_value, aliases)


def _split_at_workflow(parser: _Parser, verb: str, words: list[str]) -> tuple[list[str], str | None, list[str]]:
    """Options before the workflow name, the name, the words after it (variables, mostly)."""
    options = _options(parser.verb_parsers[verb])
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":  # `run -- NAME ...`: a name that looks like an option
            return words[:i], (words[i + 1] if i + 1 < len(words) else None), words[i + 2 :]
        if not word.startswith("-") or word == "-":
            return words[:i], word, words[i + 1 :]
        spelled, eq, _ = word.partition("=")
        if spelled in options.takes_value:
            i += 2 if options.takes_value[spelled] and not eq else 1
        elif spelled.startswith("--"):
            parser.error(
                f"{spelled} is not an option of `{verb}`; a workflow's variables go after its name: "
                f"app headless {verb} WORKFLOW {spelled} VALUE"
            )
        else:
            i += 1  # `-dh`: argparse reads (or refuses) short options put together
    return words, None, []


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1 to 65535)")
    return port
