"""What job code can reach on a runner, attacked from inside real jobs, real agent.

Sandboxed (bubblewrap, the default where it runs): a process job sees the system read-only,
its own workspace, home and /tmp, its own /proc, and nothing of the agent's data dir: no
blob cache to poison, no keys, no other job's workspace or environment; as root the agent
runs it as an unprivileged user. Unsandboxed (`--job-sandbox off`), its workspace's
`../../../blobs` is the runner's blob cache, and what it writes there is still never staged
into a later job (each file is hashed as it is staged)."""

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from lanpool.agent.executors.sandbox import SandboxError, probe
from tests.harness import APP_MODULE, lanpool_env, start_agent
from tests.integration.test_job_shell import _exec
from tests.system.test_docker_executor import _stop, submit, wait_for_line

pytestmark = pytest.mark.timeout(240)


def _sandbox_missing(tmp: Path) -> str:
    """Why bubblewrap cannot run here ("" when it can): the sandbox tests skip with it."""
    try:
        sandbox, line = probe("auto", [tmp], [], None)
    except SandboxError as exc:
        return str(exc)
    return "" if sandbox is not None else line


@pytest.fixture
def sandboxed(tmp_path, agent):
    missing = _sandbox_missing(tmp_path / "probe")
    if missing:
        pytest.skip(f"no job sandbox on this machine: {missing}")
    _says(agent, "process jobs: isolation bwrap")
    return agent


def _says(agent, text: str) -> None:
    """The agent printed `text` (its start lines come just after it listens)."""
    deadline = time.monotonic() + 30
    while text not in agent.log_path.read_text():
        assert time.monotonic() < deadline, agent.log_path.read_text()
        time.sleep(0.1)


# Rewrites the cached blob of hello.sh at the same size: staging once checked only sizes.
POISON = """\
import hashlib
data = open("hello.sh", "rb").read()
blob = "../../../blobs/" + hashlib.sha256(data).hexdigest()
open(blob, "wb").write(b"echo POISONED".ljust(len(data) - 1, b"!") + b"\\n")
print("rewrote", blob[-64:][:12])
"""
WORKFLOWS = """
workflows:
  - name: show
    commands: [sh hello.sh]
  - name: poison
    commands: [python3 poison.py]
"""

# Everything a hostile job tries from inside: what it could reach, as JSON on one line.
REACH = r"""
import glob, json, os, socket
def can(f):
    try:
        f()
        return True
    except OSError:
        return False
def write(p):
    with open(p, "w") as fh:
        fh.write("x")
def read(p):
    with open(p, "rb") as fh:
        fh.read(1)
def docker():
    s = socket.socket(socket.AF_UNIX)
    s.connect("/var/run/docker.sock")
leaked = []
for env in glob.glob("/proc/[0-9]*/environ"):
    try:
        leaked += [env] if b"the-other-" + b"jobs-secret" in open(env, "rb").read() else []
    except OSError:
        pass
data = os.path.realpath("../../..")
print("REACH " + json.dumps({
    "uid": os.getuid(),
    "workspace": can(lambda: write("mine.txt")),
    "tmp": can(lambda: write("/tmp/mine.txt")),
    "home": can(lambda: write(os.path.join(os.environ["HOME"], "mine.txt"))),
    "blobs": os.path.exists("../../../blobs"),
    "host_key": can(lambda: read("../../../host_key")),
    "authorized_keys": can(lambda: read("../../../authorized_keys")),
    "jobs": sorted(os.listdir("../..")),
    "job_json": can(lambda: write("../job.json")),
    "system": can(lambda: write("/etc/lanpool-was-here")),
    "leaked": leaked,
    "pids": len(glob.glob("/proc/[0-9]*")),
    "docker": os.path.exists("/var/run/docker.sock") and can(docker),
    "env": sorted(os.environ),
}))
"""


def test_a_sandboxed_job_reaches_only_its_own_files(sandboxed):
    agent = sandboxed
    submit(agent, "other", ["echo ready", "sleep 60"], "", env={"OTHER": "the-other-jobs-secret"})
    wait_for_line(agent, "other", "ready")
    submit(agent, "probe", ['python3 -c "$REACH"', "echo done"], "", env={"REACH": REACH})
    wait_for_line(agent, "probe", "done", timeout=60)
    log = (agent.data_dir / "jobs" / "probe" / "log.spool").read_bytes()
    reach = json.loads(log.split(b"REACH ", 1)[1].split(b"\n", 1)[0])
    asyncio.run(_stop(agent, "other", abort=True, grace_s=0))
    assert (reach["workspace"], reach["tmp"], reach["home"]) == (True, True, True)
    assert reach["blobs"] is False and reach["host_key"] is False and reach["authorized_keys"] is False
    assert reach["jobs"] == ["probe"]  # the other job's directory is not there at all
    assert reach["job_json"] is False and reach["system"] is False
    assert reach["leaked"] == [] and reach["pids"] < 10  # its own /proc: a handful of its own processes
    assert reach["docker"] is False
    if os.geteuid() == 0:
        assert reach["uid"] != 0  # as root the agent runs jobs as --job-user (nobody)
    # A clean environment: nothing of the agent's own beyond the documented names.
    assert "LANPOOL_HOME" not in reach["env"] and "PYTHONPATH" not in reach["env"]
    assert {"PATH", "HOME", "LANPOOL_JOB_ID", "VIRTUAL_ENV"} <= set(reach["env"])


def test_exec_enters_the_jobs_sandbox(sandboxed):
    agent = sandboxed
    submit(agent, "sleeper", ["echo ready", "sleep 60"], "")
    wait_for_line(agent, "sleeper", "ready")
    done = asyncio.run(_exec(agent, "sleeper", ["sh", "-c", "id -u; pwd; ls /proc | grep -c '^[0-9]'; ls ../.."]))
    asyncio.run(_stop(agent, "sleeper", abort=True, grace_s=0))
    assert (done.exit_status, done.stderr) == (0, "")
    uid, cwd, pids, jobs = done.stdout.split("\n")[:4]
    assert cwd.endswith("jobs/sleeper/workspace") and jobs == "sleeper"
    assert int(pids) < 10  # the job's processes, not the runner's
    if os.geteuid() == 0:
        assert uid != "0"


def test_the_job_sandbox_lets_no_write_reach_the_blob_cache(sandboxed, cli, make_project):
    project = make_project(WORKFLOWS, files={"hello.sh": "echo the-original-bytes\n", "poison.py": POISON})
    assert "the-original-bytes" in cli("headless", "run", "show", "--runner", sandboxed.address, cwd=project).stdout
    poison = cli("headless", "run", "poison", "--runner", sandboxed.address, cwd=project)
    assert poison.returncode != 0 and "No such file or directory" in poison.stdout + poison.stderr
    again = cli("headless", "run", "show", "--runner", sandboxed.address, cwd=project, check=True)
    assert "the-original-bytes" in again.stdout and "damaged here" not in again.stderr


def test_unsandboxed_a_job_that_rewrites_the_blob_cache_poisons_no_later_job(
    tmp_path, controller_home, cli, make_project
):
    agent = start_agent(tmp_path / "agent", controller_home, extra_args=["--job-sandbox", "off"])
    try:
        _says(agent, "process jobs: isolation none (--job-sandbox off)")
        project = make_project(WORKFLOWS, files={"hello.sh": "echo the-original-bytes\n", "poison.py": POISON})
        first = cli("headless", "run", "show", "--runner", agent.address, cwd=project, check=True)
        assert "the-original-bytes" in first.stdout
        poison = cli("headless", "run", "poison", "--runner", agent.address, cwd=project, check=True)
        assert "rewrote" in poison.stdout  # the cache was writable to it: the attack happened
        again = cli("headless", "run", "show", "--runner", agent.address, cwd=project)
        assert again.returncode == 0, again.stderr
        assert "the-original-bytes" in again.stdout and "POISONED" not in again.stdout
        assert "damaged here, removed: sending it again" in again.stderr, again.stderr
    finally:
        agent.stop()


def _path_without_bwrap(tmp_path: Path) -> str:
    """A PATH with what an agent runs, but no bwrap: a machine without bubblewrap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "setpriv", "nsenter"):
        found = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        if found:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_without_bubblewrap_the_agent_says_so_and_bwrap_mode_refuses_to_start(tmp_path, controller_home):
    path = _path_without_bwrap(tmp_path)
    agent = start_agent(tmp_path / "auto", controller_home, extra_env={"PATH": path})
    try:
        _says(agent, "process jobs: isolation none (bwrap is not installed")
    finally:
        agent.stop()
    refused = subprocess.run(
        [*APP_MODULE, "agent", "serve", "--port", "0", "--host", "127.0.0.1", "--no-mdns"]
        + ["--data-dir", str(tmp_path / "strict"), "--job-sandbox", "bwrap"],
        env={**lanpool_env(controller_home), "PATH": path},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines()[-1].endswith("bwrap is not installed (apt-get install bubblewrap)")
    assert "Traceback" not in refused.stderr


def test_job_user_is_checked_in_one_line(tmp_path, controller_home):
    refused = subprocess.run(
        [*APP_MODULE, "agent", "serve", "--port", "0", "--host", "127.0.0.1", "--no-mdns"]
        + ["--data-dir", str(tmp_path / "a"), "--job-sandbox", "bwrap", "--job-user", "no-such-user-here"],
        env=lanpool_env(controller_home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "--job-user no-such-user-here" in refused.stderr.strip().splitlines()[-1]


def test_a_requirements_build_runs_sandboxed_too(sandboxed, cli, make_project):
    """`pip install -r` runs the job's build code (setup.py, a build backend): in the sandbox,
    writing only the layer being built. This backend tries the agent's authorized_keys."""
    keys = sandboxed.data_dir / "authorized_keys"
    before = keys.read_bytes()
    backend = (
        "def get_requires_for_build_wheel(config_settings=None):\n"
        "    try:\n"
        f"        open({str(keys)!r}, 'a').write('ssh-ed25519 AAAA attacker\\n')\n"
        "        raise SystemExit('REACHED the agent keys')\n"
        "    except OSError as exc:\n"
        "        raise SystemExit(f'BLOCKED {exc.strerror}')\n"
    )
    project = make_project(
        "workflows:\n  - name: evil\n    provider: python\n    script: main.py\n    requirements: requirements.txt\n"
        "    executor: process\n",  # the python provider names an image: where Docker runs, a container
        files={
            "main.py": "print('never')\n",
            "requirements.txt": "--no-index\n./evilpkg\n",
            "evilpkg/pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "evil"\nbackend-path = ["."]\n',
            "evilpkg/evil.py": backend,
        },
    )
    done = cli("headless", "run", "evil", "--runner", sandboxed.address, cwd=project)
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "BLOCKED" in out and "REACHED" not in out, out
    assert keys.read_bytes() == before
