"""A job's dev sshd (agent/shell/dev_sshd.py): the `--dev-sshd` grammar, the sshd_config it writes
(forwarding to the job's declared ports only, sftp only as an external server, everything else
off) and its dispatcher against hostile environments and commands, run by a real /bin/sh.
The in-process part (unit); the rest, with a real OpenSSH client and agent: tests/integration/test_dev_ssh.py."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import asyncssh
import pytest

from lanpool.agent.shell.dev_sshd import (
    dev_config,
    dev_script,
    load_or_create_host_key,
    sftp_server_path,
)
from lanpool.agent.shell.into_job import parse_exec
from lanpool.protocol import Hello, ProtocolError
from lanpool.protocol.messages import PROTOCOL_VERSION
from lanpool.protocol.schema import build
from lanpool.protocol.wire import exec_command

KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().split()[1]


def test_the_dev_request_is_the_one_grammar_with_a_key_and_no_command():
    request = parse_exec(exec_command("j1", [], dev_sshd_key=f"ssh-ed25519:{KEY}"))
    assert request is not None and request.dev and request.sshd_key == KEY and request.argv == ()
    on_node = parse_exec(exec_command("j1", [], node=2, dev_sshd_key=f"ssh-ed25519:{KEY}"))
    assert on_node is not None and on_node.dev and on_node.node == 2
    assert not parse_exec(exec_command("j1", [], sshd_key=f"ssh-ed25519:{KEY}")).dev
    for bad in (
        f"lanpool-exec j1 --dev-sshd ssh-ed25519:{KEY} -- ls",  # what runs is each ssh session's to say
        f"lanpool-exec j1 --dev-sshd ssh-ed25519:{KEY} --sshd ssh-ed25519:{KEY}",
        f"lanpool-exec j1 --sshd ssh-ed25519:{KEY} --dev-sshd ssh-ed25519:{KEY}",
        f"lanpool-exec j1 --dev-sshd ssh-ed25519:{KEY} --dev-sshd ssh-ed25519:{KEY}",
        f"lanpool-exec j1 --dev-sshd ssh-rsa:{KEY}",
        "lanpool-exec j1 --dev-sshd",
        f"lanpool-exec j1 --dev-sshd ssh-ed25519:{KEY} --node 1",
    ):
        assert parse_exec(bad) is None, bad


def test_hello_carries_the_dev_sshd_fields_within_bounds():
    hello = Hello(PROTOCOL_VERSION, "1", "box", sshd_user="alice", sshd_host_key=KEY)
    body = {
        "protocol_version": PROTOCOL_VERSION,
        "agent_version": "1",
        "name": "box",
        "sshd_user": "alice",
        "sshd_host_key": KEY,
    }
    assert build(Hello, body, "hello") == hello
    assert build(Hello, {k: v for k, v in body.items() if not k.startswith("sshd")}, "hello").sshd_user == ""
    for field, bad in (
        ("sshd_user", "-oProxyCommand=sh"),
        ("sshd_user", "a b"),
        ("sshd_user", "x" * 40),
        ("sshd_host_key", KEY + "\nlanpool-runner-x ssh-ed25519 " + KEY),
        ("sshd_host_key", KEY[:-1] + " "),
    ):
        with pytest.raises(ProtocolError):
            build(Hello, {**body, field: bad}, "hello")


def _config(ports, sftp="/usr/lib/openssh/sftp-server") -> dict[str, str]:
    text = dev_config(
        host_key=Path("/d/dev-sshd-host-key"),
        authorized_keys=Path("/w/authorized_keys"),
        user="alice",
        ports=ports,
        sftp_server=sftp,
        script=Path("/w/dev.sh"),
        login_grace_s=15,
    )
    lines = [line.split(" ", 1) for line in text.splitlines() if line]
    names = [name for name, _ in lines]
    assert len(names) == len(set(names)), "sshd takes the first of two lines: none is given twice"
    return dict(lines)


def test_the_config_forwards_to_the_declared_ports_only_and_nothing_else():
    config = _config([8888, 6006, 8888])
    assert config["AllowTcpForwarding"] == "local"  # -L and -W, never -R
    assert config["PermitOpen"] == "127.0.0.1:6006 localhost:6006 127.0.0.1:8888 localhost:8888"
    for name, value in {
        "PermitListen": "none",
        "GatewayPorts": "no",
        "AllowStreamLocalForwarding": "no",
        "AllowAgentForwarding": "no",
        "X11Forwarding": "no",
        "PermitTunnel": "no",
        "PermitUserEnvironment": "no",
        "PermitUserRC": "no",
        "PasswordAuthentication": "no",
        "KbdInteractiveAuthentication": "no",
        "AuthenticationMethods": "publickey",
        "AllowUsers": "alice",
        "HostKey": "/d/dev-sshd-host-key",
        "ForceCommand": "/bin/sh /w/dev.sh",  # every session, subsystems too, through the dispatcher
        "Subsystem": "sftp /usr/lib/openssh/sftp-server",  # external: it runs in the job, as the job's user
    }.items():
        assert config[name] == value, name
    assert "internal-sftp" not in json.dumps(config)
    assert "ChrootDirectory" not in config


def test_no_declared_port_means_no_forwarding_and_no_sftp_server_no_subsystem():
    config = _config([], sftp=None)
    assert config["AllowTcpForwarding"] == "no" and config["PermitOpen"] == "none"
    assert "Subsystem" not in config


def test_sftp_server_is_found_where_the_distribution_put_it(tmp_path):
    missing, there = tmp_path / "nope", tmp_path / "sftp-server"
    there.write_text("#!/bin/sh\n")
    there.chmod(0o755)
    assert sftp_server_path([str(missing), str(there)]) == str(there)
    assert sftp_server_path([str(missing)]) is None


def test_the_host_key_is_made_once_private_and_kept(tmp_path):
    path = tmp_path / "dev-sshd-host-key"
    first = load_or_create_host_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_host_key(path) == first
    assert asyncssh.import_public_key(f"ssh-ed25519 {first}").algorithm == b"ssh-ed25519"
    assert not list(tmp_path.glob("*.tmp"))


HOSTILE_ENV = {
    "PLAIN": "x",
    "QUOTES": 'it\'s "quoted" `touch pwned1` $(touch pwned2) ;touch pwned3',
    "NEWLINE": "line1\nline2",
    "EMPTY": "",
    "TERM": "dumb-from-job",  # the client's TERM wins
    "SSH_CONNECTION": "from the job",  # the client's wins
    "BAD=NAME": "dropped",
    "-i": "env would read it as an option",
    "PATH": os.environ["PATH"],
}


def _dispatch(tmp_path: Path, prefix: list[str], client_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "job dir's $(touch pwned4)"
    work.mkdir(exist_ok=True)
    script = tmp_path / "dev.sh"
    script.write_text(dev_script(HOSTILE_ENV, work, prefix))
    return subprocess.run(
        ["/bin/sh", str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=client_env,
        stdin=subprocess.DEVNULL,
        timeout=30,
    )


def _no_side_effects(tmp_path: Path) -> None:
    assert not [p for p in tmp_path.rglob("pwned*")], "a value was evaluated by a shell"


def test_the_dispatcher_runs_the_clients_command_with_the_jobs_env_only(tmp_path):
    show = "import os, json; print(json.dumps([dict(os.environ), os.getcwd()]))"
    command = f"{sys.executable} -c '{show}'"
    got = _dispatch(
        tmp_path,
        [],
        {"SSH_ORIGINAL_COMMAND": command, "TERM": "xterm-test", "SSH_CONNECTION": "1 2 3 4", "AGENT_SECRET": "no"},
    )
    assert got.returncode == 0, got.stderr
    env, cwd = json.loads(got.stdout)
    assert cwd.endswith("job dir's $(touch pwned4)")
    assert {k: env[k] for k in ("PLAIN", "QUOTES", "NEWLINE", "EMPTY")} == {
        k: HOSTILE_ENV[k] for k in ("PLAIN", "QUOTES", "NEWLINE", "EMPTY")
    }
    assert env["TERM"] == "xterm-test" and env["SSH_CONNECTION"] == "1 2 3 4"
    assert "AGENT_SECRET" not in env  # sshd's environment stops at the dispatcher
    assert "SSH_ORIGINAL_COMMAND" not in env
    assert not any(k.startswith("BAD") or k == "-i" for k in env)
    _no_side_effects(tmp_path)


def test_the_clients_command_reaches_the_sandbox_prefix_as_one_word_unexpanded(tmp_path):
    """Whatever the client sends is only an argument after the prefix (the sandbox's nsenter and
    setpriv in real life): here a prefix that records its argv, so nothing of it runs."""
    record = tmp_path / "argv.json"
    prefix = [sys.executable, "-c", f"import sys, json; json.dump(sys.argv[1:], open({str(record)!r}, 'w'))"]
    hostile = "touch pwned5; $(touch pwned6) `touch pwned7` \"'\n touch pwned8"
    got = _dispatch(tmp_path, prefix, {"SSH_ORIGINAL_COMMAND": hostile})
    assert got.returncode == 0, got.stderr
    assert json.loads(record.read_text()) == ["/bin/sh", "-c", hostile]
    _no_side_effects(tmp_path)


def test_no_command_is_a_shell_interactive_only_on_a_terminal(tmp_path):
    record = tmp_path / "argv.json"
    prefix = [sys.executable, "-c", f"import sys, json; json.dump(sys.argv[1:], open({str(record)!r}, 'w'))"]
    got = _dispatch(tmp_path, prefix, {"SSH_ORIGINAL_COMMAND": ""})
    assert got.returncode == 0, got.stderr
    assert json.loads(record.read_text()) == ["bash"]  # stdin is not a terminal here
