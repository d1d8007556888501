"""Real agents and controller homes on loopback, for the tests and the benchmarks alike.

tests/conftest.py wraps these in pytest fixtures; scripts/bench*.py and
scripts/screenshots.py import them with the repository root on sys.path. So
this module imports nothing of pytest's, and every helper takes the `app`
command line to run: the tests run `python -m lanpool.app.cli.main`, the benchmarks
the venv's `app` entry point when there is one (what a user runs).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lanpool.agent.home import AgentHome
from lanpool.agent.ssh.keys import add_authorized_key
from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key

REPO = Path(__file__).resolve().parents[1]
APP_MODULE = (sys.executable, "-m", "lanpool.app.cli.main")
# mDNS only on loopback: nothing these helpers start announces or browses on the machine's real interfaces.
LOOPBACK = "127.0.0.1"


# The `app` processes of the tests (their `cli` and agents) forked from one that has imported the
# CLI (tests/cli_forkserver.py): tests/conftest.py turns it on, unless LANPOOL_TESTS_PLAIN_CLI=1.
# The benchmarks leave it off: they measure what a user's `app` costs, start-up included.
FORKS_WANTED = False
_fork_server = None


def fork_server():
    """The worker's fork server, started on first use; None when not wanted."""
    global _fork_server
    if not FORKS_WANTED:
        return None
    if _fork_server is None:
        import atexit
        import tempfile

        from tests.cli_forkserver import CliForkServer

        directory = Path(tempfile.mkdtemp(prefix="lp-cli-"))  # a socket's path must stay short
        server = CliForkServer(directory, lanpool_env(None), str(REPO / "lanpool" / "app" / "cli" / "main.py"))

        def close() -> None:
            server.close()
            shutil.rmtree(directory, ignore_errors=True)

        atexit.register(close)
        _fork_server = server
    return _fork_server


def venv_python() -> str:
    """The repository's venv interpreter (scripts/setup makes it), else this one."""
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def venv_app() -> tuple[str, ...]:
    """The installed `app` entry point, else `python -m lanpool.app.cli.main` with venv_python()."""
    entry = REPO / ".venv" / "bin" / "app"
    return (str(entry),) if entry.exists() else (venv_python(), "-m", "lanpool.app.cli.main")


def lanpool_env(home: Path | None, **extra: str) -> dict[str, str]:
    """This process's environment for an `app` subprocess: controller home `home` (None: unset),
    mDNS on loopback only, and this checkout's code first on the path.

    PYTHONPATH is this checkout even where an editable install of another checkout
    (a git worktree beside the main one) would otherwise be imported.
    """
    env = dict(os.environ, PYTHONPATH=str(REPO), LANPOOL_MDNS_INTERFACES=LOOPBACK)
    env.pop("LANPOOL_AGENT_HOME", None)
    env.pop("LANPOOL_HOME", None)
    if home is not None:
        env["LANPOOL_HOME"] = str(home)
    env.update(extra)
    return env


# The controller key made and the agent's authorized_keys written in this process: an
# `app headless key` process per agent cost 0.34 s, and an `app agent authorize` 0.27 s more
# (median), ~210 agents a run. Each home gets its own key (tests tell controllers apart by
# it). Another `app` (an installed wheel) is still asked by its CLI, and the CLI's `authorize`
# keeps its own tests (tests/system/test_wheel.py, test_mdns_hints.py).


def stored_jobs(controller_home: Path) -> list[dict]:
    """The controller's jobs rows as its store holds them now, newest first: read in this process
    (SQLite, read-only), where polling `status --json` started a new `app` every 0.3 s."""
    import sqlite3

    path = controller_home / "lanpool.db"
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute("SELECT * FROM jobs ORDER BY submitted_at DESC")]
    except sqlite3.OperationalError:  # not made yet (a controller still migrating it)
        return []
    finally:
        db.close()


def wait_stored_job(controller_home: Path, ok, what: str, timeout: float = 60) -> dict:
    """The first stored job for which `ok(row)` holds, waiting up to `timeout` s (bounds of seconds:
    a loaded machine is slow); fails saying `what` was awaited and what the store held."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = stored_jobs(controller_home)
        for row in jobs:
            if ok(row):
                return row
        if time.monotonic() > deadline:
            held = [(j["workflow"], j["status"], j["error"]) for j in jobs]
            raise AssertionError(f"{what}: not within {timeout:g} s; the store holds {held}")
        time.sleep(0.2)


def follow_until(ref: str, text: str, env: dict[str, str], timeout: float = 60, app: Sequence[str] = APP_MODULE) -> str:
    """`app headless logs -f REF` until a line holds `text`, then stopped; returns what it printed.
    One process, where polling `logs` started a new one every 0.2-0.5 s (~0.3 s of CPU each)."""
    proc = subprocess.Popen(
        [*app, "headless", "logs", "-f", ref],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: list[str] = []
    found = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if text in line:
                found.set()
                return
        found.set()  # the log ended (the job did) without it

    threading.Thread(target=read, daemon=True).start()
    try:
        found.wait(timeout)
    finally:
        proc.kill()
        proc.wait()
    out = "".join(seen)
    if text not in out:
        raise AssertionError(f"{text!r} never appeared in the log of {ref} within {timeout:g} s:\n{out[-4000:]}")
    return out


def controller_key(env: dict[str, str], app: Sequence[str] = APP_MODULE) -> str:
    """The controller's public key file (made on first use), as `agent authorize` takes it."""
    home = env.get("LANPOOL_HOME")
    if tuple(app) != tuple(APP_MODULE) or not home:
        return subprocess.run(
            [*app, "headless", "key"], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
    key = ControllerHome(Path(home)).key
    load_or_create_client_key(key)  # what `app headless key` does
    return str(key) + ".pub"


def authorize_key(key: str, data_dir: Path, env: dict[str, str], app: Sequence[str] = APP_MODULE) -> None:
    """As `app agent authorize KEY`: the agent in `data_dir` will accept that controller."""
    if tuple(app) != tuple(APP_MODULE):
        subprocess.run(
            [*app, "agent", "authorize", key, "--data-dir", str(data_dir)], env=env, capture_output=True, check=True
        )
        return
    home = AgentHome(data_dir.expanduser().resolve())
    home.create()
    add_authorized_key(home.authorized_keys, Path(key).read_text())


class AgentStartError(RuntimeError):
    """An agent exited, or did not listen in time; the message holds its log's end."""


@dataclass
class AgentProc:
    proc: subprocess.Popen
    data_dir: Path
    host: str
    port: int  # 0 until listening() or wait_listening() read it
    log_path: Path
    name: str = "agent"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def listening(self) -> bool:
        """Whether this very process wrote agent.json (it does once it listens); reads the port."""
        try:
            data = json.loads((self.data_dir / "agent.json").read_text())
        except (OSError, ValueError):  # not yet written
            return False
        if data.get("pid") != self.proc.pid:  # a previous agent's file
            return False
        self.port = int(data["port"])
        return True

    def wait_listening(self, timeout: float = 30, poll: float = 0.05) -> "AgentProc":
        # 30 s: the Docker SDK and engine checks can take a while on a busy machine.
        deadline = time.monotonic() + timeout
        while not self.listening():
            exited = self.proc.poll() is not None
            if exited or time.monotonic() > deadline:
                how = f"exited {self.proc.returncode}" if exited else f"not listening after {timeout:g} s"
                self.proc.kill()
                self.proc.wait()
                raise AgentStartError(f"agent {self.name} did not start ({how}):\n{self.log_tail()}")
            time.sleep(poll)
        return self

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM (the agent stops its jobs and unregisters from mDNS), SIGKILL after `timeout`."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# Every agent this process started, in order: a failing test's report ends with the logs of those it
# started or that still run (tests/conftest.py), so a failure seen only in CI says what the runner did.
SPAWNED: list[AgentProc] = []


def default_runner_name(base: str = "test-runner") -> str:
    """An agent's name when a test gives none: `base`, with the xdist worker's id where workers
    share the machine's loopback (the system tier: tests/system/conftest.py). Two workers'
    agents both called `test-runner` would be a name conflict on loopback mDNS; a worker in a
    network namespace of its own (tests/netns_python) hears only its own agents."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return f"{base}-{worker}" if worker and not os.environ.get("LANPOOL_TESTS_OWN_NETNS") else base


def spawn_agent(
    data_dir: Path,
    env: dict[str, str],
    *,
    name: str | None = None,
    host: str = LOOPBACK,
    port: int = 0,
    grace: float = 3.0,
    extra_args: Sequence[str] = (),
    verbose: bool = True,
    app: Sequence[str] = APP_MODULE,
    log_path: Path | None = None,
    new_session: bool = False,
) -> AgentProc:
    """Start `app agent serve` on `host` (port 0: any) without waiting; output goes to
    `log_path` (default: DATA_DIR.log beside `data_dir`). `new_session`: a Ctrl-C in the
    terminal reaches only the caller, which then stops the agent itself."""
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "agent.json").unlink(missing_ok=True)  # listening() must not read a previous agent's
    log_path = log_path or data_dir.parent / f"{data_dir.name}.log"
    name = name or default_runner_name()
    argv = [
        *app,
        "agent",
        "serve",
        "--host",
        host,
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--name",
        name,
        "--grace",
        f"{grace:g}",
        *(["-v"] if verbose else []),
        *extra_args,
    ]
    forks = fork_server() if tuple(app) == tuple(APP_MODULE) else None
    with open(log_path, "ab") as log:
        if forks is not None:
            with open(os.devnull, "rb") as devnull:
                proc = forks.spawn(
                    argv[len(app) :], None, env, (devnull.fileno(), log.fileno(), log.fileno()), new_session
                )
        else:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=new_session,
            )
    agent = AgentProc(proc, data_dir, host, 0, log_path, name)
    SPAWNED.append(agent)
    return agent


def start_agent(
    data_dir: Path,
    controller_home: Path | None,
    *,
    authorize: bool = True,
    grace: float = 3.0,
    name: str | None = None,
    port: int = 0,
    extra_args: Sequence[str] = (),
    extra_env: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    app: Sequence[str] = APP_MODULE,
    verbose: bool = True,
    new_session: bool = False,
    timeout: float = 30,
) -> AgentProc:
    """Start `app agent serve` on 127.0.0.1 and wait until it listens. `authorize`: it accepts
    the key of the controller at `controller_home` (made if need be). `env` replaces
    lanpool_env(controller_home); `extra_env` is added to either."""
    env = {**(env if env is not None else lanpool_env(controller_home)), **(extra_env or {})}
    if authorize:
        authorize_key(controller_key(env, app), data_dir, env, app)
    agent = spawn_agent(
        data_dir,
        env,
        name=name,
        port=port,
        grace=grace,
        extra_args=extra_args,
        verbose=verbose,
        app=app,
        new_session=new_session,
    )
    return agent.wait_listening(timeout)


def start_docker_agent(
    data_dir: Path,
    controller_home: Path,
    *extra_args: str,
    env: dict | None = None,
    grace: float = 2.0,
    name: str | None = None,
) -> AgentProc:
    """start_agent with extra `app agent serve` arguments (--executor ...) and env."""
    name = name or default_runner_name("docker-runner")
    return start_agent(data_dir, controller_home, grace=grace, name=name, extra_args=extra_args, extra_env=env)


def write_project(root: Path, workflows_yaml: str, files: dict[str, str] | None = None) -> Path:
    """A project dir: .lanpool/workflows.yaml (dedented) and `files` (relative path: text)."""
    (root / ".lanpool").mkdir(parents=True, exist_ok=True)
    (root / ".lanpool" / "workflows.yaml").write_text(textwrap.dedent(workflows_yaml))
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def training_project(tmp_path: Path, workflows_yaml: str) -> Path:
    """A project dir holding a copy of the bundled training/ recipes and this workflows.yaml."""
    project = tmp_path / "repo"
    shutil.copytree(REPO / "training", project / "training", ignore=shutil.ignore_patterns("__pycache__"))
    return write_project(project, workflows_yaml)


def runners_seen(cli, wait: float = 0) -> dict[str, dict]:
    """`headless runners --json --wait WAIT`, by runner name (`cli`: conftest's fixture)."""
    out = cli("headless", "runners", "--json", "--wait", str(wait), check=True).stdout
    return {r["name"]: r for r in json.loads(out)}


def wait_discovered(cli, name: str, timeout: float = 15) -> dict:
    """Runner `name`'s row once `headless runners` lists it (found over mDNS on loopback)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = runners_seen(cli, wait=2)
        if name in found:
            return found[name]
    raise AssertionError(f"{name} was never discovered")
