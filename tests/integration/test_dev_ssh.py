"""A running job as an OpenSSH host (`app headless ssh-config`, its ProxyCommand app/shell/ssh_hop.py, the
runner's dev sshd: agent/shell/dev_sshd.py): the real `ssh`, `scp`, `sftp` and `rsync` against a
real agent, then the doors that must stay shut: a forward to a port the job did not declare or to
the agent's own, `-R`, another controller's key, a wrong pinned host key, the agent's data dir.
The part with real agents and the CLI (integration); the rest: tests/unit/test_dev_sshd.py,
tests/unit/test_ssh_config.py."""

import asyncio
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import asyncssh
import pytest

from lanpool.agent.shell.dev_sshd import dev_permit_open
from lanpool.app.home import ControllerHome
from lanpool.app.shell.ssh_config import HOP, HostEntry, write_ssh_config
from lanpool.app.shell.ssh_hop import connect
from lanpool.protocol.wire import exec_command
from tests.harness import authorize_key, controller_key, lanpool_env
from tests.integration.test_job_shell import _connect, _free_port

pytestmark = pytest.mark.skipif(
    shutil.which("sshd", path="/usr/sbin:/usr/local/sbin:/sbin") is None
    or shutil.which("ssh") is None
    or shutil.which("scp") is None,
    reason="needs OpenSSH's sshd, ssh and scp (apt-get install openssh-server openssh-client; scripts/test does)",
)

WORKFLOWS = """
workflows:
  - name: dev
    ports: [PORT]
    commands:
      - python -m http.server PORT --bind 127.0.0.1 >/dev/null 2>&1 &
      - python -m http.server OTHER --bind 127.0.0.1 >/dev/null 2>&1 &
      - echo ready
      - sleep 300
"""


class Dev:
    """A running job with a declared port (an http.server there) and one it did not declare, and
    the ssh_config `ssh-config` wrote for it."""

    def __init__(self, agent, cli, make_project, tmp_path: Path) -> None:
        self.agent, self.cli, self.tmp = agent, cli, tmp_path
        self.port, self.other = _free_port(), _free_port()
        workflows = WORKFLOWS.replace("OTHER", str(self.other)).replace("PORT", str(self.port))
        project = make_project(workflows)
        res = cli("headless", "run", "dev", "--runner", agent.address, "-d", "--json", cwd=project, check=True)
        out = json.loads(res.stdout.strip().splitlines()[-1])
        self.run, self.job = out["run"], out["jobs"][0]["job_id"]
        cli.follow_until(self.run, "ready")
        self.home = ControllerHome.default().root
        made = cli("headless", "ssh-config", "--no-control-master", check=True)
        assert f"Host lanpool-{self.run} lanpool-{self.job}" in made.stdout, made
        self.config = self.home / "ssh" / "config"
        self.env = lanpool_env(self.home)

    def ssh(self, *argv: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        if "input" not in kw:
            kw["stdin"] = subprocess.DEVNULL
        return subprocess.run(
            ["ssh", "-F", str(self.config), "-o", "BatchMode=yes", *argv],
            capture_output=True,
            env=self.env,
            timeout=timeout,
            **kw,
        )

    def host(self) -> str:
        return f"lanpool-{self.run}"

    def sandboxed(self) -> bool:
        return "process jobs: isolation none" not in self.agent.log_path.read_text()


@pytest.fixture
def dev(shell_agent, cli, make_project, tmp_path):
    cli("headless", "runners", "add", shell_agent.address, check=True)
    d = Dev(shell_agent, cli, make_project, tmp_path)
    yield d
    cli("headless", "stop", d.run, "--abort")


def _wait_listening(dev: Dev, port: int) -> None:
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


def test_ssh_scp_sftp_and_rsync_run_in_the_job(dev):
    got = dev.ssh(dev.host(), 'echo "$LANPOOL_JOB_ID"; pwd; id -un')
    assert got.returncode == 0, got.stderr
    job_id, cwd, user = got.stdout.decode().split()
    assert job_id == dev.job and "workspace" in cwd
    assert dev.ssh(f"lanpool-{dev.job}", "exit 7").returncode == 7  # the job id names it too; the exit code is ssh's

    src = dev.tmp / "f.txt"
    src.write_bytes(b"hello over sftp\n" * 1000)
    scp = ["scp", "-F", str(dev.config), "-o", "BatchMode=yes"]
    for flags, name in (([], "by-sftp.txt"), (["-O"], "by-scp.txt")):
        done = subprocess.run([*scp, *flags, str(src), f"{dev.host()}:{name}"], capture_output=True, env=dev.env)
        assert done.returncode == 0, done.stderr
    there = dev.ssh(dev.host(), "sha256sum by-sftp.txt by-scp.txt; stat -c %U by-sftp.txt")
    sums = there.stdout.decode().split()
    want = hashlib.sha256(src.read_bytes()).hexdigest()
    assert sums[0] == sums[2] == want
    assert sums[4] == user  # written by the job's user, in the job's workspace

    back = dev.tmp / "back.txt"
    batch = f"ls\nget by-sftp.txt {back}\n"
    sftp = subprocess.run(
        ["sftp", "-F", str(dev.config), "-o", "BatchMode=yes", "-b", "-", dev.host()],
        input=batch.encode(),
        capture_output=True,
        env=dev.env,
        timeout=60,
    )
    assert sftp.returncode == 0, sftp.stderr
    assert b"by-scp.txt" in sftp.stdout and back.read_bytes() == src.read_bytes()

    if shutil.which("rsync") is None:
        pytest.skip("rsync is not installed (apt-get install rsync; scripts/test does)")
    tree = dev.tmp / "tree"
    tree.mkdir()
    for i in range(20):
        (tree / f"f{i:02d}.bin").write_bytes(hashlib.sha256(str(i).encode()).digest() * (100 + i))
    done = subprocess.run(
        ["rsync", "-a", "-e", f"ssh -F {dev.config} -o BatchMode=yes", f"{tree}/", f"{dev.host()}:copy/"],
        capture_output=True,
        env=dev.env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    remote = dev.ssh(dev.host(), "cd copy && sha256sum *").stdout.decode().splitlines()
    local = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tree.iterdir()}
    assert {line.split()[1]: line.split()[0] for line in remote} == local


IPTABLES = shutil.which("iptables", path="/usr/sbin:/sbin:/usr/bin:/bin")


@pytest.mark.skipif(
    os.environ.get("LANPOOL_TESTS_OWN_NETNS") != "1" or IPTABLES is None,
    reason="firewalls the worker's own network namespace (scripts/test's integration workers) with iptables",
)
def test_a_firewalled_dev_sshd_port_is_relayed_on_lanpool_connection(dev):
    # A firewall that lets lanpool's own port through and nothing else (as a runner whose
    # --direct-ports are closed): connecting to the dev sshd's port is refused, so the hop asks
    # for the same offer on the SSH channel itself (protocol/shell_sshd.py, RELAY_LINE).
    assert IPTABLES is not None
    rules = [
        ["INPUT", "-p", "tcp", "--dport", str(dev.agent.port), "-j", "ACCEPT"],
        ["INPUT", "-p", "tcp", "--syn", "-j", "REJECT", "--reject-with", "tcp-reset"],
    ]
    for rule in rules:
        subprocess.run([IPTABLES, "-A", *rule], check=True, capture_output=True)
    try:
        got = dev.ssh(dev.host(), 'echo "$LANPOOL_JOB_ID"; pwd')
        assert got.returncode == 0, got.stderr
        assert got.stdout.decode().split()[0] == dev.job and b"relayed on lanpool's connection (slower)" in got.stderr
        assert dev.ssh(dev.host(), "exit 7").returncode == 7
        data = os.urandom(3 * 1024 * 1024)  # both ways through the channel, byte for byte
        up = dev.ssh(dev.host(), "cat > relayed.bin && sha256sum relayed.bin", input=data)
        assert up.returncode == 0 and hashlib.sha256(data).hexdigest() in up.stdout.decode(), up.stderr
        down = dev.ssh(dev.host(), "cat relayed.bin")
        assert down.returncode == 0 and down.stdout == data, down.stderr
        # The relay is the same offer: the dev sshd's own key check holds (another key: refused).
        stranger, _ = _key(dev.tmp, "stranger")
        swapped = dev.tmp / "stranger_config"
        swapped.write_text(dev.config.read_text().replace(str(dev.home / "id_ed25519"), str(stranger)))
        other = subprocess.run(
            ["ssh", "-F", str(swapped), "-o", "BatchMode=yes", dev.host(), "echo in"],
            capture_output=True,
            env=dev.env,
            timeout=60,
        )
        assert other.returncode == 255 and b"in" not in other.stdout, other
    finally:
        for rule in rules:
            subprocess.run([IPTABLES, "-D", *rule], capture_output=True)


def test_forwards_reach_the_declared_port_only(dev):
    _wait_listening(dev, dev.port)
    request = b"GET / HTTP/1.0\r\n\r\n"
    got = dev.ssh("-W", f"127.0.0.1:{dev.port}", dev.host(), input=request)
    assert got.returncode == 0 and got.stdout.startswith(b"HTTP/1.0 200"), got

    local = _free_port()
    forward = subprocess.Popen(
        ["ssh", "-F", str(dev.config), "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes", "-N"]
        + ["-L", f"{local}:127.0.0.1:{dev.port}", dev.host()],
        env=dev.env,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        body = b""
        for _ in range(100):
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{local}/", timeout=5).read()
                break
            except OSError:
                assert forward.poll() is None, forward.stderr.read() if forward.stderr else ""
                time.sleep(0.2)
        assert b"Directory listing" in body
    finally:
        forward.terminate()
        forward.wait(30)

    _wait_listening(dev, dev.other)
    for port in (dev.other, dev.agent.port):  # a server of the job's it did not declare; the agent itself
        refused = dev.ssh("-W", f"127.0.0.1:{port}", dev.host(), input=request)
        assert refused.returncode != 0 and b"HTTP" not in refused.stdout, refused
        assert b"administratively prohibited" in refused.stderr, refused.stderr
    remote = dev.ssh("-o", "ExitOnForwardFailure=yes", "-R", f"0:127.0.0.1:{dev.port}", dev.host(), "sleep 5")
    assert remote.returncode == 255, remote  # -R: no listener on the runner, for anyone


def _key(tmp_path: Path, name: str) -> tuple[Path, str]:
    key = asyncssh.generate_private_key("ssh-ed25519")
    path = tmp_path / name
    path.write_bytes(key.export_private_key())
    path.chmod(0o600)
    return path, key.export_public_key().decode().split()[1]


def test_other_keys_a_wrong_host_key_and_the_agents_files_stay_out(dev, tmp_path, monkeypatch):
    # Another key, through a good offer (the proxy asks with ours): sshd takes only the owner's.
    # The config's IdentityFile is replaced, so that only `other` is offered.
    other, other_b64 = _key(tmp_path, "other")
    text = dev.config.read_text()
    swapped = dev.tmp / "swapped_config"
    swapped.write_text(text.replace(str(dev.home / "id_ed25519"), str(other)))
    alone = subprocess.run(
        ["ssh", "-F", str(swapped), "-o", "BatchMode=yes", dev.host(), "true"],
        capture_output=True,
        env=dev.env,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert alone.returncode == 255 and b"Permission denied (publickey)" in alone.stderr, alone

    # A host key other than the runner's pinned one: ssh refuses to log in.
    known = dev.tmp / "wrong_known_hosts"
    known.write_text(f"lanpool-runner-elsewhere ssh-ed25519 {other_b64}\n")
    wrong = dev.ssh(
        "-o", f"UserKnownHostsFile={known}", "-o", "HostKeyAlias=lanpool-runner-elsewhere", dev.host(), "true"
    )
    assert wrong.returncode == 255 and b"Host key verification failed" in wrong.stderr, wrong

    # The exec door: our connection asking with another key; another controller asking for our job.
    async def ask(key_b64: str, home: Path) -> tuple[int | None, bytes]:
        monkeypatch.setenv("LANPOOL_HOME", str(home))  # _connect's key: that controller's
        async with _connect(dev.agent) as conn:
            command = exec_command(dev.job, [], dev_sshd_key=f"ssh-ed25519:{key_b64}")
            proc = await conn.create_process(command, encoding=None)
            await asyncio.wait_for(proc.wait_closed(), 30)
            return proc.exit_status, await proc.stderr.read()

    status, said = asyncio.run(ask(other_b64, dev.home))
    assert status == 255 and b"takes the key of the controller that owns job" in said, said
    second = tmp_path / "second-controller"
    second_pub = controller_key(lanpool_env(second))
    authorize_key(second_pub, dev.agent.data_dir, lanpool_env(second))
    status, said = asyncio.run(ask(Path(second_pub).read_text().split()[1], second))
    assert status == 255 and b"does not exist on this runner" in said, said
    monkeypatch.setenv("LANPOOL_HOME", str(dev.home))

    # The agent's data dir (the dev host key, the controllers' keys) is not the job's to read.
    if dev.sandboxed():
        for name in ("dev-sshd-host-key", "host_key", "authorized_keys"):
            peek = dev.ssh(dev.host(), f"cat {dev.agent.data_dir / name}")
            assert peek.returncode != 0 and b"PRIVATE KEY" not in peek.stdout and b"ssh-ed25519" not in peek.stdout


def test_a_job_the_runner_does_not_have_is_one_line_for_ssh_to_show(dev):
    # The entry's hop asks the agent for a job it has not got (ended and forgotten, a stale
    # config): the agent's reason, as one `lanpool:` line that ssh shows, exit 255, no session.
    stale = dev.tmp / "stale_config"
    stale.write_text(dev.config.read_text().replace(f"lanpool-exec {dev.job} ", "lanpool-exec 0123456789ab "))
    got = subprocess.run(
        ["ssh", "-F", str(stale), "-o", "BatchMode=yes", dev.host(), "echo in"],
        capture_output=True,
        env=dev.env,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert got.returncode == 255 and b"in" not in got.stdout, got
    lines = [line for line in got.stderr.decode().splitlines() if line.startswith("lanpool:")]
    assert len(lines) == 1 and "0123456789ab" in lines[0] and "does not exist on this runner" in lines[0], got.stderr

    # The hop run by hand with the wrong arguments: one line, nothing on stdout (it is ssh's).
    hop = subprocess.run(
        [sys.executable, "-I", "-S", str(HOP), "x"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=30,
    )
    assert hop.returncode == 255 and hop.stdout == "" and hop.stderr.count("\n") == 1, hop
    assert hop.stderr.startswith("lanpool: usage:")


def test_a_wrong_pinned_agent_key_stops_the_hop_before_any_offer(dev):
    # The agent's own host key, as ssh-config pinned it from the store, is the trust root: another
    # key there and the system ssh refuses the agent, so no offer is asked for and no session runs.
    known = dev.home / "ssh" / "known_hosts"
    before = known.read_text()
    _other, other_b64 = _key(dev.tmp, "impostor")
    try:
        known.write_text(
            "".join(
                f"{line.split()[0]} ssh-ed25519 {other_b64}\n" if line.startswith("lanpool-agent-") else line + "\n"
                for line in before.splitlines()
            )
        )
        got = dev.ssh(dev.host(), "echo in")
        assert got.returncode == 255 and b"in" not in got.stdout, got
        assert b"Host key verification failed" in got.stderr and b"lanpool: runner" in got.stderr, got.stderr
    finally:
        known.write_text(before)
    assert dev.ssh(dev.host(), "true").returncode == 0


_KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIOYxWf1Mtm6FznXvhg2EY5c6zmpGCIFBrX5S7zaQXQ2L"
_ENTRY = HostEntry(
    ("lanpool-train-3", "lanpool-j-abc"), "j-abc", 0, "gpu-box", "alice", _KEY, "10.0.0.7", 7422, f"ssh-ed25519 {_KEY}"
)


def test_openssh_reads_the_entry_as_written(tmp_path):
    home = tmp_path / "lan pool"
    write_ssh_config(home, [_ENTRY], "/usr/bin/python3", _KEY)
    got = subprocess.run(
        ["ssh", "-F", str(home / "ssh" / "config"), "-G", "lanpool-train-3"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert got.returncode == 0, got.stderr
    options = dict(line.split(" ", 1) for line in got.stdout.splitlines() if " " in line)
    assert options["user"] == "alice"
    assert options["hostkeyalias"] == "lanpool-runner-gpu-box"
    assert options["identityfile"] == f"{home}/id_ed25519"
    assert options["userknownhostsfile"] == f"{home}/ssh/known_hosts"
    assert str(HOP) in options["proxycommand"] and "lanpool-exec j-abc --dev-sshd" in options["proxycommand"]
    assert options["proxyusefdpass"] == "yes"
    assert (home / "ssh" / "known_hosts").read_text() == (
        f"lanpool-runner-gpu-box ssh-ed25519 {_KEY}\nlanpool-agent-gpu-box ssh-ed25519 {_KEY}\n"
    )
    for path in (home / "ssh" / "config", home / "ssh" / "known_hosts"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "ssh").stat().st_mode) == 0o700


def test_permit_open_leaves_out_a_declared_port_another_process_listens_on():
    held = socket.create_server(("127.0.0.1", 0))  # this test's process: not the job's
    try:
        taken = held.getsockname()[1]
        free = socket.create_server(("127.0.0.1", 0))
        nobody = free.getsockname()[1]
        free.close()  # nothing listens there now: the job's server may come later
        job = SimpleNamespace(record=SimpleNamespace(job_id="devjob", ports=[taken, nobody]))
        assert dev_permit_open(job) == ([nobody] if sys.platform.startswith("linux") else [taken, nobody])
    finally:
        held.close()


def test_the_hops_connection_for_ssh_has_nagle_off():
    # ssh turns Nagle off for a terminal only; the hop's connection has it off for every session.
    with socket.create_server(("127.0.0.1", 0)) as server:
        with connect("127.0.0.1", server.getsockname()[1]) as sock:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
