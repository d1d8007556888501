"""lanpool benchmark: dispatch latency and log throughput against bare asyncssh.

Everything runs on 127.0.0.1 in a temp dir: a controller home (LANPOOL_HOME),
a real `app agent serve`, a project with .lanpool/workflows.yaml, and a bare
asyncssh server that execs commands with bash (the baseline). Prints figures
and ratios; the exit code says only whether the benchmark could run.

    scripts/bench [--lines N] [--repeat K] [--flood-repeat R] [--unbuffered] [--json] [--keep]
"""

import argparse
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench_stats import BenchError, med, proc_cpu, run_bench, say

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.harness, and app of this checkout
from tests import harness  # noqa: E402

PY = harness.venv_python()
APP = list(harness.venv_app())
MARKER = b"hello-bench"
ECHO_CMD = "echo hello-bench"
DISPATCH_TARGET = 1.2  # lanpool / bare, first line, at most
THROUGHPUT_TARGET = 500_000  # lines/s stored, at least
THROUGHPUT_RATIO_TARGET = 0.8  # lanpool / raw channel lines/s, at least
COLD_TARGET_S = 0.2  # status, logs, runners: spawn -> exit
LINE_BYTES = 100


def flood_command(n: int) -> str:
    # 100 bytes a line: 10-digit index, 89 x, newline. `\n` stays literal for bash inside "...".
    return f"python -c \"import sys; w=sys.stdout.write; [w(f'{{i:010d}}' + 'x'*89 + '\\n') for i in range({n})]\""


# -- the baseline: a bare asyncssh server and client, written to the temp dir ---------

BARE_SERVER = r'''
"""Bare asyncssh server: exec'd commands run with bash, stdout piped back."""
import asyncio, os, sys
import asyncssh

ALGS = ["aes128-gcm@openssh.com"]
READ = 256 * 1024
ENV = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))


async def handle(process):
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", process.command or "", stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, env=ENV)
    try:
        while True:
            data = await proc.stdout.read(READ)
            if not data:
                break
            process.stdout.write(data)
            await process.stdout.drain()
    except (OSError, asyncssh.Error):
        pass
    process.exit(await proc.wait())


async def main(pubkey):
    key = asyncssh.generate_private_key("ssh-ed25519")
    server = await asyncssh.create_server(
        asyncssh.SSHServer, "127.0.0.1", 0, server_host_keys=[key], authorized_client_keys=pubkey,
        process_factory=handle, encoding=None, encryption_algs=ALGS, allow_scp=False)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()

asyncio.run(main(sys.argv[1]))
'''

BARE_CLIENT = r'''
"""Bare asyncssh client: exec one command; `cat` copies its stdout, `count` counts lines."""
import asyncio, sys
import asyncssh

ALGS = ["aes128-gcm@openssh.com"]


async def main(port, key, mode, command):
    async with asyncssh.connect(
            "127.0.0.1", int(port), username="bench", client_keys=[key], known_hosts=None,
            encryption_algs=ALGS, agent_path=None, config=[], preferred_auth=["publickey"]) as conn:
        proc = await conn.create_process(command, encoding=None, stdin=asyncssh.DEVNULL)
        out = sys.stdout.buffer
        lines = 0
        while True:
            data = await proc.stdout.read(256 * 1024)
            if not data:
                break
            if mode == "count":
                lines += data.count(b"\n")
            else:
                out.write(data)
                out.flush()
        await proc.wait()
        if mode == "count":
            print(lines)
        return proc.exit_status or 0

sys.exit(asyncio.run(main(*sys.argv[1:5])))
'''


# Runs `app headless run` in-process with marks around each step (monotonic clock, shared
# with the bench process on Linux): where a dispatch spends its time.
PROBE = r"""
import json, os, sys, time
T0 = float(os.environ["BENCH_T0"])
marks = []


def mark(name):
    marks.append([name, time.monotonic() - T0])


mark("interpreter_ready")
import lanpool.app.cli.headless as headless
mark("imports_done")
import lanpool.app.controller as controller_mod
import lanpool.app.keys as keys_mod  # app.runners.pool imports it when it first needs the key
import lanpool.app.runs.loop as run_loop_mod
from lanpool.app.cli import render
from lanpool.app.runners.client import RunnerSession


def wrap(owner, attr, name, is_async):
    orig = getattr(owner, attr)
    if is_async:
        async def wrapper(*a, **kw):
            mark(name + ":start")
            try:
                return await orig(*a, **kw)
            finally:
                mark(name + ":end")
    else:
        def wrapper(*a, **kw):
            mark(name + ":start")
            try:
                return orig(*a, **kw)
            finally:
                mark(name + ":end")
    setattr(owner, attr, wrapper)


wrap(controller_mod.Controller, "__init__", "controller_init", False)
wrap(controller_mod.Controller, "load_project", "load_project", False)
wrap(keys_mod, "load_or_create_client_key", "load_key", False)
wrap(run_loop_mod, "build_manifest", "build_snapshot", False)
wrap(RunnerSession, "open", "ssh_connect", True)
wrap(RunnerSession, "put_blobs", "sftp_upload", True)
wrap(RunnerSession, "submit_accepted", "submit", True)
wrap(RunnerSession, "__aexit__", "ssh_close", True)
wrap(controller_mod.Controller, "follow", "follow", True)
_print_log = render.LogPrinter.__call__


def print_log(self, *a):
    mark("log_output")
    _print_log(self, *a)


render.LogPrinter.__call__ = print_log  # the sink `app headless run` prints job output with
rc = headless.main(sys.argv[1:])
mark("main_returned")
with open(os.environ["BENCH_PROBE_OUT"], "w") as fh:
    json.dump(marks, fh)
from lanpool.app.cli.main import _exit_now  # the real ending of a headless verb (no teardown)
_exit_now(rc)
"""


# -- timing subprocesses ------------------------------------------------------------


@dataclass
class Timed:
    rc: int
    exit_s: float
    first_s: float | None = None  # first stdout line holding MARKER
    maxrss_kib: int = 0  # peak RSS of the process (and any child it waited for)
    cpu_s: float = 0.0  # user + system CPU of the process (and children it waited for)
    stdout: bytes = b""
    stderr_lines: list[tuple[float, bytes]] = field(default_factory=list)  # (seconds since spawn, line)

    def stderr_text(self) -> str:
        return b"".join(line for _, line in self.stderr_lines).decode(errors="replace")


def timed(
    argv: list[str],
    *,
    env: dict,
    cwd: Path | None = None,
    marker: bytes | None = None,
    keep_stdout: bool = False,
    stdout_devnull: bool = False,
    timeout: float = 300,
    t0_env: bool = False,
) -> Timed:
    """Run argv; time from spawn to the first stdout line holding `marker` and to exit (wait4: peak RSS)."""
    stderr_lines: list[tuple[float, bytes]] = []
    if t0_env:  # the probe measures its marks from here (CLOCK_MONOTONIC, like perf_counter on Linux)
        env = dict(env, BENCH_T0=repr(time.monotonic()))
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL if stdout_devnull else subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _RUNNING.add(proc)

    def read_stderr() -> None:
        for line in proc.stderr:
            stderr_lines.append((time.perf_counter() - t0, line))

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    killer = threading.Timer(timeout, lambda: _kill(proc))
    killer.start()
    first = None
    kept = []
    try:
        if proc.stdout is not None:
            for line in proc.stdout:
                if first is None and marker is not None and marker in line:
                    first = time.perf_counter() - t0
                if keep_stdout:
                    kept.append(line)
        _, status, usage = os.wait4(proc.pid, 0)
        exit_s = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        killer.cancel()
        _RUNNING.discard(proc)
    reader.join(5)
    return Timed(
        proc.returncode, exit_s, first, usage.ru_maxrss, usage.ru_utime + usage.ru_stime, b"".join(kept), stderr_lines
    )


_RUNNING: set[subprocess.Popen] = set()


def _kill(proc: subprocess.Popen) -> None:
    if proc.returncode is None:
        try:
            proc.kill()
        except ProcessLookupError:
            pass


def check(t: Timed, what: str) -> Timed:
    if t.rc != 0:
        raise BenchError(f"{what} exited {t.rc}:\n{t.stderr_text()[-2000:]}")
    return t


# -- the setup ----------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="lanpool-bench-"))
        self.home = self.tmp / "controller"
        self.agent_dir = self.tmp / "agent"
        self.project = self.tmp / "project"
        self.env = harness.lanpool_env(self.home)
        # Bytecode cached as in any install (pip compiles it; a checkout writes __pycache__), kept in
        # the temp dir: with PYTHONDONTWRITEBYTECODE set, every start would compile lanpool's
        # ~200 source files again (~25% of its CPU), while asyncssh's come compiled from pip.
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.env["PYTHONPYCACHEPREFIX"] = str(self.tmp / "pycache")
        # The flood's producer writes as Python does into a pipe by default (8 KiB at a time), in
        # both arms: with PYTHONUNBUFFERED inherited from the caller's shell, it made one write per
        # 100-byte line, and every figure of the flood depended on who ran the bench
        # (`--unbuffered` measures that case on purpose).
        if not args.unbuffered:
            self.env.pop("PYTHONUNBUFFERED", None)
        else:
            self.env["PYTHONUNBUFFERED"] = "1"
        self.agent: harness.AgentProc | None = None
        self.plain: harness.AgentProc | None = None
        self.bare: subprocess.Popen | None = None
        self.runner = ""
        self.last_echo: Timed | None = None  # a finished job, for `logs` in cold_start
        self.bare_port = 0
        self.key = ""
        self.results: dict = {
            "config": {
                "lines": args.lines,
                "repeat": args.repeat,
                "flood_repeat": args.flood_repeat,
                "producer_unbuffered": args.unbuffered,
                "python": PY,
                "cpus": os.cpu_count(),
            }
        }

    # -- start / stop --

    def start(self) -> None:
        pubkey = harness.controller_key(self.env, APP)
        self.key = pubkey.removesuffix(".pub")  # the bare client signs in with the same key
        harness.authorize_key(pubkey, self.agent_dir, self.env, APP)
        self.agent = harness.start_agent(
            self.agent_dir,
            self.home,
            authorize=False,
            env=self.env,
            app=APP,
            verbose=False,
            name="bench-runner",
            grace=3,
            new_session=True,
        )
        self.runner = self.agent.address
        # The same agent without the job sandbox: the isolation's cost to a job's start, in the same run.
        self.plain = harness.start_agent(
            self.tmp / "agent-plain",
            self.home,
            env=self.env,
            app=APP,
            verbose=False,
            name="bench-plain",
            grace=3,
            new_session=True,
            extra_args=["--job-sandbox", "off"],
        )

        (self.tmp / "bare_server.py").write_text(BARE_SERVER)
        (self.tmp / "bare_client.py").write_text(BARE_CLIENT)
        with open(self.tmp / "bare_server.log", "ab") as bare_log:
            self.bare = subprocess.Popen(
                [PY, str(self.tmp / "bare_server.py"), pubkey],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=bare_log,
                start_new_session=True,
            )
        line = self.bare.stdout.readline()
        if not line.strip().isdigit():
            raise BenchError(f"bare server did not start:\n{(self.tmp / 'bare_server.log').read_text()[-2000:]}")
        self.bare_port = int(line)

        # JSON strings are YAML strings: no quoting surprises in the flood command.
        harness.write_project(
            self.project,
            f"""\
            workflows:
              - name: echo
                commands: [{json.dumps(ECHO_CMD)}]
              - name: flood
                commands: [{json.dumps(flood_command(self.args.lines))}]
            """,
        )

    def stop(self) -> None:
        for proc in list(_RUNNING):
            _kill(proc)
        for agent in (self.agent, self.plain):
            if agent is not None:
                agent.stop(15)
        if self.bare is not None and self.bare.poll() is None:
            self.bare.kill()
            self.bare.wait()
        if self.args.keep:
            say(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- commands --

    def lanpool_run(self, workflow: str, runner: str = "", **kw) -> Timed:
        argv = [*APP, "headless", "run", workflow, "--runner", runner or self.runner]
        return timed(argv, env=self.env, cwd=self.project, **kw)

    def bare_run(self, mode: str, command: str, **kw) -> Timed:
        return timed(
            [PY, str(self.tmp / "bare_client.py"), str(self.bare_port), self.key, mode, command],
            env=self.env,
            cwd=self.tmp,
            **kw,
        )

    # -- 1. dispatch --

    def dispatch(self) -> None:
        k = self.args.repeat
        say(f"dispatch: warm-up, then {k} x (lanpool run echo, bare asyncssh exec) interleaved")
        self.last_echo = check(self.lanpool_run("echo", marker=MARKER), "lanpool warm-up run")  # pins the host key
        check(self.bare_run("cat", ECHO_CMD, marker=MARKER), "bare warm-up run")
        assert self.plain is not None
        check(self.lanpool_run("echo", self.plain.address, marker=MARKER), "unsandboxed warm-up run")
        lp: list[Timed] = []
        bare: list[Timed] = []
        plain: list[Timed] = []
        for _ in range(k):
            lp.append(check(self.lanpool_run("echo", marker=MARKER), "app headless run echo"))
            bare.append(check(self.bare_run("cat", ECHO_CMD, marker=MARKER), "bare client"))
            plain.append(check(self.lanpool_run("echo", self.plain.address, marker=MARKER), "unsandboxed run"))
        for t, what in [(x, "lanpool") for x in lp] + [(x, "bare") for x in bare] + [(x, "plain") for x in plain]:
            if t.first_s is None:
                raise BenchError(f"{what}: no stdout line with {MARKER!r}")

        def stats(ts: list[Timed]) -> dict:
            first = [t.first_s for t in ts]
            exit_ = [t.exit_s for t in ts]
            return {
                "first_line_s": {"median": med(first), "min": min(first), "all": first},
                "exit_s": {"median": med(exit_), "min": min(exit_), "all": exit_},
                "peak_rss_mib": {"median": med([t.maxrss_kib / 1024 for t in ts])},
                "cpu_s": {"median": med([t.cpu_s for t in ts])},  # steadier than wall time on a loaded machine
            }

        res = {"lanpool": stats(lp), "bare": stats(bare), "lanpool_unsandboxed": stats(plain)}
        res["isolation"] = self.agent.log_path.read_text().partition("process jobs: isolation ")[2].split("\n")[0]
        res["sandbox_first_line_ms_median"] = 1000 * (
            res["lanpool"]["first_line_s"]["median"] - res["lanpool_unsandboxed"]["first_line_s"]["median"]
        )
        res["ratio_first_line_median"] = (
            res["lanpool"]["first_line_s"]["median"] / res["bare"]["first_line_s"]["median"]
        )
        res["ratio_exit_median"] = res["lanpool"]["exit_s"]["median"] / res["bare"]["exit_s"]["median"]
        res["ratio_first_line_min"] = res["lanpool"]["first_line_s"]["min"] / res["bare"]["first_line_s"]["min"]
        res["ratio_exit_min"] = res["lanpool"]["exit_s"]["min"] / res["bare"]["exit_s"]["min"]
        res["target_ratio_max"] = DISPATCH_TARGET
        # lanpool's own phases, from the stderr line it prints once the job is submitted
        submitted = [_stderr_at(t, SUBMITTED) for t in lp]
        if all(s is not None for s in submitted):
            res["lanpool_phases_median_s"] = {
                "spawn_to_submitted": med(submitted),
                "submitted_to_first_line": med([t.first_s - s for t, s in zip(lp, submitted, strict=False)]),
                "first_line_to_exit": med([t.exit_s - t.first_s for t in lp]),
            }
        self.results["dispatch"] = res

    def phases(self) -> None:
        """`app headless run echo` in-process with marks around each step: where the time goes."""
        k = self.args.repeat
        say(f"dispatch phases: {k} x app headless run echo, instrumented in-process")
        (self.tmp / "probe.py").write_text(PROBE)
        out = self.tmp / "probe.json"
        env = dict(self.env, BENCH_PROBE_OUT=str(out))
        runs = []
        for _ in range(k):
            t = check(
                timed(
                    [PY, str(self.tmp / "probe.py"), "run", "echo", "--runner", self.runner],
                    env=env,
                    cwd=self.project,
                    marker=MARKER,
                    t0_env=True,
                ),
                "probe run",
            )
            marks = json.loads(out.read_text())
            marks.append(["process_exit", t.exit_s])
            runs.append(marks)
        phases: dict[str, list[float]] = {}
        for marks in runs:
            for name, seconds in _phases(marks).items():
                phases.setdefault(name, []).append(seconds)
        self.results["dispatch_phases_median_ms"] = {k: round(med(v) * 1000, 1) for k, v in phases.items()}

    def imports(self) -> None:
        """Python start-up + imports: what every `app` and every bare client pays before any network."""
        k = self.args.repeat
        say(
            f"imports: {k} x python -c (pass | import asyncssh | import lanpool.app.cli.headless, with/without teardown) interleaved"
        )
        # Each is spawn -> exit, so it holds interpreter teardown too; the os._exit variants leave that out.
        cases = {
            "python_bare_start": "pass",
            "import_asyncssh": "import asyncssh",
            "import_asyncssh_no_teardown": "import asyncssh, os; os._exit(0)",
            "import_app_cli_main": "import lanpool.app.cli.main",
            "import_app_cli_headless": "import lanpool.app.cli.headless",
            "import_app_cli_headless_no_teardown": "import lanpool.app.cli.headless, os; os._exit(0)",
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(k):
            for name, code in cases.items():
                times[name].append(check(timed([PY, "-c", code], env=self.env, cwd=self.tmp), name).exit_s)
        res = {name: {"median": med(v), "min": min(v)} for name, v in times.items()}
        # Where `import app.cli.headless` spends its time: self time summed per top-level package
        # (one run of -X importtime, which inflates times; shares are what matter).
        t = timed([PY, "-X", "importtime", "-c", "import lanpool.app.cli.headless"], env=self.env, cwd=self.tmp)
        top: dict[str, int] = {}
        for _, line in t.stderr_lines:
            m = re.match(rb"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
            if m:
                pkg = m.group(2).decode().split(".")[0]
                top[pkg] = top.get(pkg, 0) + int(m.group(1))
        res["importtime_self_ms_by_package"] = {
            k: round(v / 1000, 1) for k, v in sorted(top.items(), key=lambda kv: -kv[1])[:8]
        }
        self.results["imports"] = res

    def cold_start(self) -> None:
        """`status`, `logs` and `runners`, each a new process (spawn -> exit), beside `python -c pass`
        and the bare client's `import asyncssh`: the floor, and what an SSH client pays anyway.
        Then the same verbs on a home filled like a long-used one (scripts/bench_tui.py's filler)."""
        k = self.args.repeat
        if self.last_echo is None:  # dispatch skipped: one finished job for `logs`
            self.last_echo = check(self.lanpool_run("echo", marker=MARKER), "lanpool run echo")
        job = _job_id(self.last_echo)
        full_home = self.tmp / "full-controller"
        from bench_tui import fill_home  # the TUI bench's filler: the real schema, 10k runs

        say(f"cold start: filling a second home with {self.args.cold_runs:,} runs, {self.args.cold_lines:,} lines ...")
        filled = fill_home(full_home, self.args.cold_runs, self.args.cold_lines)
        full_env = dict(self.env, LANPOOL_HOME=str(full_home))
        say(f"cold start: {k} x (python -c pass, import asyncssh, app headless status | logs | runners) interleaved")
        cases: dict[str, tuple[list[str], dict]] = {
            "python -c pass": ([PY, "-c", "pass"], self.env),
            "python -c 'import asyncssh'": ([PY, "-c", "import asyncssh"], self.env),
            "app headless status": ([*APP, "headless", "status"], self.env),
            "app headless logs JOB": ([*APP, "headless", "logs", job], self.env),
            "app headless runners": ([*APP, "headless", "runners", "--wait", "0"], self.env),
            f"status, {filled['runs']:,} runs": ([*APP, "headless", "status"], full_env),
            f"logs newest run, {filled['runs']:,} runs": ([*APP, "headless", "logs", filled["newest_run"]], full_env),
            # its runners are switched off (nothing listens): checked without the SSH stack
            f"runners, {filled['runs']:,} runs": ([*APP, "headless", "runners", "--wait", "0"], full_env),
        }
        times: dict[str, list[Timed]] = {name: [] for name in cases}
        for _ in range(k):
            for name, (argv, env) in cases.items():
                times[name].append(check(timed(argv, env=env, cwd=self.tmp, keep_stdout=True), name))
        self.results["cold_start"] = {
            name: {"median_s": med([t.exit_s for t in ts]), "cpu_s_median": med([t.cpu_s for t in ts])}
            for name, ts in times.items()
        }
        self.results["cold_start_full_home"] = {k: v for k, v in filled.items() if k in ("runs", "jobs", "log_lines")}

    # -- 2. log throughput --

    def producer(self) -> None:
        n = self.args.lines
        env = dict(self.env, PATH=os.path.dirname(PY) + os.pathsep + self.env.get("PATH", ""))
        runs = [
            check(timed(["bash", "-c", flood_command(n)], env=env, cwd=self.tmp, stdout_devnull=True), "producer")
            for _ in range(2)
        ]
        best = min(t.exit_s for t in runs)
        self.results["producer"] = {"to_devnull_s": best, "lines_per_s": n / best}

    def throughput(self) -> None:
        n = self.args.lines
        r = self.args.flood_repeat
        from bench_store import store_alone_runs  # SQLite's part alone, no SSH (scripts/bench_store.py)

        say(f"throughput: the store alone, {r} x {n:,} lines")
        self.results["store_alone"] = store_alone_runs(n, r)
        say(f"throughput: {r} x (lanpool run flood, bare asyncssh stream) of {n:,} lines x {LINE_BYTES} B, interleaved")
        lp_runs = []
        bare_runs = []
        for i in range(r):
            say(f"  flood {i + 1}/{r}: lanpool ...")
            a0 = proc_cpu(self.agent.proc.pid)
            t = check(self.lanpool_run("flood", stdout_devnull=True, timeout=600), "app headless run flood")
            a1 = proc_cpu(self.agent.proc.pid)
            job = _job_id(t)
            t_verify = time.perf_counter()
            verdict = self.verify(job, n)
            verdict["verify_s"] = time.perf_counter() - t_verify
            submitted = _stderr_at(t, SUBMITTED)
            lp_runs.append(
                {
                    "job": job,
                    "wall_s": t.exit_s,
                    "lines_per_s": n / t.exit_s,
                    "submitted_s": submitted,
                    "lines_per_s_after_submit": n / (t.exit_s - submitted) if submitted else None,
                    "controller_peak_rss_mib": t.maxrss_kib / 1024,
                    "controller_cpu_s": t.cpu_s,
                    "agent_cpu_s": a1[0] - a0[0],
                    "job_cpu_s": a1[1] - a0[1],
                    **verdict,
                }
            )
            say(f"  flood {i + 1}/{r}: bare ...")
            s0 = proc_cpu(self.bare.pid)
            b = check(self.bare_run("count", flood_command(n), keep_stdout=True, timeout=600), "bare flood client")
            s1 = proc_cpu(self.bare.pid)
            got = int(b.stdout.strip() or 0)
            bare_runs.append(
                {
                    "wall_s": b.exit_s,
                    "lines": got,
                    "lines_per_s": n / b.exit_s,
                    "client_peak_rss_mib": b.maxrss_kib / 1024,
                    "client_cpu_s": b.cpu_s,
                    "server_cpu_s": s1[0] - s0[0],
                    "job_cpu_s": s1[1] - s0[1],
                }
            )
        res = {
            "lines": n,
            "lanpool": {
                **_flood_rates(n, lp_runs),
                "lost_max": max(x["lost"] for x in lp_runs),
                "duplicates_max": max(x["duplicates"] for x in lp_runs),
                "controller_peak_rss_mib_max": max(x["controller_peak_rss_mib"] for x in lp_runs),
                "runs": lp_runs,
            },
            "bare": {
                **_flood_rates(n, bare_runs),
                "lines_short_max": max(n - x["lines"] for x in bare_runs),
                "runs": bare_runs,
            },
            "target_lines_per_s_min": THROUGHPUT_TARGET,
        }
        res["ratio_lanpool_over_bare_lines_per_s"] = (
            res["lanpool"]["lines_per_s_median"] / res["bare"]["lines_per_s_median"]
        )
        self.results["throughput"] = res

    def verify(self, job: str, n: int) -> dict:
        """Every index 0..n-1 stored exactly once in log_chunks, chunks contiguous."""
        conn = sqlite3.connect(f"file:{self.home / 'lanpool.db'}?mode=ro", uri=True)
        try:
            seen = bytearray(n)
            stored = lost = dups = bad = other_stream = gaps = chunks = 0
            expect_seq = 0
            rows = conn.execute(
                "SELECT seq, n_lines, stream, data FROM log_chunks WHERE job_id = ? ORDER BY node, seq", (job,)
            )
            for seq, n_lines, stream, data in rows:
                chunks += 1
                if seq != expect_seq:
                    gaps += 1
                expect_seq = seq + n_lines
                if stream != "out":
                    other_stream += n_lines
                    continue
                lines = data.split(b"\n")
                if lines and lines[-1] == b"":
                    lines.pop()
                stored += len(lines)
                for line in lines:
                    head = line[:10]
                    if len(line) != LINE_BYTES - 1 or not head.isdigit():
                        bad += 1
                        continue
                    i = int(head)
                    if i >= n:
                        bad += 1
                    elif seen[i]:
                        dups += 1
                    else:
                        seen[i] = 1
            lost = n - sum(seen)
            db_mib = sum(p.stat().st_size for p in self.home.glob("lanpool.db*")) / 2**20
        finally:
            conn.close()
        return {
            "stored_lines": stored,
            "lost": lost,
            "duplicates": dups,
            "malformed": bad,
            "other_stream_lines": other_stream,
            "chunks": chunks,
            "seq_gaps": gaps,
            "db_mib_after": db_mib,
        }

    def agent_rss(self) -> None:
        try:
            status = Path(f"/proc/{self.agent.proc.pid}/status").read_text()
            hwm = re.search(r"VmHWM:\s+(\d+) kB", status)
            self.results["agent_peak_rss_mib"] = int(hwm.group(1)) / 1024 if hwm else None
        except OSError:
            self.results["agent_peak_rss_mib"] = None


# `app headless run` says "run NAME: job ID (WORKFLOW) on runner NAME" on stderr once the job is submitted.
SUBMITTED = re.compile(rb"^run \S+: job ([0-9a-f]+) \(")


def _phases(marks: list[list]) -> dict[str, float]:
    """Named durations (seconds) of one probe run, in order; `other` is what no mark covers."""
    at: dict[str, float] = {}
    for name, t in marks:
        n = 1
        while f"{name}#{n}" in at:
            n += 1
        at[f"{name}#{n}"] = t
    out = {"interpreter_start": at["interpreter_ready#1"], "imports": at["imports_done#1"] - at["interpreter_ready#1"]}
    labels = {
        "controller_init": "Controller() (sqlite open, migrate)",
        "load_project": "load workflows.yaml",
        "build_snapshot": "build snapshot",
        "load_key": "load key",
        "ssh_connect#1": "ssh connect (submit)",
        "sftp_upload": "blob upload",
        "submit": "submit request",
        "ssh_close#1": "ssh close (submit)",
        "ssh_connect#2": "ssh connect (follow)",
    }
    for key, label in labels.items():
        name, _, n = key.partition("#")
        n = n or "1"
        if f"{name}:start#{n}" in at:
            out[label] = at[f"{name}:end#{n}"] - at[f"{name}:start#{n}"]
    if "log_output#1" in at and "ssh_connect:end#2" in at:
        out["attach -> first log line"] = at["log_output#1"] - at["ssh_connect:end#2"]
        out["first log line -> job end, ssh close (follow)"] = at["follow:end#1"] - at["log_output#1"]
    out["interpreter teardown (main returned -> exit)"] = at["process_exit#1"] - at["main_returned#1"]
    out["other (argparse, asyncio, glue)"] = at["process_exit#1"] - sum(out.values())
    out["total (spawn -> exit)"] = at["process_exit#1"]
    return out


def _stderr_at(t: Timed, pattern: re.Pattern) -> float | None:
    for at, line in t.stderr_lines:
        if pattern.search(line):
            return at
    return None


def _job_id(t: Timed) -> str:
    for _, line in t.stderr_lines:
        m = SUBMITTED.search(line)
        if m:
            return m.group(1).decode()
    raise BenchError(f"cannot find the job id in:\n{t.stderr_text()[-2000:]}")


def _flood_rates(n: int, runs: list[dict]) -> dict:
    """Wall time and lines/s of `n`-line floods, alike for lanpool and the bare client."""
    walls = [x["wall_s"] for x in runs]
    return {
        "wall_s_median": med(walls),
        "wall_s_min": min(walls),
        "lines_per_s_median": n / med(walls),
        "lines_per_s_best": n / min(walls),
    }


# -- report -------------------------------------------------------------------------------------


def report(res: dict, out) -> None:
    def p(text: str = "") -> None:
        print(text, file=out)

    ms = lambda s: f"{s * 1000:7.1f} ms"  # noqa: E731
    cfg = res["config"]
    p(
        f"lanpool bench: {cfg['lines']:,} lines, {cfg['repeat']} repeats ({cfg['flood_repeat']} for throughput), "
        f"{cfg['cpus']} CPUs, {cfg['python']}"
    )
    d = res.get("dispatch")
    if d:
        p()
        p("1. dispatch of `echo hello-bench` (whole subprocess: spawn -> first line / exit)")
        p(f"   {'':28} {'first line':>22}   {'exit':>22}")
        p(f"   {'':28} {'median':>10} {'min':>11}   {'median':>10} {'min':>11}")
        rows = [("lanpool", "app headless run echo"), ("lanpool_unsandboxed", "  same, --job-sandbox off")]
        for name, label in [*rows, ("bare", "bare asyncssh exec")]:
            if name not in d:  # a record from before the sandbox
                continue
            x = d[name]
            p(
                f"   {label:28} {ms(x['first_line_s']['median'])} {ms(x['first_line_s']['min'])}   "
                f"{ms(x['exit_s']['median'])} {ms(x['exit_s']['min'])}   (peak RSS {x['peak_rss_mib']['median']:.0f} MiB, "
                f"CPU {ms(x['cpu_s']['median'])})"
            )
        verdict = "meets" if d["ratio_first_line_median"] <= DISPATCH_TARGET else "MISSES"
        p(
            f"   ratio lanpool/bare: first line {d['ratio_first_line_median']:.2f}x (min {d['ratio_first_line_min']:.2f}x), "
            f"exit {d['ratio_exit_median']:.2f}x (min {d['ratio_exit_min']:.2f}x); target first line <= {DISPATCH_TARGET}x: "
            f"{verdict}"
        )
        if "sandbox_first_line_ms_median" in d:
            p(
                f"   the job sandbox ({d['isolation'] or 'none'}) adds {d['sandbox_first_line_ms_median']:.0f} ms "
                "to the first line (median, against --job-sandbox off in the same run)"
            )
        ph = d.get("lanpool_phases_median_s")
        if ph:
            p(
                f"   lanpool phases (median): spawn->submitted {ms(ph['spawn_to_submitted'])}, "
                f"submitted->first line {ms(ph['submitted_to_first_line'])}, first line->exit {ms(ph['first_line_to_exit'])}"
            )
    phases = res.get("dispatch_phases_median_ms")
    if phases:
        p("   where `app headless run echo` spends its time (instrumented in-process, median ms):")
        items = list(phases.items())
        for i in range(0, len(items), 3):
            p("     " + ";  ".join(f"{k} {v:.1f}" for k, v in items[i : i + 3]))
    im = res.get("imports")
    if im:
        p("   python -c 'import X', spawn -> exit (median / min); no_teardown: ends with os._exit(0):")
        for name in (
            "python_bare_start",
            "import_app_cli_main",
            "import_asyncssh",
            "import_asyncssh_no_teardown",
            "import_app_cli_headless",
            "import_app_cli_headless_no_teardown",
        ):
            p(f"     {name:36} {ms(im[name]['median'])} {ms(im[name]['min'])}")
        p(
            "   import lanpool.app.cli.headless by package (-X importtime, self time summed): "
            + ", ".join(f"{k} {v:.0f} ms" for k, v in im["importtime_self_ms_by_package"].items())
        )
    cold = res.get("cold_start")
    if cold:
        p()
        p(f"   cold start, spawn -> exit (median; target for status, logs, runners <= {COLD_TARGET_S * 1000:.0f} ms):")
        for name, x in cold.items():
            p(f"     {name:36} {ms(x['median_s'])}   CPU {ms(x['cpu_s_median'])}")
    th = res.get("throughput")
    if th:
        n = th["lines"]
        p()
        p(f"2. log throughput: {n:,} lines x {LINE_BYTES} B ({n * LINE_BYTES / 2**20:.0f} MiB), spawn -> exit")
        pr = res.get("producer")
        if pr:
            p(
                f"   producer alone (python -c ... > /dev/null): {pr['to_devnull_s']:.2f} s = {pr['lines_per_s']:,.0f} lines/s"
            )
        st = res.get("store_alone")
        if st:
            p(
                f"   store alone (Store + LogBatch in process, no SSH): median {st['wall_s_median']:.2f} s = "
                f"{st['lines_per_s_median']:,.0f} lines/s, CPU {st['cpu_s_median']:.2f} s, lost {st['lost_max']}"
            )
        lp, bare = th["lanpool"], th["bare"]
        p(
            f"   lanpool run flood (stored in SQLite): median {lp['wall_s_median']:.2f} s = {lp['lines_per_s_median']:,.0f} lines/s "
            f"(best {lp['lines_per_s_best']:,.0f}); lost {lp['lost_max']}, duplicates {lp['duplicates_max']}"
        )
        for i, r in enumerate(lp["runs"], 1):
            after = f"{r['lines_per_s_after_submit']:,.0f}" if r["lines_per_s_after_submit"] else "?"
            p(
                f"     run {i}: {r['wall_s']:.2f} s, submitted at {r['submitted_s'] or float('nan'):.2f} s "
                f"({after} lines/s after submit), stored {r['stored_lines']:,} in {r['chunks']} chunks, lost {r['lost']}, "
                f"dup {r['duplicates']}, malformed {r['malformed']}, seq gaps {r['seq_gaps']}, "
                f"controller peak RSS {r['controller_peak_rss_mib']:.0f} MiB, db {r['db_mib_after']:.0f} MiB; "
                f"CPU s: controller {r['controller_cpu_s']:.2f}, agent {r['agent_cpu_s']:.2f}, job {r['job_cpu_s']:.2f}"
            )
        p(
            f"   bare asyncssh stream (count only):   median {bare['wall_s_median']:.2f} s = {bare['lines_per_s_median']:,.0f} lines/s "
            f"(best {bare['lines_per_s_best']:,.0f}); lines short {bare['lines_short_max']}, "
            f"client peak RSS {max(r['client_peak_rss_mib'] for r in bare['runs']):.0f} MiB"
        )
        for i, r in enumerate(bare["runs"], 1):
            p(
                f"     run {i}: {r['wall_s']:.2f} s, {r['lines']:,} lines; CPU s: client {r['client_cpu_s']:.2f}, "
                f"server {r['server_cpu_s']:.2f}, job {r['job_cpu_s']:.2f}"
            )
        ok = (
            lp["lines_per_s_median"] >= THROUGHPUT_TARGET
            and th["ratio_lanpool_over_bare_lines_per_s"] >= THROUGHPUT_RATIO_TARGET
            and lp["lost_max"] == lp["duplicates_max"] == 0
        )
        verdict = "meets" if ok else "MISSES"
        p(
            f"   ratio lanpool/bare lines/s: {th['ratio_lanpool_over_bare_lines_per_s']:.2f}; "
            f"target >= {THROUGHPUT_TARGET:,} lines/s, >= {THROUGHPUT_RATIO_TARGET}x, 0 lost, 0 dup: {verdict}"
        )
    if res.get("agent_peak_rss_mib") is not None:
        p(f"   agent peak RSS (VmHWM, whole bench): {res['agent_peak_rss_mib']:.0f} MiB")
    if "bench_wall_s" in res:
        p()
        p(f"bench took {res['bench_wall_s']:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--lines", type=int, default=1_000_000, help="lines the flood workflow prints (default 1000000)"
    )
    parser.add_argument("--repeat", type=int, default=5, help="repeats of each dispatch measurement (default 5)")
    parser.add_argument(
        "--flood-repeat", type=int, default=None, help="repeats of each throughput measurement (default: --repeat)"
    )
    parser.add_argument(
        "--json", action="store_true", help="also print one JSON object of all figures (stdout; table goes to stderr)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (paths printed)")
    parser.add_argument(
        "--skip", choices=["dispatch", "cold", "throughput"], action="append", default=[], help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--unbuffered",
        action="store_true",
        help="the flood's producer unbuffered (PYTHONUNBUFFERED=1: one write per line); default: Python's own buffering",
    )
    parser.add_argument("--cold-runs", type=int, default=10_000, help="runs in the filled home of the cold start")
    parser.add_argument("--cold-lines", type=int, default=200_000, help="log lines in that home")
    args = parser.parse_args(argv)
    if args.lines < 1 or args.repeat < 1:
        parser.error("--lines and --repeat must be >= 1")
    if args.flood_repeat is None:
        args.flood_repeat = args.repeat
    bench = Bench(args)

    def work() -> dict:
        bench.start()
        if "dispatch" not in args.skip:
            bench.dispatch()
            bench.phases()
            bench.imports()
        if "cold" not in args.skip:
            bench.cold_start()
        if "throughput" not in args.skip:
            bench.producer()
            bench.throughput()
        bench.agent_rss()
        return bench.results

    from bench_results import pick, picked, recording, row  # docs/bench/NAME.json -> docs/benchmarks.md

    work = recording(
        "bench",
        work,
        lambda r: [
            picked(
                r,
                "`run` of an echo workflow to its first line, vs bare asyncssh exec (median)",
                "dispatch.lanpool.first_line_s.median",
                "dispatch.bare.first_line_s.median",
                target="<= 1.2",
                unit="s",
            ),
            picked(r, "same, to exit", "dispatch.lanpool.exit_s.median", "dispatch.bare.exit_s.median", unit="s"),
            picked(
                r,
                "`run` of echo to its first line, process job sandboxed vs `--job-sandbox off` (median)",
                "dispatch.lanpool.first_line_s.median",
                "dispatch.lanpool_unsandboxed.first_line_s.median",
                unit="s",
            ),
            *(
                picked(v, f"cold start of `{k}`", "median_s", target="<= 0.2 s", unit="s")
                for k, v in (pick(r, "cold_start") or {}).items()
            ),
            picked(
                r,
                "log lines stored in SQLite vs a raw asyncssh channel (median)",
                "throughput.lanpool.lines_per_s_median",
                "throughput.bare.lines_per_s_median",
                target=">= 500000 lines/s",
                unit="lines/s",
            ),
            picked(
                r,
                "log lines stored by the store alone (Store + LogBatch in process, no SSH; median)",
                "store_alone.lines_per_s_median",
                unit="lines/s",
            ),
            row(
                "lines lost / duplicated (max)",
                None
                if pick(r, "throughput.lanpool") is None
                else f"{pick(r, 'throughput.lanpool.lost_max')} / {pick(r, 'throughput.lanpool.duplicates_max')}",
            ),
        ],
    )
    return run_bench("bench", work, bench.stop, report, args.json, errors=(harness.AgentStartError,))


if __name__ == "__main__":
    sys.exit(main())
