"""Bad input gets one clear error and the agent keeps serving."""

import asyncio
import struct

import asyncssh
import msgpack
import pytest

from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key
from lanpool.protocol import MAX_FRAME_BYTES, ErrorCode, FrameReader, Ping, Pong, decode_agent_message, encode_message


def _one_line_error(res, code: int, *fragments: str) -> None:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_unknown_workflow(cli, make_project):
    project = make_project("workflows:\n  - name: a\n    commands: [echo a]\n")
    res = cli("headless", "run", "nope", cwd=project)
    _one_line_error(res, 2, "no workflow named 'nope'", "workflows here: a")


def test_malformed_yaml_names_file_and_line(cli, make_project):
    project = make_project("workflows:\n  - name: a\n    commands: [echo a\n  - name: b\n")
    res = cli("headless", "run", "a", cwd=project)
    _one_line_error(res, 2, "workflows.yaml:", "malformed YAML")


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("../x", "must stay inside the workspace"),
        ("out/../../x", "must stay inside the workspace"),
        ("/etc", "is outside the workspace: only a container job's absolute paths are copied out"),
    ],
)
def test_artifact_path_escaping_the_workspace_is_refused_before_running(cli, make_project, path, why):
    project = make_project(f"workflows:\n  - name: a\n    commands: [echo a]\n    artifacts: ['{path}']\n")
    res = cli("headless", "run", "a", "--runner", "127.0.0.1:1", cwd=project)
    _one_line_error(res, 2, "workflows.yaml:4:", why)


def test_symlink_out_of_the_workspace_is_not_brought_back(agent, cli, make_project, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not leak")
    project = make_project(f"""
        workflows:
          - name: leak
            commands:
              - mkdir -p out
              - echo ok > out/ok.txt
              - ln -s {secret} out/leak.txt
              - ln -s {tmp_path} out/leakdir
            artifacts: [out]
        """)
    res = cli("headless", "run", "leak", "--runner", agent.address, cwd=project)
    assert res.returncode == 0, res.stderr
    assert "'out/leak.txt' is a link that leaves the workspace; skipped" in res.stderr
    assert "'out/leakdir' is a link that leaves the workspace; skipped" in res.stderr
    listing = cli("headless", "artifacts", "list", res.stderr.split()[1].rstrip(":"), check=True).stdout
    assert listing.split() == ["out/ok.txt"]


def test_unauthorized_key_is_refused(tmp_path, cli, make_project, controller_home):
    from tests.harness import start_agent

    a = start_agent(tmp_path / "stranger-agent", controller_home, authorize=False)
    try:
        project = make_project("workflows:\n  - name: a\n    commands: [echo a]\n")
        res = cli("headless", "run", "a", "--runner", a.address, cwd=project)
        _one_line_error(res, 3, "refused this controller's key", "app agent authorize")
        assert a.proc.poll() is None
    finally:
        a.stop()


def test_unreachable_runner(cli, make_project):
    project = make_project("workflows:\n  - name: a\n    commands: [echo a]\n")
    res = cli("headless", "run", "a", "--runner", "127.0.0.1:1", cwd=project)
    _one_line_error(res, 3, "cannot reach runner 127.0.0.1:1")


def test_bad_cli_arguments_are_one_line(cli):
    _one_line_error(cli("headless", "status", "--limit", "many"), 2, "invalid int value")
    _one_line_error(cli("headless", "frobnicate"), 2, "invalid choice")


# -- raw frames sent to the subsystem ------------------------------------------------


async def _open_channel(agent):
    key = load_or_create_client_key(ControllerHome.default().key)
    conn = await asyncssh.connect(
        agent.host, agent.port, username="x", client_keys=[key], known_hosts=None, agent_path=None, config=[]
    )
    proc = await conn.create_process(subsystem="lanpool", encoding=None)
    reader = FrameReader()
    return conn, proc, reader


async def _next(proc, reader, pending: list):
    while not pending:
        data = await asyncio.wait_for(proc.stdout.read(65536), 10)
        if not data:
            return None
        pending.extend(reader.feed(data))
    return decode_agent_message(pending.pop(0))


async def _garbage_session(agent) -> None:
    conn, proc, reader = await _open_channel(agent)
    pending: list = []
    hello = await _next(proc, reader, pending)
    assert hello.name == "test-runner"

    # A frame whose body is not MessagePack: error reply, channel stays usable.
    proc.stdin.write(struct.pack(">I", 6) + b"\xc1\xc1garb")
    err = await _next(proc, reader, pending)
    assert err.code == ErrorCode.BAD_FRAME

    # A well-formed frame of an unknown type.
    body = msgpack.packb({"t": "launch_missiles", "x": 1})
    proc.stdin.write(struct.pack(">I", len(body)) + body)
    assert (await _next(proc, reader, pending)).code == ErrorCode.UNKNOWN_MESSAGE

    # A known type with a mistyped field.
    body = msgpack.packb({"t": "stop", "job_id": 42})
    proc.stdin.write(struct.pack(">I", len(body)) + body)
    err = await _next(proc, reader, pending)
    assert err.code == ErrorCode.INVALID_MESSAGE and "job_id" in err.message

    proc.stdin.write(encode_message(Ping(7)))
    assert await _next(proc, reader, pending) == Pong(7)

    # An oversized length prefix: refused before any body, then the channel closes.
    proc.stdin.write(struct.pack(">I", MAX_FRAME_BYTES + 1))
    err = await _next(proc, reader, pending)
    assert err.code == ErrorCode.FRAME_TOO_LARGE
    assert await _next(proc, reader, pending) is None  # clean close
    conn.close()

    # Text where a frame should be (someone typing at the subsystem).
    conn, proc, reader = await _open_channel(agent)
    pending = []
    await _next(proc, reader, pending)
    proc.stdin.write(b"GET / HTTP/1.1\r\n\r\n")
    assert (await _next(proc, reader, pending)).code == ErrorCode.FRAME_TOO_LARGE
    conn.close()

    # The agent still serves a new connection.
    conn, proc, reader = await _open_channel(agent)
    pending = []
    await _next(proc, reader, pending)
    proc.stdin.write(encode_message(Ping(8)))
    assert await _next(proc, reader, pending) == Pong(8)
    conn.close()


def test_garbage_and_oversized_frames_get_error_replies(agent):
    asyncio.run(_garbage_session(agent))
    assert agent.proc.poll() is None


async def _sftp_refused(agent) -> None:
    key = load_or_create_client_key(ControllerHome.default().key)
    async with asyncssh.connect(
        agent.host, agent.port, username="x", client_keys=[key], known_hosts=None, agent_path=None, config=[]
    ) as conn:
        # An authorized controller gets no file API at all: the agent's private key and every
        # other file are out of reach because nothing serves paths.
        with pytest.raises((asyncssh.ChannelOpenError, asyncssh.SFTPError)):
            await conn.start_sftp_client()


def test_sftp_is_not_served(agent):
    asyncio.run(_sftp_refused(agent))


# -- the TUI's entry (`app [PATH]`) ------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--bogus",), "unknown option '--bogus'"),
        (("/no/such/dir",), "is not a directory"),
        (("one", "two"), "unexpected arguments"),
        ((), "the TUI needs a terminal"),  # stdin/stdout are pipes here
        (("--notify", "--bogus"), "unexpected arguments"),
        (("--notify-cmd", "no-such-program-here --x"), "--notify-cmd: no program 'no-such-program-here'"),
        (("--notify-cmd", "'unclosed"), "quote it as you would in a shell"),
        (("--notify", "--notify-cmd=true", "/no/such/dir"), "is not a directory"),
        (("--notify",), "the TUI needs a terminal"),
    ],
)
def test_app_entry_bad_input_is_one_line(cli, args, fragment):
    _one_line_error(cli(*args), 2, fragment)


def test_app_help_lists_the_tui_first(cli):
    res = cli("--help")
    assert res.returncode == 0 and res.stdout.startswith("usage: app [PATH]")


# -- the controller's home, --nodes, option prefixes, variables bash would evaluate ---------


def _app(home, *args: str, cwd=None):
    import subprocess
    import sys

    from tests.harness import lanpool_env

    return subprocess.run(
        [sys.executable, "-m", "lanpool.app.cli.main", *args],
        cwd=cwd,
        env=lanpool_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_lanpool_home_that_is_a_file_is_one_line(tmp_path):
    home = tmp_path / "home-file"
    home.write_text("not a directory")
    for verb in (("headless", "status"), ("headless", "key"), ("headless", "runners", "--wait", "0")):
        _one_line_error(
            _app(home, *verb), 2, f"LANPOOL_HOME={home} is a file, not a directory", "point LANPOOL_HOME at a directory"
        )
    assert home.read_text() == "not a directory"


@pytest.mark.parametrize("where", ["file/below", "/proc", "/proc/lanpool-nowhere"])
def test_lanpool_home_that_cannot_be_written_is_one_line(tmp_path, where):
    (tmp_path / "file").write_text("x")
    home = tmp_path / where if not where.startswith("/") else where  # /proc: a directory even root cannot write
    _one_line_error(
        _app(home, "headless", "status"), 2, f"LANPOOL_HOME={home} cannot be used", "point LANPOOL_HOME at a directory"
    )


@pytest.mark.parametrize("nodes", ["0", "-1", "many", "100000"])
def test_nodes_option_below_one_or_not_a_number_is_refused(cli, make_project, nodes):
    project = make_project("workflows:\n  - name: a\n    commands: [echo a]\n")
    res = cli("headless", "run", "a", "--nodes", nodes, "--runner", "127.0.0.1:1", cwd=project)
    _one_line_error(res, 2, "argument --nodes: expects a whole number of runners from 1 to", repr(nodes))


@pytest.mark.parametrize(
    ("nodes", "variables", "args"),
    [
        ("0", None, ()),
        ("-2", None, ()),
        ("$k", "variables:\n  a:\n    k: 0\n", ()),
        ("$k", "variables:\n  a:\n    k: 2\n", ("--k", "-1")),
    ],
)
def test_nodes_in_a_workflow_below_one_names_file_and_line(cli, make_project, nodes, variables, args):
    files = {".lanpool/variables.yaml": variables} if variables else None
    project = make_project(f"workflows:\n  - name: a\n    nodes: {nodes}\n    commands: [echo a]\n", files=files)
    res = cli("headless", "run", "a", *args, "--runner", "127.0.0.1:1", cwd=project)
    _one_line_error(res, 2, "workflows.yaml:3:", "'nodes' must be a whole number from 1 to")


def test_option_prefixes_are_not_options(cli, make_project):
    # `--run` was taken for `--runner` (and `--res` for `--resume`): now they are variables.
    project = make_project("workflows:\n  - name: a\n    commands: [echo a]\n")
    res = cli("headless", "run", "a", "--run", "127.0.0.1:1", cwd=project)
    _one_line_error(res, 2, "unknown variable --run for 'a'")
    _one_line_error(cli("headless", "status", "--lim", "3"), 2, "unrecognized arguments: --lim")
    agent = cli("agent", "serve", "--na", "x")  # argparse's own two lines (usage, error) there
    assert agent.returncode == 2 and "unrecognized arguments: --na" in agent.stderr, agent.stderr


ARITH = """
    workflows:
      - name: count
        commands:
          - echo start
          - (( $n > 0 )) && echo big
      - name: label
        commands:
          - echo "$(case $mode in fast) echo quick ;; *) echo "$mode" ;; esac)"
    """


def test_a_string_variable_bash_would_evaluate_is_refused_before_running(cli, make_project):
    project = make_project(ARITH, files={".lanpool/variables.yaml": "variables:\n  count:\n    n: '3'\n"})
    for verb in ("run", "plan"):
        res = cli("headless", verb, "count", *(["--runner", "127.0.0.1:1"] if verb == "run" else []), cwd=project)
        _one_line_error(
            res,
            2,
            "workflows.yaml:4: workflow 'count': command 2: $n is a string used inside (( ))",
            "make n a whole number in variables.yaml (n: 5)",
        )


def test_case_inside_command_substitution_runs_a_hostile_value_as_text(agent, cli, make_project):
    project = make_project(ARITH, files={".lanpool/variables.yaml": "variables:\n  label:\n    mode: fast\n"})
    res = cli("headless", "run", "label", "--mode", "a; touch pwned", "--runner", agent.address, cwd=project)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "a; touch pwned\n"
    assert not list(agent.data_dir.rglob("pwned")), "the value ran as a command"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("serve", "--pairing-ttl", "-1"), "-1 minutes: give more than 0"),
        (("serve", "--pairing-ttl", "nan"), "nan minutes: give more than 0"),
        (("serve", "--grace", "-3"), "-3 seconds: give at least 0"),
        (("serve", "--max-queued-per-controller", "0"), "0 jobs: give at least 1"),
        (("serve", "--max-queued-per-controller", "lots"), "'lots' is not a number of jobs"),
        (("pair", "--ttl", "0"), "0 minutes: give more than 0"),
        (("gc", "--keep-days", "-1"), "-1 days: give at least 0"),
        # A name controllers would refuse in the agent's hello: refused here, before it listens.
        (("serve", "--name", "/gpu"), "'/gpu': a runner's name must not start with '/'"),
        (("serve", "--name", "box\u202e"), "a runner's name holds control or invisible characters"),
        (("serve", "--name", "x" * 300), "a runner's name 300 characters, at most 256"),
    ],
)
def test_agent_option_values_are_checked_in_one_line(tmp_path, args, fragment):
    """A value that would make a broken agent (a pairing code expired before it is shown, a
    stop with a negative grace, a queue of none) is refused before anything starts."""
    res = _app(tmp_path / "home", "agent", *args, "--data-dir", str(tmp_path / "agent"))
    _one_line_error(res, 2, fragment)
    assert not (tmp_path / "agent" / "agent.json").exists()
