"""Into a running job: exec, a shell on a PTY, forwarded ports. Real agents, real asyncssh
clients and the real `app` CLI; each door is tried from where it must stay shut too
(a pairing connection, a job that ended, an undeclared port, a plain exec).
The part with real agents and the CLI (integration); the rest: tests/unit/test_job_shell.py, tests/system/test_job_shell.py."""

import asyncio
import hashlib
import json
import re
import subprocess
import sys
import time
import urllib.request

import asyncssh
import pytest

from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key
from lanpool.protocol.pairing import PAIRING_USER
from lanpool.protocol.runtime import event_loop
from lanpool.protocol.wire import exec_command
from tests.harness import APP_MODULE, follow_until, lanpool_env
from tests.system.test_docker_executor import _status, _stop, submit, wait_for_line


@pytest.fixture(params=["asyncio", "uvloop"])
def loop_name(request, monkeypatch) -> str:
    """Both event loops (protocol/runtime/event_loop.py) for the agent started after it and for the
    controller's side run through event_loop.run: PTYs and forwards once failed under uvloop."""
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    monkeypatch.setenv(event_loop.ENV, request.param)
    return str(request.param)


@pytest.fixture
def agent(shell_agent):
    return shell_agent  # a HOME of its own (tests/conftest.py): the job's shell reads no .bashrc of this machine


def _connect(agent, *, pairing: bool = False):
    key = (
        asyncssh.generate_private_key("ssh-ed25519")
        if pairing
        else load_or_create_client_key(ControllerHome.default().key)
    )
    return asyncssh.connect(
        agent.host,
        agent.port,
        username=PAIRING_USER if pairing else "lanpool",
        client_keys=[key],
        known_hosts=None,
        agent_path=None,
        config=[],
    )


def _wait_running(agent, job_id: str, text: str = "ready") -> None:
    wait_for_line(agent, job_id, text)


async def _exec(agent, job_id: str, argv: list[str], **options) -> asyncssh.SSHCompletedProcess:
    async with _connect(agent) as conn:
        return await conn.run(exec_command(job_id, argv), **options)


def test_exec_into_a_process_job_has_its_env_and_exit_code(agent):
    submit(agent, "sleeper", ["echo ready", "sleep 60"], "", env={"MY_VAR": "hello-job"})
    _wait_running(agent, "sleeper")
    done = asyncio.run(_exec(agent, "sleeper", ["sh", "-c", "echo $MY_VAR; pwd; echo err >&2; exit 7"]))
    assert done.exit_status == 7
    out = done.stdout.splitlines()
    assert out[0] == "hello-job" and out[1].endswith("workspace")
    assert done.stderr.strip() == "err"
    # Input reaches the command.
    echoed = asyncio.run(_exec(agent, "sleeper", ["cat"], input="typed\n"))
    assert echoed.stdout == "typed\n" and echoed.exit_status == 0
    log = agent.log_path.read_text()
    assert "exec session from" in log and "into job sleeper" in log
    asyncio.run(_stop(agent, "sleeper", abort=True, grace_s=0))


def test_a_shell_on_a_pty_runs_typed_commands_and_ctrl_c(loop_name, agent):
    submit(agent, "ptyjob", ["echo ready", "sleep 60"], "")
    _wait_running(agent, "ptyjob")

    async def session() -> tuple[str, int | None]:
        async with _connect(agent) as conn:
            proc = await conn.create_process(exec_command("ptyjob", []), term_type="xterm", term_size=(100, 30))
            proc.stdin.write("stty size; echo mark-$((40+2))\n")
            seen = ""
            while "mark-42" not in seen or "30 100" not in seen:
                seen += await asyncio.wait_for(proc.stdout.read(4096), 20)
            proc.change_terminal_size(120, 40)
            # The sleep says when it runs (in the foreground): a Ctrl-C sent before it started, on a
            # busy machine, reached the shell instead and left the sleep its 30 s.
            proc.stdin.write("sh -c 'echo sleeping-$((6*7)); exec sleep 30'\n")
            while "sleeping-42" not in seen:
                seen += await asyncio.wait_for(proc.stdout.read(4096), 20)
            proc.stdin.write("\x03")  # Ctrl-C ends the sleep, not the shell
            proc.stdin.write("stty size; exit 5\n")
            while "40 120" not in seen:
                seen += await asyncio.wait_for(proc.stdout.read(4096), 20)
            await asyncio.wait_for(proc.wait_closed(), 20)
            return seen, proc.exit_status

    seen, code = event_loop.run(session())
    assert code == 5 and "mark-42" in seen
    assert f"event loop: {loop_name}" in agent.log_path.read_text()
    asyncio.run(_stop(agent, "ptyjob", abort=True, grace_s=0))


def test_a_paste_larger_than_the_pty_takes_arrives_whole(loop_name, agent):
    # 1 MiB typed at once: far more than a PTY's input queue, so the agent must hold the rest
    # (the channel paused) and write it as the command reads, losing and reordering nothing.
    submit(agent, "pastejob", ["echo ready", "sleep 60"], "")
    _wait_running(agent, "pastejob")
    size = 1 << 20
    paste = bytes(b"0123456789abcdef"[i % 16] for i in range(size))

    async def session() -> tuple[bytes, int | None]:
        async with _connect(agent) as conn:
            proc = await conn.create_process(
                exec_command("pastejob", ["sh", "-c", f"stty raw -echo; head -c {size} | md5sum"]),
                term_type="xterm",
                term_size=(80, 24),
                encoding=None,
            )
            await asyncio.sleep(0.5)  # stty ran: no line discipline in the way
            proc.stdin.write(paste)
            out = await asyncio.wait_for(proc.stdout.read(), 60)
            await asyncio.wait_for(proc.wait_closed(), 20)
            return out, proc.exit_status

    out, code = event_loop.run(session())
    assert code == 0 and hashlib.md5(paste).hexdigest().encode() in out
    asyncio.run(_stop(agent, "pastejob", abort=True, grace_s=0))


def test_exec_into_an_ended_or_unknown_job_is_one_line(agent):
    submit(agent, "quick", ["echo ready"], "")
    deadline = time.time() + 30
    while asyncio.run(_status(agent, "quick")).state != "DONE" and time.time() < deadline:
        time.sleep(0.2)
    for job_id, why in (("quick", "ended (DONE)"), ("nosuchjob", "does not exist")):
        done = asyncio.run(_exec(agent, job_id, ["true"]))
        assert done.exit_status == 255 and done.stderr == f"lanpool: job {job_id} {why} on this runner\n"


def test_a_pairing_connection_cannot_exec_nor_forward(agent):
    subprocess.run(
        [sys.executable, "-m", "lanpool.app.cli.main", "agent", "pair", "--data-dir", str(agent.data_dir)],
        env=lanpool_env(ControllerHome.default().root),
        capture_output=True,
        check=True,
    )
    submit(agent, "guarded", ["echo ready", "sleep 60"], "", ports=[agent.port])
    _wait_running(agent, "guarded")

    async def attempts() -> list[str]:
        accepted = []
        async with _connect(agent, pairing=True) as conn:
            for what, attempt in {
                "exec": lambda: conn.run(exec_command("guarded", ["id"]), check=False),
                "pty": lambda: conn.create_process(exec_command("guarded", []), term_type="xterm"),
                "forward": lambda: conn.open_connection("127.0.0.1", agent.port),
            }.items():
                try:
                    result = await attempt()
                except (asyncssh.ChannelOpenError, asyncssh.ProcessError):
                    continue
                if getattr(result, "exit_status", 0) not in (None,) and what == "exec" and result.exit_status != 0:
                    continue
                accepted.append(what)
        return accepted

    assert asyncio.run(attempts()) == []
    asyncio.run(_stop(agent, "guarded", abort=True, grace_s=0))


def test_plain_exec_shell_and_subsystem_on_a_pty_stay_refused(agent):
    async def attempts() -> list[str]:
        accepted = []
        async with _connect(agent) as conn:
            for what, attempt in {
                "exec": lambda: conn.run("lanpool-execx j -- id"),
                "exec-like": lambda: conn.run("lanpool-exec j; id"),
                "shell": lambda: conn.create_process(term_type="xterm"),
                "subsystem on pty": lambda: conn.create_process(subsystem="lanpool", term_type="xterm"),
            }.items():
                try:
                    await attempt()
                except asyncssh.ChannelOpenError:
                    continue
                accepted.append(what)
        return accepted

    assert asyncio.run(attempts()) == []


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_declared_port_is_forwarded_others_refused_and_it_ends_with_the_job(agent):
    port, other = _free_port(), _free_port()
    submit(
        agent,
        "web",
        [f"{sys.executable} -m http.server {port} --bind 127.0.0.1 &", "sleep 0.5", "echo ready", "sleep 60"],
        "",
        ports=[port],
    )
    _wait_running(agent, "web")
    # Something listens on `other` too: refused for not being declared, not for being closed.
    bystander = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(other), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    async def check() -> None:
        async with _connect(agent) as conn:
            listener = await conn.forward_local_port("127.0.0.1", 0, "127.0.0.1", port)
            url = f"http://127.0.0.1:{listener.get_port()}/"
            for _ in range(50):
                try:
                    body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())
                    break
                except OSError:
                    await asyncio.sleep(0.1)
            assert b"Directory listing" in body
            for host, p in (
                ("127.0.0.1", other),
                ("127.0.0.2", port),
                ("example.com", port),
                ("127.0.0.1", agent.port),
            ):
                with pytest.raises(asyncssh.ChannelOpenError):
                    await conn.open_connection(host, p)
            reader, writer = await conn.open_connection("127.0.0.1", port)  # held open across the job's end
            await asyncio.to_thread(asyncio.run, _stop(agent, "web", abort=True, grace_s=0))
            assert await asyncio.wait_for(reader.read(), 20) == b""  # cut when the job ended
            while (await asyncio.to_thread(asyncio.run, _status(agent, "web"))).state not in ("ABORTED", "STOPPED"):
                await asyncio.sleep(0.2)
            with pytest.raises(asyncssh.ChannelOpenError):
                await conn.open_connection("127.0.0.1", port)

    try:
        asyncio.run(check())
    finally:
        bystander.kill()
    assert "refused port forwarding (direct-tcpip) to 127.0.0.2" in agent.log_path.read_text()


def test_submit_refuses_more_ports_than_allowed(agent):
    from lanpool.app.errors import RunnerError

    with pytest.raises(RunnerError, match="at most 16"):
        submit(agent, "manyports", ["true"], "", ports=list(range(2000, 2017)))
    with pytest.raises(RunnerError, match="ports"):
        submit(agent, "badport", ["true"], "", ports=[0])


WORKFLOWS = """
workflows:
  - name: serve
    ports: [PORT]
    commands:
      - python -m http.server PORT --bind 127.0.0.1 &
      - echo ready
      - sleep 60
"""


def test_cli_exec_ports_and_refusals(loop_name, agent, cli, make_project):
    port = _free_port()
    project = make_project(WORKFLOWS.replace("PORT", str(port)))
    res = cli("headless", "run", "serve", "--runner", agent.address, "-d", "--json", cwd=project, check=True)
    run = json.loads(res.stdout.strip().splitlines()[-1])["run"]
    cli.follow_until(run, "ready")
    done = cli("headless", "exec", run, "--", "sh", "-c", "echo hi from $PWD; exit 4")
    assert done.returncode == 4 and done.stdout.startswith("hi from ") and "workspace" in done.stdout
    assert cli("headless", "exec", run, "--node", "3", "--", "true").stderr.count("\n") == 1
    forwards = subprocess.Popen(
        [*APP_MODULE, "headless", "ports", run, "--json"],
        stdout=subprocess.PIPE,
        text=True,
        env=lanpool_env(ControllerHome.default().root),
    )
    try:
        (fwd,) = json.loads(forwards.stdout.readline())
        assert fwd["port"] == port
        for _ in range(50):
            try:
                body = urllib.request.urlopen(fwd["url"], timeout=5).read()
                break
            except OSError:
                time.sleep(0.2)
        assert b"Directory listing" in body
        cli("headless", "stop", run, "--abort", check=True)
        assert forwards.wait(30) == 0  # the forwards end with the job
    finally:
        forwards.kill()
    ended = cli("headless", "exec", run, "--", "true")
    assert ended.returncode != 0 and len(ended.stderr.strip().splitlines()) == 1 and "ended" in ended.stderr
    assert re.search(r"not a port number", cli("headless", "run", "serve", "--port", "0", cwd=project).stderr)


PICKED = """
workflows:
  - name: serve
    ports: 1
    env:
      - MY_TOKEN
      - GREETING=hello
    commands:
      - python -m http.server $PORT_0 --bind 127.0.0.1 &
      - echo "listening on $PORT_0 $GREETING token=$MY_TOKEN"
      - sleep 60
  - name: guessed
    ports: 6006
    commands: [true]
  - name: twice
    env: [MY_TOKEN, MY_TOKEN=x]
    commands: [true]
"""


def test_2022_ports_count_and_a_passed_env_name(agent, cli, make_project, controller_home):
    """dstack 2022's `ports: N` (the runner picks them: $PORT_0, forwarded like listed ports) and
    `env: [- NAME]` (the caller's value: masked in logs, in no file of the controller's home)."""
    project = make_project(PICKED)
    token = "tok-" + hashlib.sha256(str(time.time()).encode()).hexdigest()[:20]
    env = {**lanpool_env(controller_home), "MY_TOKEN": token}

    def app(*args: str, with_token: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*APP_MODULE, "headless", *args],
            cwd=project,
            env=env if with_token else lanpool_env(controller_home),
            capture_output=True,
            text=True,
            timeout=120,
        )

    missing = app("run", "serve", "--runner", agent.address, "-d", with_token=False)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert "MY_TOKEN" in missing.stderr and "export MY_TOKEN=" in missing.stderr
    res = app("run", "serve", "--runner", agent.address, "-d", "--json")
    assert res.returncode == 0, res.stderr
    run = json.loads(res.stdout.strip().splitlines()[-1])["run"]
    log = follow_until(run, "listening on", env)
    picked = int(re.search(r"listening on (\d+) hello token=\*\*\*", log).group(1))  # masked here too
    forwards = subprocess.Popen(
        [*APP_MODULE, "headless", "ports", run, "--json"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        (fwd,) = json.loads(forwards.stdout.readline())
        assert fwd["port"] == picked
        for _ in range(50):
            try:
                body = urllib.request.urlopen(fwd["url"], timeout=5).read()
                break
            except OSError:
                time.sleep(0.2)
        assert b"Directory listing" in body
    finally:
        forwards.kill()
    done = app("exec", run, "--", "sh", "-c", 'printf %s "$MY_TOKEN" | sha256sum')
    assert done.stdout.split()[0] == hashlib.sha256(token.encode()).hexdigest(), done.stderr  # the real value
    app("stop", run, "--abort")
    for path in controller_home.rglob("*"):  # never stored: not in the store, its WAL, any file
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
    assert token not in agent.log_path.read_text()
    guessed = app("run", "guessed", "--runner", agent.address)
    assert guessed.returncode == 2 and "write ports: [6006]" in guessed.stderr, guessed.stderr
    twice = app("run", "twice", "--runner", agent.address)
    assert twice.returncode == 2 and "'MY_TOKEN' is given twice" in twice.stderr, twice.stderr
    listed = app("run")  # the workflows, the refused ones marked: one bad workflow blocks no other
    assert re.search(r"serve", listed.stdout + listed.stderr) and "ports: [6006]" in listed.stdout + listed.stderr


def test_a_runner_picks_the_ports_asked_and_refuses_too_many(agent):
    from lanpool.app.errors import RunnerError

    with pytest.raises(RunnerError, match="at most 16"):
        submit(agent, "toomany", ["true"], "", ports=[2000, 2001], port_count=15)


def test_exec_right_after_run_detached_asks_the_runner_not_the_store(agent, cli, make_project):
    """The store says SUBMITTED a moment after `run -d`; exec asks the runner (and waits for a job
    its runner is still starting) instead of refusing "not running yet"."""
    project = make_project(WORKFLOWS.replace("PORT", str(_free_port())))
    res = cli("headless", "run", "serve", "--runner", agent.address, "-d", "--json", cwd=project, check=True)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    [job] = out["jobs"]
    done = cli("headless", "exec", out["run"], "--", "sh", "-c", "echo inside $LANPOOL_JOB_ID")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"inside {job['job_id']}", done.stdout
    assert "not running yet" not in done.stderr
    cli("headless", "stop", out["run"], "--abort", check=True)
