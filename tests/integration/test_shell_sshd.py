"""A job's shell through the runner's one-time sshd (agent/shell/sshd.py, app/shell/sshd.py): the
real client on a terminal, then the offer tried by hand from where it must stay shut (another
key, a forwarding, a stranger's connection, a malformed key in the request) and the session's
command script against hostile values.
The part with real agents and the CLI (integration); the rest: tests/unit/test_shell_sshd.py, tests/system/test_shell_sshd.py."""

import asyncio
import contextlib
import glob
import os
import shutil
import socket
import subprocess
from pathlib import Path

import asyncssh
import pytest

from lanpool.agent.shell.sshd import ACCEPT_S, LOGIN_GRACE_S, MAX_TRIES
from lanpool.app.shell.sshd import ssh_argv, sshd_command
from lanpool.protocol.shell_sshd import SSHD_RAN, SSHD_UNUSED, parse_offer_line
from tests.integration.test_job_shell import _connect
from tests.integration.test_shell_terminal import _shell
from tests.system.test_docker_executor import _stop, submit, wait_for_line

pytestmark = pytest.mark.skipif(
    shutil.which("sshd", path="/usr/sbin:/usr/local/sbin:/sbin") is None or shutil.which("ssh") is None,
    reason="needs OpenSSH's sshd and ssh (apt-get install openssh-server openssh-client; scripts/test does)",
)


IN_SSHD = "the session runs in a one-time sshd"


def _on_the_channel(job_id: str, code: int) -> str:
    """The agent's line for a session served on the exec channel itself (agent/shell/into_job.py)."""
    return f"exec session in job {job_id} ended (exit {code})"


def _started(agent, job_id: str, **fields) -> None:
    submit(agent, job_id, ["echo ready", "sleep 120"], "", **fields)
    wait_for_line(agent, job_id, "ready")


def _leftovers(agent) -> set[str]:
    # This agent's only (its pid is in the name): other tests' agents run sshds at the same time.
    name = f"lanpool-sshd-{agent.proc.pid}-*"
    return set(glob.glob(f"/dev/shm/{name}")) | set(glob.glob(f"/tmp/{name}"))


def _key(tmp_path: Path, name: str) -> tuple[Path, str]:
    key = asyncssh.generate_private_key("ssh-ed25519")
    path = tmp_path / name
    path.write_bytes(key.export_private_key())
    path.chmod(0o600)
    return path, key.export_public_key().decode().split()[1]


async def _offer(agent, job_id: str, key_b64: str):
    conn = await _connect(agent)
    proc = await conn.create_process(sshd_command(job_id, [], key_b64), encoding=None)
    line = await asyncio.wait_for(proc.stdout.readline(), 20)
    offer = parse_offer_line(line)
    assert offer is not None, line
    return conn, proc, offer


def _ssh(tmp_path: Path, key: Path, offer, host_key_line: str, *extra: str, host: str = "127.0.0.1"):
    home = tmp_path / "ssh-home"
    home.mkdir(exist_ok=True)
    (home / "known_hosts").write_text(host_key_line)
    port, user, _ = offer
    argv = ssh_argv(home, host, port, user)
    argv[argv.index("-i") + 1] = str(key)
    return subprocess.run(
        [*argv[:-1], *extra, argv[-1], "true"], capture_output=True, stdin=subprocess.DEVNULL, timeout=60
    )


def test_ssh_goes_through_a_one_time_sshd_output_exit_code_and_the_jobs_env(agent):
    before = _leftovers(agent)
    _started(agent, "sj", env={"MY_VAR": "from the job's env"})
    code, out = _shell(agent, "sj", "echo sshd-$((40+2)) $MY_VAR; pwd; exit 9")
    assert code == 9
    assert b"sshd-42 from the job's env" in out
    assert b"/workspace" in out  # the job's working directory
    log = agent.log_path.read_text()
    assert IN_SSHD in log and "a session ran" in log
    assert "Accepted publickey" in log  # sshd's own account of the login, in the agent's log
    asyncio.run(_stop(agent, "sj", abort=True, grace_s=0))
    assert _leftovers(agent) <= before  # the session's keys and script are gone


def test_lanpool_sshd_shells_0_goes_on_the_channel_instead(agent, monkeypatch):
    monkeypatch.setenv("LANPOOL_SSHD_SHELLS", "0")
    _started(agent, "nd")
    code, out = _shell(agent, "nd", "echo not-sshd; exit 3")
    assert (code, b"not-sshd" in out) == (3, True)
    log = agent.log_path.read_text()
    assert IN_SSHD not in log and _on_the_channel("nd", 3) in log
    asyncio.run(_stop(agent, "nd", abort=True, grace_s=0))


async def _in_session(agent, tmp_path, job_id: str, end) -> tuple[int, int | None]:
    """A session held open by hand (a shell waiting on a pipe), then `end` (async): ssh's exit code
    and the channel's status."""
    key, key_b64 = _key(tmp_path, "ours")
    conn, proc, offer = await _offer(agent, job_id, key_b64)
    async with conn:
        home = tmp_path / "ssh-home"
        home.mkdir()
        (home / "known_hosts").write_text(f"lanpool-job ssh-ed25519 {offer[2]}\n")
        argv = ssh_argv(home, "127.0.0.1", offer[0], offer[1])
        argv[argv.index("-i") + 1] = str(key)
        argv[argv.index("-t")] = "-tt"  # a terminal though stdin is a pipe: the shell waits on it
        ssh = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        assert ssh.stdin is not None and ssh.stdout is not None
        ssh.stdin.write(b"echo in-session\n")
        seen = b""
        while b"in-session" not in seen.replace(b"echo in-session", b""):
            part = await asyncio.wait_for(ssh.stdout.read(4096), 30)
            assert part, seen
            seen += part
        await end()
        code = await asyncio.wait_for(ssh.wait(), 30)  # the session is hung up, not left running
        with contextlib.suppress(asyncssh.Error, OSError):
            await asyncio.wait_for(proc.wait_closed(), 20)
        return code, proc.exit_status


def test_the_jobs_end_ends_the_session(agent, tmp_path):
    _started(agent, "je")
    code, status = asyncio.run(_in_session(agent, tmp_path, "je", lambda: _stop(agent, "je", abort=True, grace_s=0)))
    assert code != 0 and status == SSHD_RAN
    log = agent.log_path.read_text()
    # A sandboxed job's shell dies with the job's PID namespace, often before the agent stops sshd.
    if "process jobs: isolation none" in log:
        assert "the job ended; stopping its sshd" in log


def test_the_agent_stopping_ends_the_session(agent, tmp_path):
    _started(agent, "as")

    async def stop_agent() -> None:
        await asyncio.to_thread(agent.stop)

    code, _ = asyncio.run(_in_session(agent, tmp_path, "as", stop_agent))
    assert code != 0  # no shell outlives its agent


def test_an_ssh_that_never_connects_falls_back_to_the_channel(agent, tmp_path, monkeypatch):
    """The controller's `ssh` fails before any session (here a stand-in that exits 255 at once, as
    one behind a firewall would after its timeout): the runner hears it is done, says no session
    ran, and the shell opens on the SSH channel instead, with the command's exit code."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ssh").write_text("#!/bin/sh\necho 'ssh: connect to host: Connection refused' >&2\nexit 255\n")
    (fake / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    _started(agent, "fb")
    code, out = _shell(agent, "fb", "echo fell-back; exit 6")
    assert (code, b"fell-back" in out) == (6, True)
    log = agent.log_path.read_text()
    assert "the controller gave up first" in log and _on_the_channel("fb", 6) in log
    asyncio.run(_stop(agent, "fb", abort=True, grace_s=0))


def test_another_key_is_refused_and_the_channel_says_no_session_ran(agent, tmp_path):
    _started(agent, "ak")
    _, ours = _key(tmp_path, "ours")
    theirs, _ = _key(tmp_path, "theirs")

    async def attempt():
        conn, proc, offer = await _offer(agent, "ak", ours)
        async with conn:
            line = f"lanpool-job ssh-ed25519 {offer[2]}\n"
            got = await asyncio.to_thread(_ssh, tmp_path, theirs, offer, line)
            proc.stdin.write_eof()  # as the controller says its ssh is done
            await asyncio.wait_for(proc.wait_closed(), 20)
            return got, proc.exit_status

    got, status = asyncio.run(attempt())
    assert got.returncode == 255 and b"Permission denied" in got.stderr
    assert status == SSHD_UNUSED
    assert "no session ran" in agent.log_path.read_text()
    asyncio.run(_stop(agent, "ak", abort=True, grace_s=0))


def test_the_right_key_gets_no_forwarding_and_a_wrong_host_key_is_caught(agent, tmp_path):
    _started(agent, "fw")
    key, key_b64 = _key(tmp_path, "ours")
    target = socket.create_server(("127.0.0.1", 0))  # something the runner's loopback has

    async def attempt(host_key_line: str, *extra: str):
        conn, proc, offer = await _offer(agent, "fw", key_b64)
        async with conn:
            got = await asyncio.to_thread(_ssh, tmp_path, key, offer, host_key_line.format(key=offer[2]), *extra)
            proc.close()
            return got

    try:
        port = target.getsockname()[1]
        forward = asyncio.run(attempt("lanpool-job ssh-ed25519 {key}\n", "-W", f"127.0.0.1:{port}"))
        assert forward.returncode == 255 and b"forwarding failed" in forward.stderr
        log = agent.log_path.read_text()
        assert "Accepted publickey" in log and "refused local port forward: originator" in log
        target.setblocking(False)
        with pytest.raises(BlockingIOError):
            target.accept()  # nothing reached it
        # The host key pinned is the offer's: another one (an impostor on the port) stops ssh before it logs in.
        _, other = _key(tmp_path, "other-host")
        impostor = asyncio.run(attempt(f"lanpool-job ssh-ed25519 {other}\n"))
        assert impostor.returncode == 255 and b"HOST IDENTIFICATION HAS CHANGED" in impostor.stderr
    finally:
        target.close()
    asyncio.run(_stop(agent, "fw", abort=True, grace_s=0))


def test_a_connection_from_another_address_is_closed_unread_and_the_controllers_still_works(agent, tmp_path):
    _started(agent, "sa")
    key, key_b64 = _key(tmp_path, "ours")

    async def attempt():
        conn, proc, offer = await _offer(agent, "sa", key_b64)
        async with conn:
            stranger = socket.socket()
            stranger.bind(("127.0.0.2", 0))  # loopback, but not the address the SSH connection came from
            stranger.connect(("127.0.0.1", offer[0]))
            stranger.settimeout(10)
            heard = stranger.recv(100)  # an sshd would send its banner first
            stranger.close()
            line = f"lanpool-job ssh-ed25519 {offer[2]}\n"
            got = await asyncio.to_thread(_ssh, tmp_path, key, offer, line)
            await asyncio.wait_for(proc.wait_closed(), 20)
            return heard, got, proc.exit_status

    heard, got, status = asyncio.run(attempt())
    assert heard == b""
    assert got.returncode == 0, got.stderr
    assert status == SSHD_RAN
    assert "not the controller's 127.0.0.1; closed" in agent.log_path.read_text()
    asyncio.run(_stop(agent, "sa", abort=True, grace_s=0))


def _cut_after_banner(sock: socket.socket) -> bytes:
    """What a connection that says nothing hears until the runner cuts it (sshd's banner first)."""
    sock.settimeout(LOGIN_GRACE_S + 10)
    heard = b""
    while part := sock.recv(4096):
        heard += part
    return heard


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_a_wrong_key_and_a_silent_connection_do_not_use_the_offer_up(agent, tmp_path):
    """From the controller's own address, a connection that says nothing and then an ssh with
    another key come first: the controller's ssh still logs in. Once it has, the silent one is cut,
    and after its session the offer is over (the port refuses, the channel says a session ran)."""
    _started(agent, "wk")
    key, key_b64 = _key(tmp_path, "ours")
    theirs, _ = _key(tmp_path, "theirs")

    async def attempt():
        conn, proc, offer = await _offer(agent, "wk", key_b64)
        async with conn:
            line = f"lanpool-job ssh-ed25519 {offer[2]}\n"
            silent = socket.create_connection(("127.0.0.1", offer[0]))
            try:
                wrong = await asyncio.to_thread(_ssh, tmp_path, theirs, offer, line)
                right = await asyncio.to_thread(_ssh, tmp_path, key, offer, line)
                await asyncio.wait_for(proc.wait_closed(), 20)  # no EOF from us: the session's end ends it
                heard = await asyncio.to_thread(_cut_after_banner, silent)
            finally:
                silent.close()
            return wrong, right, proc.exit_status, heard, _refused(offer[0])

    wrong, right, status, heard, refused = asyncio.run(attempt())
    assert wrong.returncode == 255 and b"Permission denied" in wrong.stderr
    assert right.returncode == 0, right.stderr
    assert status == SSHD_RAN
    assert heard.startswith(b"SSH-2.0-") and refused
    log = agent.log_path.read_text()
    assert f"connected (3 of {MAX_TRIES})" in log and "logged in; the session runs in a one-time sshd" in log
    asyncio.run(_stop(agent, "wk", abort=True, grace_s=0))


def test_connections_that_never_log_in_end_the_offer_within_its_bounds(agent, tmp_path):
    """MAX_TRIES connections that log in to nothing withdraw the offer (the controller's ssh then
    finds the port shut); one that says nothing holds it no longer than ACCEPT_S for new
    connections and sshd's LoginGraceTime for itself."""
    _started(agent, "tt")
    key, key_b64 = _key(tmp_path, "ours")

    async def tries_used():
        conn, proc, offer = await _offer(agent, "tt", key_b64)
        async with conn:
            for _ in range(MAX_TRIES):
                socket.create_connection(("127.0.0.1", offer[0])).close()
            await asyncio.wait_for(proc.wait_closed(), 20)
            line = f"lanpool-job ssh-ed25519 {offer[2]}\n"
            return proc.exit_status, await asyncio.to_thread(_ssh, tmp_path, key, offer, line)

    status, late = asyncio.run(tries_used())
    assert status == SSHD_UNUSED and late.returncode == 255
    assert f"{MAX_TRIES} connections, none logged in; the offer is withdrawn" in agent.log_path.read_text()

    async def silent_held():
        conn, proc, offer = await _offer(agent, "tt", key_b64)
        async with conn:
            silent = socket.create_connection(("127.0.0.1", offer[0]))
            try:
                heard = await asyncio.to_thread(_cut_after_banner, silent)
            finally:
                silent.close()
            await asyncio.wait_for(proc.wait_closed(), ACCEPT_S + 10)
            return heard, proc.exit_status, _refused(offer[0])

    heard, status, refused = asyncio.run(silent_held())
    assert heard.startswith(b"SSH-2.0-") and status == SSHD_UNUSED and refused
    assert "no connection logged in" in agent.log_path.read_text()
    asyncio.run(_stop(agent, "tt", abort=True, grace_s=0))
