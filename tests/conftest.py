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
    env.pop("LANPOOL_AGENT_HOME", None)
    return env


@pytest.fixture
def controller_home(tmp_path: Path, monkeypatch) -> Path:
    home = tmp_path / "controller"
    monkeypatch.setenv("LANPOOL_HOME", str(home))
    return home


def start_agent(data_dir: Path, controller_home: Path, *, authorize: bool = True, grace: float = 3.0,
                name: str = "test-runner") -> AgentProc:
    """Start `app agent serve` on 127.0.0.1:0 and wait until it listens."""
    env = _env(controller_home)
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
        [sys.executable, "-m", "app.cli.main", "agent", "serve", "--host", "127.0.0.1", "--port", "0",
         "--data-dir", str(data_dir), "--name", name, "--grace", str(grace), "-v"],
        env=env, stdout=open(log_path, "ab"), stderr=subprocess.STDOUT,
    )
    deadline = time.time() + 20
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
