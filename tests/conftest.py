"""Shared fixtures: a real agent process on an ephemeral loopback port, a temp
controller home, and a helper to run the real `app` CLI against them."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@dataclass
class AgentProc:
    proc: subprocess.Popen
    data_dir: Path
    host: str
    port: int
    log_path: Path

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _env(home: Path) -> dict:
    env = dict(os.environ)
    env["LANPOOL_HOME"] = str(home)
    env["PYTHONPATH"] = str(REPO)
    # mDNS only on loopback in tests: never the machine's real interfaces.
    env["LANPOOL_MDNS_INTERFACES"] = "127.0.0.1"
    env.pop("LANPOOL_AGENT_HOME", None)
    return env


@pytest.fixture
def controller_home(tmp_path: Path, monkeypatch) -> Path:
    home = tmp_path / "controller"
    monkeypatch.setenv("LANPOOL_HOME", str(home))
    monkeypatch.setenv("LANPOOL_MDNS_INTERFACES", "127.0.0.1")
    return home


def start_agent(data_dir: Path, controller_home: Path, *, authorize: bool = True, grace: float = 3.0,
                name: str = "test-runner", port: int = 0, extra_args: tuple[str, ...] = (),
                extra_env: dict[str, str] | None = None) -> AgentProc:
    """Start `app agent serve` on 127.0.0.1 (port 0: any) and wait until it listens."""
    env = {**_env(controller_home), **(extra_env or {})}
    if authorize:
        key = subprocess.run([sys.executable, "-m", "app.cli.main", "headless", "key"], env=env,
                             capture_output=True, text=True, check=True).stdout.strip()
        subprocess.run([sys.executable, "-m", "app.cli.main", "agent", "authorize", key, "--data-dir", str(data_dir)],
                       env=env, capture_output=True, check=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir.parent / f"{data_dir.name}.log"
    info = data_dir / "agent.json"
    info.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", "agent", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--data-dir", str(data_dir), "--name", name, "--grace", str(grace), "-v", *extra_args],
        env=env, stdout=open(log_path, "ab"), stderr=subprocess.STDOUT,
    )
    deadline = time.time() + 30  # the Docker SDK and engine checks can take a while on a busy machine
    while time.time() < deadline:
        if info.exists():
            data = json.loads(info.read_text())
            if data.get("pid") == proc.pid:
                return AgentProc(proc, data_dir, "127.0.0.1", data["port"], log_path)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"agent did not start: {log_path.read_text()}")


@pytest.fixture
def agent(tmp_path: Path, controller_home: Path):
    a = start_agent(tmp_path / "agent", controller_home)
    yield a
    a.stop()


@pytest.fixture
def make_project(tmp_path: Path):
    """Write a project with the given workflows.yaml text; returns its dir."""

    def make(workflows_yaml: str, name: str = "project", files: dict[str, str] | None = None) -> Path:
        root = tmp_path / name
        (root / ".lanpool").mkdir(parents=True, exist_ok=True)
        (root / ".lanpool" / "workflows.yaml").write_text(textwrap.dedent(workflows_yaml))
        for rel, text in (files or {}).items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        return root

    return make


@pytest.fixture
def cli(controller_home: Path):
    """Run the real `app` CLI; returns the CompletedProcess (text mode)."""

    def run(*args: str, cwd: Path | None = None, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess:
        result = subprocess.run([sys.executable, "-m", "app.cli.main", *args], cwd=cwd, env=_env(controller_home),
                                capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"app {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result

    run.popen = lambda *args, cwd=None, **kw: subprocess.Popen(  # type: ignore[attr-defined]
        [sys.executable, "-m", "app.cli.main", *args], cwd=cwd, env=_env(controller_home), **kw)
    return run


# -- Docker: a real engine, images made locally (tests/test_docker_*.py) -------------------

BUSYBOX_IMAGE = "lanpool-test/busybox:1"


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
        pytest.skip(f"no Docker engine answers at {host} ({reason}), and starting one needs root: "
                    "run scripts/test as root, or `scripts/dockerd start` and export DOCKER_HOST")
    started = subprocess.run([str(REPO / "scripts" / "dockerd"), "start"], capture_output=True, text=True,
                             timeout=600, stdin=subprocess.DEVNULL)
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


def _static_busybox() -> Path | None:
    for candidate in ("/bin/busybox", "/usr/bin/busybox"):
        path = Path(candidate)
        if path.is_file():
            with open(path, "rb") as fh:
                head = fh.read(8192)
            if b"ld-linux" not in head:  # no program interpreter: static, runs in an empty image
                return path
    return None


def busybox_rootfs_tar(extra: dict[str, bytes] | None = None) -> bytes:
    """A root filesystem (tar) with Debian's static busybox as /bin/sh and every other applet,
    plus the `extra` files (path in the image: content)."""
    import io
    import tarfile

    busybox = _static_busybox()
    if busybox is None:
        pytest.fail("test images need a static busybox: apt-get install busybox-static (scripts/dockerd start does)")
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)

        def add_file(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        for name in ("bin", "etc", "proc", "sys", "dev", "workspace"):
            add_dir(name)
        add_dir("tmp", 0o1777)
        add_file("bin/busybox", busybox.read_bytes(), 0o755)
        for applet in applets:
            if applet != "busybox":
                info = tarfile.TarInfo(f"bin/{applet}")
                info.type, info.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(info)
        add_file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
        add_file("etc/group", b"root:x:0:\nnogroup:x:65534:\n")
        for name, data in (extra or {}).items():
            add_file(name, data)
    return buf.getvalue()


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


def start_docker_agent(data_dir: Path, controller_home: Path, *extra_args: str, env: dict | None = None,
                       grace: float = 2.0, name: str = "docker-runner") -> AgentProc:
    """start_agent with extra `app agent serve` arguments (--executor ...) and env."""
    return start_agent(data_dir, controller_home, grace=grace, name=name, extra_args=extra_args, extra_env=env)


@pytest.fixture
def docker_agent(tmp_path: Path, controller_home: Path, docker_client, busybox_image):
    """An agent that runs every job in a container (--executor docker); its containers are removed after."""
    a = start_docker_agent(tmp_path / "agent", controller_home, "--executor", "docker")
    yield a
    a.stop()
    remove_agent_containers(docker_client, a.data_dir)


def remove_agent_containers(client, data_dir: Path) -> None:
    import docker.errors

    for container in client.containers.list(all=True, filters={"label": f"lanpool.agent={data_dir.resolve()}"},
                                            ignore_removed=True):
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass  # its agent removed it meanwhile
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: its agent is removing it now
                raise
