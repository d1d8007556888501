"""A job's shell through the runner's one-time sshd (agent/shell/sshd.py, app/shell/sshd.py): the
real client on a terminal, then the offer tried by hand from where it must stay shut (another
key, a forwarding, a stranger's connection, a malformed key in the request) and the session's
command script against hostile values.
The in-process part (unit); the rest: tests/integration/test_shell_sshd.py, tests/system/test_shell_sshd.py."""

import json
import os
import shutil
import subprocess

import asyncssh
import pytest

from lanpool.agent.shell.into_job import parse_exec
from lanpool.agent.shell.sshd import _same_host, _session_script
from lanpool.app.shell.sshd import sshd_command
from lanpool.protocol.shell_sshd import key_blob_b64, parse_offer_line

pytestmark = pytest.mark.skipif(
    shutil.which("sshd", path="/usr/sbin:/usr/local/sbin:/sbin") is None or shutil.which("ssh") is None,
    reason="needs OpenSSH's sshd and ssh (apt-get install openssh-server openssh-client; scripts/test does)",
)


def test_the_request_takes_only_an_ed25519_key_in_its_one_form():
    good = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().split()[1]
    assert parse_exec(sshd_command("j1", [], good)).sshd_key == good
    assert parse_exec(sshd_command("j1", ["ls", "-l"], good)).argv == ("ls", "-l")
    rsa = asyncssh.generate_private_key("ssh-rsa", key_size=1024).export_public_key().decode().split()[1]
    for bad in [
        f"ssh-rsa:{good}",
        rsa,  # an RSA blob where an ed25519 one must be
        good[:-4],
        good + "AAAA",
        good.replace("A", "-", 1) if "A" in good else "-" + good[1:],
        f'{good} command="sh"',  # options smuggled into authorized_keys
        f"{good}\nssh-ed25519 {good}",
    ]:
        assert key_blob_b64(bad) is None, bad
        assert parse_exec(f"lanpool-exec j1 --sshd {bad!r}") is None, bad
    assert parse_exec("lanpool-exec j1 --sshd") is None
    assert parse_offer_line(b"lanpool-sshd 22 root AAAA\n") is None
    assert parse_offer_line(b"lanpool-sshd 22 r;oot " + good.encode() + b"\n") is None
    assert parse_offer_line(b"lanpool-sshd 22 -oProxyCommand=sh " + good.encode() + b"\n") is None
    assert parse_offer_line(b"lanpool-sshd 70000 root " + good.encode() + b"\n") is None
    assert parse_offer_line(b"lanpool-sshd 22 root " + good.encode() + b"\n") == (22, "root", good)


def test_the_session_script_quotes_every_value_and_deletes_itself(tmp_path):
    hostile = {
        "PLAIN": "x",
        "QUOTES": 'it\'s "quoted" `not run` $(touch pwned) ;rm -rf /',
        "NEWLINE": "line1\nline2",
        "EMPTY": "",
        "TERM": "dumb-from-job",  # the client's TERM wins
        "BAD=NAME": "dropped",
        "PATH": os.environ["PATH"],
    }
    work = tmp_path / "job dir's"
    work.mkdir()
    script = tmp_path / "session.sh"
    show = "import os, json; print(json.dumps([dict(os.environ), os.getcwd()]))"
    script.write_text(_session_script(hostile, work, ("python3", "-c", show)))
    got = subprocess.run(
        ["/bin/sh", str(script)], capture_output=True, text=True, cwd=tmp_path, env={"TERM": "xterm-test"}, timeout=30
    )
    assert got.returncode == 0, got.stderr
    env, cwd = json.loads(got.stdout)
    assert cwd == str(work)
    assert {k: env[k] for k in ("PLAIN", "QUOTES", "NEWLINE", "EMPTY")} == {
        k: hostile[k] for k in ("PLAIN", "QUOTES", "NEWLINE", "EMPTY")
    }
    assert env["TERM"] == "xterm-test"
    assert "BAD" not in env and "BAD=NAME" not in env
    assert not script.exists()
    assert not (tmp_path / "pwned").exists() and not (work / "pwned").exists()


def test_addresses_compare_across_ipv4_mapped_forms():
    assert _same_host("127.0.0.1", "::ffff:127.0.0.1")
    assert not _same_host("127.0.0.1", "127.0.0.2")
    assert _same_host("fe80::1", "fe80:0::1")
