"""Each process job in its own Python environment: layered on the runner's base
interpreter, requirements installed into a cached layer with pip's output in the job's log,
`version:` matched to an interpreter of the runner or refused at submit, and the agent's
own environment never written by a job. Offline: the packages are wheels made here.
The part with real agents and the CLI (integration); the rest: tests/unit/test_job_python_env.py."""

import asyncio
import base64
import hashlib
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from lanpool.agent.executors import ExecutorError
from lanpool.agent.python.interpreters import Pythons
from lanpool.agent.python.job_envs import JobPythons

AGENT_PYTHON = sys.executable  # tests/harness.py starts the agent with this interpreter


@pytest.fixture
def agent(tmp_path: Path, controller_home: Path):
    """Process jobs only: these jobs name a python:X-slim image, which a runner with a Docker
    engine (scripts/test starts one) would try to pull, and no registry is reachable here: it sees no engine."""
    from tests.harness import start_agent

    a = start_agent(
        tmp_path / "agent", controller_home, extra_env={"DOCKER_HOST": "unix:///nonexistent/lanpool-test-docker.sock"}
    )
    yield a
    a.stop()


def make_wheel(
    dest: Path,
    name: str,
    body: str = "VALUE = 42\n",
    version: str = "1.0",
    requires: tuple[str, ...] = (),
    pad: int = 0,
) -> Path:
    """A pure-python wheel of module `name` (pip installs it offline, without building anything);
    `pad` bytes in a file of it give it a size (stored: the wheel is that much bigger)."""
    dist = name.replace("_", "-")
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    files: dict[str, str | bytes] = {
        f"{name}/__init__.py": body,
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    if pad:
        files[f"{name}/_pad.bin"] = bytes(pad)
    record = []
    for path, text in files.items():
        data = text.encode() if isinstance(text, str) else text
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


HOLD = """
workflows:
  - name: vision
    provider: python
    script: which.py
    requirements: requirements.txt
  - name: vision-free
    provider: python
    script: which.py
    requirements: requirements.txt
    hold_base: false
  - name: pins-too
    commands:
      - pip install --no-index --find-links ./wheels lanpool_vision
      - python which.py
"""


def test_requirements_that_would_replace_the_base_torch_are_held_to_it(agent, cli, make_project):
    """An unpinned package (as `torchvision`) whose newest release wants a newer torch than the
    base's: pip picks the release that fits the base's torch (held by PIP_CONSTRAINT), unless the
    workflow says `hold_base: false`. The wheels are made here: the fake torch one patch above the
    base's stands for the 5 GB download (and stays within constraints this machine's pip has)."""
    project = make_project(
        HOLD,
        files={
            "requirements.txt": "--no-index\n--find-links ./wheels\nlanpool_vision\n",
            "which.py": "import importlib.metadata as m\n"
            "print('vision', m.version('lanpool_vision'), 'torch', m.version('torch'))\n",
        },
    )
    base_torch, release, newer = _base_torch()
    make_wheel(project / "wheels", "lanpool_vision", version="1.0", requires=("torch",))
    make_wheel(project / "wheels", "lanpool_vision", version="9.0", requires=(f"torch>{release}",))
    make_wheel(project / "wheels", "torch", version=newer)
    held = cli("headless", "run", "vision", "--runner", agent.address, cwd=project, timeout=180)
    assert held.returncode == 0, held.stdout[-3000:] + held.stderr[-2000:]
    assert f"vision 1.0 torch {base_torch}" in held.stdout, held.stdout[-3000:]
    said = held.stdout + held.stderr  # lanpool's own lines go to stderr
    assert f"torch=={base_torch}" in said and "held at the base's versions (`hold_base: false`" in said, said[-3000:]
    pins = cli("headless", "run", "pins-too", "--runner", agent.address, cwd=project, timeout=180)
    assert pins.returncode == 0 and f"vision 1.0 torch {base_torch}" in pins.stdout, pins.stdout[-3000:]
    free = cli("headless", "run", "vision-free", "--runner", agent.address, cwd=project, timeout=180)
    assert free.returncode == 0, free.stdout[-3000:] + free.stderr[-2000:]
    assert f"vision 9.0 torch {newer}" in free.stdout, free.stdout[-3000:]
    assert f"would install torch {newer} (" in free.stderr, free.stderr[-3000:]  # said before the download
    assert "would install" not in said  # held: nothing to say


def _base_torch() -> tuple[str, str, str]:
    """The base's torch version, its release, and one patch above it (the fake second torch)."""
    base_torch = subprocess.run(
        [AGENT_PYTHON, "-c", "import importlib.metadata as m; print(m.version('torch'))"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    release = base_torch.split("+")[0].split(".")
    return base_torch, ".".join(release), ".".join([*release[:2], str(int(release[2]) + 1)])


def _vision_workspace(tmp_path: Path, torch_pad: int = 0) -> tuple[Path, Path]:
    """A job's workspace whose requirements name `lanpool_vision`, unpinned: its 9.0 wants a
    torch newer than the base's (a fake torch wheel of `torch_pad` bytes more is there), its
    1.0 takes any torch. The workspace and the fake torch wheel."""
    _, release, newer = _base_torch()
    workspace = tmp_path / "workspace"
    make_wheel(workspace / "wheels", "lanpool_vision", version="1.0", requires=("torch",))
    make_wheel(workspace / "wheels", "lanpool_vision", version="9.0", requires=(f"torch>{release}",))
    torch_wheel = make_wheel(workspace / "wheels", "torch", version=newer, pad=torch_pad)
    (workspace / "requirements.txt").write_text("--no-index\n--find-links ./wheels\nlanpool_vision\n")
    return workspace, torch_wheel


def _prepare(pythons: JobPythons, job_dir: Path, workspace: Path, hold_base: bool) -> list[str]:
    """The job's log lines of building its env."""
    lines: list[str] = []
    asyncio.run(
        pythons.prepare(
            job_dir / "pyenv",
            workspace,
            workspace,
            "",
            "requirements.txt",
            lambda s, d, c=False: lines.append(d.decode()),
            hold_base=hold_base,
        )
    )
    return lines


def _index(lines: list[str], text: str) -> int:
    found = [i for i, line in enumerate(lines) if text in line]
    assert found, (text, "".join(lines)[-3000:])
    return found[0]


def test_a_second_torch_is_said_with_its_size_before_pip_downloads_it(tmp_path: Path, monkeypatch):
    """`hold_base: false` and a requirement that pulls a torch of another version: one line says
    so, with the download's size, before pip installs; held to the base, nothing to say; a
    cached layer asks pip nothing (no dry run)."""
    from lanpool.agent.python import pip_report

    base_torch, _, newer = _base_torch()
    workspace, torch_wheel = _vision_workspace(tmp_path, torch_pad=3_000_000)
    size = f"{torch_wheel.stat().st_size / 1e6:.1f} MB"  # stored, not compressed: 3.0 MB
    dry_runs: list[list[str]] = []
    real_dry_run = pip_report.dry_run

    async def counted(argv: list[str], *args: object) -> bytes:
        dry_runs.append(argv)
        return await real_dry_run(argv, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(pip_report, "dry_run", counted)
    pythons = JobPythons(Pythons.discover(), tmp_path / "cache")

    free = _prepare(pythons, tmp_path / "free", workspace, hold_base=False)
    said = f"would install torch {newer} ({size}) beside the base's torch {base_torch} (`hold_base: false`"
    assert _index(free, said) < _index(free, "Successfully installed")
    assert sum("would install" in line for line in free) == 1
    assert f"pin lanpool-vision to a release for torch {base_torch} to keep the base's" in free[_index(free, said)]
    assert len(dry_runs) == 1 and "--dry-run" in dry_runs[0]

    held = _prepare(pythons, tmp_path / "held", workspace, hold_base=True)
    assert _index(held, "held at the base's versions") < _index(held, "Successfully installed lanpool_vision-1.0")
    assert not any("would install" in line for line in held), "".join(held)
    assert len(dry_runs) == 2  # it was asked, and had nothing to say

    again = _prepare(pythons, tmp_path / "again", workspace, hold_base=False)
    assert any("nothing to install" in line for line in again)
    assert len(dry_runs) == 2 and not any("would install" in line for line in again)  # reused: no dry run


HOSTILE_REPORTS = {
    "not JSON": b'{"install": [',
    "not a report": b'["install"]',
    "nested": b"[" * 100_000,
    "a wheel that is not there": b'{"install": [{"metadata": {"name": "torch", "version": "NEWER"}, '
    b'"download_info": {"url": "file:///nonexistent/lanpool/torch.whl"}}, '
    b'{"metadata": {"name": "torch\\u001b[31m", "version": "1"}, "download_info": {"url": "file:///etc/shadow"}}, '
    b'{"metadata": {"name": "jax", "version": "1\\n2"}}, {"metadata": 7}, 7]}',
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_REPORTS))
def test_a_hostile_report_is_no_trouble_for_the_install(tmp_path: Path, monkeypatch, kind):
    """What pip's dry run printed comes from indexes (and maybe a build backend): a report that
    is not one, or names a file that is not there, never stops the install nor prints odd text."""
    from lanpool.agent.python import pip_report

    _, _, newer = _base_torch()
    workspace, _ = _vision_workspace(tmp_path)

    async def hostile(*args: object) -> bytes:
        return HOSTILE_REPORTS[kind].replace(b"NEWER", newer.encode())

    monkeypatch.setattr(pip_report, "dry_run", hostile)
    lines = _prepare(JobPythons(Pythons.discover(), tmp_path / "cache"), tmp_path / "job", workspace, False)
    assert any("Successfully installed" in line for line in lines), lines
    said = [line for line in lines if "would install" in line]
    if kind == "a wheel that is not there":  # the one sane entry is said, its size unknown
        assert len(said) == 1 and f"would install torch {newer} (size unknown) beside" in said[0], said
        assert "\x1b" not in said[0] and "jax" not in said[0]
    else:
        assert said == []
    assert not any("Traceback" in line for line in lines)


def _freeze() -> str:
    return subprocess.run(
        [AGENT_PYTHON, "-m", "pip", "freeze", "--all"], capture_output=True, text=True, check=True
    ).stdout


PY_WORKFLOWS = """
workflows:
  - name: demo
    provider: python
    script: main.py
    requirements: requirements.txt
    args: [--n, "${{ n }}"]
"""


MAIN_PY = """
import sys, lanpool_demo, msgpack
print("demo value", lanpool_demo.VALUE, "n", sys.argv[2])
print("prefix", sys.prefix)
print("demo from", lanpool_demo.__file__)
"""


def _ready_seconds(out: str) -> float:
    found = re.findall(r"env pyenv ready in ([0-9.]+)s", out)
    assert found, out
    return float(found[-1])


def test_requirements_install_into_a_cached_layer_with_output_in_the_log(agent, cli, make_project):
    project = make_project(
        PY_WORKFLOWS,
        files={
            "main.py": MAIN_PY,
            "requirements.txt": "--no-index\n./wheels/lanpool_demo-1.0-py3-none-any.whl\n",
            ".lanpool/variables.yaml": "variables:\n  demo:\n    n: 1\n",
        },
    )
    make_wheel(project / "wheels", "lanpool_demo")
    before = _freeze()

    first = cli("headless", "run", "demo", "--runner", agent.address, cwd=project)
    assert first.returncode == 0, first.stdout + first.stderr
    out = first.stdout + first.stderr  # the agent's own ("sys") lines go to stderr
    assert "requirements requirements.txt: installing into python" in out
    assert "Successfully installed lanpool-demo-1.0" in out  # pip's own output, in the job's log
    assert "demo value 42 n 1" in out  # the layer and the base (msgpack) both seen
    assert re.search(r"prefix .*/jobs/[^/]+/pyenv$", out, re.M)
    assert "/pyenvs/" in out  # the package lives in the cached layer, not in the job's env

    second = cli("headless", "run", "demo", "--runner", agent.address, "--no-cache", cwd=project)
    assert second.returncode == 0, second.stdout + second.stderr
    out = second.stdout + second.stderr
    assert "nothing to install" in out
    assert "Successfully installed" not in out and "installing into" not in out
    assert "demo value 42" in out
    print("env ready: first", _ready_seconds(first.stdout + first.stderr), "s, cached", _ready_seconds(out), "s")
    assert _ready_seconds(out) < 2.0  # a venv and a .pth: no install
    assert _freeze() == before  # neither run wrote the agent's environment


def test_a_jobs_pip_install_goes_to_its_own_env_never_the_agents(agent, cli, make_project, tmp_path):
    project = make_project(
        """
workflows:
  - name: installs
    commands:
      - pip install --no-index ./wheels/lanpool_probe-1.0-py3-none-any.whl
      - python -c "import lanpool_probe, sys; print('probe at', lanpool_probe.__file__)"
      - python -m pip install --no-index ./wheels/lanpool_probe2-1.0-py3-none-any.whl
      - python -c "import msgpack; print('base seen')"
      - echo "venv $VIRTUAL_ENV"
  - name: later
    commands:
      - python -c "import lanpool_probe" || echo "probe not installed here"
"""
    )
    make_wheel(project / "wheels", "lanpool_probe")
    make_wheel(project / "wheels", "lanpool_probe2")
    before = _freeze()
    done = cli("headless", "run", "installs", "--runner", agent.address, cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"probe at .*/jobs/[^/]+/pyenv/lib/python3[^/]*/site-packages/lanpool_probe", done.stdout)
    assert "base seen" in done.stdout
    assert _freeze() == before  # pip freeze of the agent's interpreter unchanged
    probe = subprocess.run([AGENT_PYTHON, "-c", "import lanpool_probe"], capture_output=True)
    assert probe.returncode != 0  # and the agent cannot import what the job installed
    # Another job does not see it either: each job has its own env.
    later = cli("headless", "run", "later", "--runner", agent.address, cwd=project)
    assert "probe not installed here" in later.stdout, later.stdout + later.stderr


def test_the_base_console_scripts_run_with_the_jobs_python(agent, cli, make_project):
    """`torchrun` (a console script of the runner's base interpreter) starts a trainer that sees
    what the job installed: the job env's shim runs the script with the env's python."""
    project = make_project(
        """
workflows:
  - name: launch
    commands:
      - pip install --no-index ./wheels/lanpool_probe-1.0-py3-none-any.whl
      - head -1 "$(command -v torchrun)"
      - torchrun --standalone --nproc_per_node=1 check.py
""",
        files={"check.py": "import lanpool_probe, sys\nprint('trainer sees probe', lanpool_probe.VALUE, sys.prefix)\n"},
    )
    make_wheel(project / "wheels", "lanpool_probe")
    done = cli("headless", "run", "launch", "--runner", agent.address, cwd=project, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert re.search(r"trainer sees probe 42 .*/jobs/[^/]+/pyenv", done.stdout), done.stdout[-3000:]
    assert "#!/bin/sh" in done.stdout  # the shim found first on PATH, not the base's script


def test_a_version_the_runner_lacks_is_refused_at_submit_with_what_it_has(agent, cli, make_project):
    project = make_project(
        "workflows:\n  - name: old\n    provider: python\n    version: '2.5'\n    script: main.py\n",
        files={"main.py": "print('never')\n"},
    )
    done = cli("headless", "run", "old", "--runner", agent.address, cwd=project)
    assert done.returncode != 0
    assert "never" not in done.stdout
    # Placement knows the runner's interpreters (its Hello): refused before anything is sent
    [line] = done.stderr.strip().splitlines()
    assert "no runner can run it: " in line and "not 2.5" in line, line
    assert f"has Python {sys.version_info.major}.{sys.version_info.minor}" in line, line
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("form", ["provider python", "commands"])
def test_a_version_the_runner_has_runs_with_that_interpreter(agent, cli, make_project, form):
    others = [i for i in Pythons.discover().all[1:] if i.version in ("3.10", "3.12", "3.13", "3.9")]
    if not others:
        pytest.skip("no second python 3.x interpreter on this machine")
    version = others[0].version
    body = (
        "provider: python\n    version: '{v}'\n    script: main.py"
        if form == "provider python"
        else (
            "python: {v}\n    commands: [python main.py]"  # dstack 2022's key, on a commands workflow: honoured too
        )
    )
    project = make_project(
        "workflows:\n  - name: v\n    " + body.format(v=version) + "\n",
        files={"main.py": "import sys; print('running %d.%d' % sys.version_info[:2])\n"},
    )
    done = cli("headless", "run", "v", "--runner", agent.address, cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"running {version}" in done.stdout


def test_runner_reports_its_interpreters_base_first(agent):
    from tests.system.test_docker_executor import _hello

    reported = asyncio.run(_hello(agent)).resources["python"]
    assert isinstance(reported, str)
    assert reported.split(",")[0] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert reported.split(",") == [i.version for i in Pythons.discover().all]


def test_requirements_outside_the_workspace_are_refused(tmp_path: Path):
    workspace = tmp_path / "job" / "workspace"
    workspace.mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("nothing\n")
    lines: list[bytes] = []
    pythons = JobPythons(Pythons.discover(), tmp_path / "cache")
    with pytest.raises(ExecutorError, match="no such file in the job's workspace"):
        asyncio.run(
            pythons.prepare(
                tmp_path / "job" / "pyenv",
                workspace,
                workspace,
                "",
                "../../secret.txt",
                lambda s, d, c=False: lines.append(d),
            )
        )
    assert not (tmp_path / "cache").exists()


def test_a_failed_install_fails_the_start_and_is_not_cached(tmp_path: Path):
    workspace = tmp_path / "job" / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "requirements.txt").write_text("--no-index\nno-such-package-lanpool==9\n")
    lines: list[bytes] = []
    pythons = JobPythons(Pythons.discover(), tmp_path / "cache")
    with pytest.raises(ExecutorError, match=r"pip install -r requirements.txt failed"):
        asyncio.run(
            pythons.prepare(
                tmp_path / "job" / "pyenv",
                workspace,
                workspace,
                "",
                "requirements.txt",
                lambda s, d, c=False: lines.append(d),
            )
        )
    assert any(b"no-such-package-lanpool" in line for line in lines)  # pip's reason is in the log
    assert list((tmp_path / "cache").iterdir()) == []  # nothing half-built is kept for the next job


def test_a_stop_during_the_install_kills_pip_and_keeps_nothing(tmp_path: Path):
    """Cancelling the start (what a stop does) kills pip's whole process group; no half layer is kept."""
    workspace = tmp_path / "job" / "workspace"
    slow = workspace / "slowpkg"
    slow.mkdir(parents=True)
    # An in-tree build backend that needs nothing installed (so pip stays offline) and hangs.
    (slow / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "slow_backend"\nbackend-path = ["."]\n'
    )
    (slow / "slow_backend.py").write_text(
        "import os, time\n"
        f"def get_requires_for_build_wheel(config_settings=None):\n"
        f"    open({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(120)\n    return []\n"
    )
    (workspace / "requirements.txt").write_text("--no-index\n./slowpkg\n")
    pythons = JobPythons(Pythons.discover(), tmp_path / "cache")

    async def scenario() -> None:
        task = asyncio.create_task(
            pythons.prepare(
                tmp_path / "job" / "pyenv", workspace, workspace, "", "requirements.txt", lambda s, d, c=False: None
            )
        )
        for _ in range(600):
            if (tmp_path / "pid").exists():
                break
            await asyncio.sleep(0.05)
        assert (tmp_path / "pid").exists(), "pip never reached the build backend"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    pid = int((tmp_path / "pid").read_text())
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists()  # the build backend, a grandchild of pip, is gone
    assert not any((d / ".lanpool-ready").exists() for d in (tmp_path / "cache").iterdir())


def test_a_version_is_not_checked_for_container_jobs():
    from lanpool.agent.executors import ExecutorChoice, ProcessExecutor

    class Docker:
        name, in_container = "docker", True

    choice = ExecutorChoice("auto", ProcessExecutor(), Docker())  # type: ignore[arg-type]
    assert choice.choose("python:2.5-slim", "", "2.5")[0].name == "docker"  # the image has it
    with pytest.raises(ExecutorError, match="python 2.5 is not on this runner"):
        choice.choose("", "", "2.5")


def test_job_python_chooses_the_base(tmp_path: Path, controller_home: Path, cli, make_project):
    from tests.harness import start_agent

    others = [i for i in Pythons.discover().all[1:] if i.version != Pythons.discover().base.version]
    if not others:
        pytest.skip("no second python 3.x interpreter on this machine")
    base = others[-1]
    bad = subprocess.run(
        [
            AGENT_PYTHON,
            "-m",
            "lanpool.app.cli.main",
            "agent",
            "serve",
            "--no-mdns",
            "--port",
            "0",
            "--host",
            "127.0.0.1",
        ]
        + ["--data-dir", str(tmp_path / "bad"), "--job-python", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1 and bad.stderr.strip().count("\n") == 0
    assert "--job-python" in bad.stderr and "Traceback" not in bad.stderr
    agent = start_agent(
        tmp_path / "agent",
        controller_home,
        extra_args=["--job-python", base.path],
        extra_env={"DOCKER_HOST": "unix:///nonexistent/lanpool-test-docker.sock"},
    )
    try:
        project = make_project("workflows:\n  - name: v\n    commands:\n      - python -V\n")
        done = cli("headless", "run", "v", "--runner", agent.address, cwd=project)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"Python {base.version}." in done.stdout
    finally:
        agent.stop()
