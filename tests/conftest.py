"""Shared fixtures: a real agent process on an ephemeral loopback port, a temp
controller home, and a helper to run the real `app` CLI against them. The plumbing
lives in tests/harness.py (shared with scripts/bench*) and tests/docker_harness.py."""

import os
import subprocess
from pathlib import Path

import pytest

from tests import harness
from tests.docker_harness import BUSYBOX_IMAGE, busybox_rootfs_tar, remove_agent_containers
from tests.harness import (
    APP_MODULE,
    REPO,
    SPAWNED,
    follow_until,
    fork_server,
    lanpool_env,
    start_agent,
    start_docker_agent,
    write_project,
)

# `cli` and agents forked from a process that has the CLI imported (tests/cli_forkserver.py):
# the same code, without an interpreter start and its imports per process.
harness.FORKS_WANTED = os.environ.get("LANPOOL_TESTS_PLAIN_CLI") != "1"

# A test's tier is its directory (tests/README.md): `-m unit` (or the path) selects one.
TIERS = ("unit", "integration", "system")


# The files that take longest (the sum of their tests' `--durations` in CI), started first: xdist
# hands out whole files (groups, in the system tier) in collection order when told not to reorder
# them (scripts/test: --no-loadscope-reorder), so no worker ends alone on one long file while the
# others idle. Its own default puts the files with most tests first, which are not the longest.
LONGEST_FIRST = (
    "integration/test_multinode",  # ~210 s
    "integration/test_daily_use",
    "integration/test_runner_gang",
    "integration/test_job_python_env",
    "integration/test_mdns_hints",
    "integration/test_pool",
    "integration/test_gang_retry",
    "integration/test_tui",  # ~90 s
    "system/test_slurm_recovery",  # the Slurm files are one group (tests/system/conftest.py): ~260 s
    "system/test_slurm_executor",
    "system/test_slurm_controller",
    "system/test_docker_executor",  # ~60 s
    "system/test_runner_gang_restart",  # with test_runner_gang, one group
    "system/test_runner_secrets",
    "system/test_training_autoencoder",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = item.path.parent.name
        if tier in TIERS:
            item.add_marker(tier)

    def order(item: pytest.Item) -> tuple[str, int]:
        name = f"{item.path.parent.name}/{item.path.stem}"
        # Tiers keep their order (their directories' names sort as they are collected).
        return item.path.parent.name, LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=order)  # stable: a file's tests keep their order


_FIRST_AGENT = pytest.StashKey[int]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    item.stash[_FIRST_AGENT] = len(SPAWNED)  # agents started from here on are this test's
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test's report ends with the log tails of the agents it started or that still run
    (a module's): a failure seen only in CI then says what the runner did."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    first = item.stash.get(_FIRST_AGENT, len(SPAWNED))
    for k, agent in enumerate(SPAWNED):
        if k >= first or agent.proc.poll() is None:
            report.sections.append((f"agent {agent.name} log ({agent.log_path})", agent.log_tail(6000)))


@pytest.fixture
def controller_home(tmp_path: Path, monkeypatch) -> Path:
    home = tmp_path / "controller"
    monkeypatch.setenv("LANPOOL_HOME", str(home))
    monkeypatch.setenv("LANPOOL_MDNS_INTERFACES", "127.0.0.1")
    # `artifacts download` without -o: a temp dir, never the user's downloads dir.
    monkeypatch.setenv("LANPOOL_DOWNLOADS", str(tmp_path / "downloads"))
    return home


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    """A fake $HOME with a .bashrc that no runner may touch (tests/hostile_runner.py: BASHRC)."""
    from tests.hostile_runner import BASHRC

    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_bytes(BASHRC)
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def ctl(controller_home: Path, home: Path):
    """A Controller whose user's $HOME is `home`."""
    from lanpool.app.controller import Controller

    c = Controller()
    yield c
    c.close()


@pytest.fixture
def agent(tmp_path: Path, controller_home: Path):
    a = start_agent(tmp_path / "agent", controller_home)
    yield a
    a.stop()


@pytest.fixture
def shell_agent(tmp_path: Path, controller_home: Path):
    """The runner, with a HOME of its own: a job's interactive shell reads $HOME/.bashrc, and this
    machine's own (pyenv's rehash, waiting on a lock a killed shell left) must not decide the test."""
    home = tmp_path / "runner-home"
    home.mkdir()
    (home / ".bashrc").write_text("PS1='job$ '\n")
    a = start_agent(tmp_path / "agent", controller_home, extra_env={"HOME": str(home)})
    yield a
    a.stop()


@pytest.fixture
def two_agents(tmp_path: Path, controller_home: Path, cli):
    """Two runners, node-0 and node-1, added to the controller (multi-node tests)."""
    agents = [start_agent(tmp_path / f"n{i}", controller_home, name=f"node-{i}") for i in range(2)]
    for a in agents:
        cli("headless", "runners", "add", a.address, check=True)
    yield agents
    for a in agents:
        a.stop()


@pytest.fixture
def make_project(tmp_path: Path):
    """Write a project with the given workflows.yaml text; returns its dir."""

    def make(workflows_yaml: str, name: str = "project", files: dict[str, str] | None = None) -> Path:
        return write_project(tmp_path / name, workflows_yaml, files)

    return make


@pytest.fixture
def cli(controller_home: Path):
    """Run the real `app` CLI; returns the CompletedProcess (text mode)."""

    def run(
        *args: str, cwd: Path | None = None, timeout: float = 120, check: bool = False
    ) -> subprocess.CompletedProcess:
        forks = fork_server()
        if forks is not None:
            result = forks.run(list(args), str(cwd) if cwd else None, lanpool_env(controller_home), timeout)
        else:
            result = subprocess.run(
                [*APP_MODULE, *args],
                cwd=cwd,
                env=lanpool_env(controller_home),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        if check and result.returncode != 0:
            raise AssertionError(f"app {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result

    run.popen = lambda *args, cwd=None, **kw: subprocess.Popen(  # type: ignore[attr-defined]
        [*APP_MODULE, *args], cwd=cwd, env=lanpool_env(controller_home), **kw
    )
    # `logs -f REF` until a line holds TEXT: one process, not a poll of new ones (tests/harness.py).
    run.follow_until = lambda ref, text, timeout=60: follow_until(  # type: ignore[attr-defined]
        ref, text, lanpool_env(controller_home), timeout
    )
    return run


# -- Docker: a real engine, images made locally (tests/test_docker_*.py) -------------------


@pytest.fixture(scope="session")
def docker_client():
    """A client of a real Docker engine: DOCKER_HOST's, or one started by scripts/dockerd when root.

    Skips (with the reason) only where no engine answers and none can be started.
    """
    import docker

    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=5)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means: no engine here
        reason = " ".join(str(exc).split())[:200]
    else:
        yield client
        client.close()
        return
    if os.geteuid() != 0:
        pytest.skip(
            f"no Docker engine answers at {host} ({reason}), and starting one needs root: "
            "run scripts/test as root, or `scripts/dockerd start` and export DOCKER_HOST"
        )
    started = subprocess.run(
        [str(REPO / "scripts" / "dockerd"), "start"],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    if started.returncode != 0:
        pytest.fail(f"scripts/dockerd start failed: {started.stderr.strip()}")
    new_host = started.stdout.strip().rpartition("DOCKER_HOST=")[2]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DOCKER_HOST", new_host)  # agents started by tests inherit it
        client = docker.from_env(timeout=30)
        try:
            yield client
        finally:
            client.close()
            subprocess.run([str(REPO / "scripts" / "dockerd"), "stop"], capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def busybox_image(docker_client) -> str:
    """A tiny image made here (no registry is reachable): `docker import` of busybox_rootfs_tar()."""
    import docker.errors

    try:
        docker_client.images.get(BUSYBOX_IMAGE)
        return BUSYBOX_IMAGE
    except docker.errors.ImageNotFound:
        pass
    repo, _, tag = BUSYBOX_IMAGE.partition(":")
    docker_client.api.import_image_from_data(busybox_rootfs_tar(), repository=repo, tag=tag)
    return BUSYBOX_IMAGE


@pytest.fixture
def docker_agent(tmp_path: Path, controller_home: Path, docker_client, busybox_image):
    """An agent that runs every job in a container (--executor docker); its containers are removed after."""
    a = start_docker_agent(tmp_path / "agent", controller_home, "--executor", "docker")
    yield a
    a.stop()
    remove_agent_containers(docker_client, a.data_dir)
