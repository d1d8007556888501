"""`app headless ssh-config`'s text and files (app/shell/ssh_config.py): the Host entry of a running
job, quoting of a home with spaces and `%`, the pinned host keys, and `--install`'s Include line.
The in-process part (unit); the rest (OpenSSH's own parser reading it, `ssh -G`; a real agent): tests/integration/test_dev_ssh.py."""

import shlex
import stat
from pathlib import Path

import pytest

from lanpool.app.errors import UsageError
from lanpool.app.shell.ssh_config import (
    HOP,
    HostEntry,
    aliases,
    host_entry,
    install_include,
    pin,
    pinned,
    runner_alias,
    write_ssh_config,
)

KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIOYxWf1Mtm6FznXvhg2EY5c6zmpGCIFBrX5S7zaQXQ2L"
CLIENT = "AAAAC3NzaC1lZDI1NTE5AAAAIJdZ/66wSCDZxlFAfNW5oJ/nnBynn1xTweus9oRCovdl"


def _entry(**kw) -> HostEntry:
    fields = {
        "aliases": ("lanpool-train-3", "lanpool-j-abc"),
        "job_id": "j-abc",
        "node": 0,
        "runner": "gpu-box",
        "user": "alice",
        "host_key": KEY,
        "host": "10.0.0.7",
        "port": 7422,
        "agent_key": f"ssh-ed25519 {KEY}",
    }
    return HostEntry(**{**fields, **kw})


def test_aliases_are_the_run_and_the_job_and_a_node_suffix():
    assert aliases("train-3", "j-abc", 0, True) == ("lanpool-train-3", "lanpool-j-abc")
    assert aliases("train-3", "j-abc", 2, True) == ("lanpool-train-3-2", "lanpool-j-abc-2")
    assert aliases("train-3", "j-abc", 0, False) == ("lanpool-j-abc",)  # the run has several running jobs
    assert aliases("my run*", "j-abc", 0, True) == ("lanpool-j-abc",)  # not a plain Host pattern


def test_runner_aliases_are_plain_words_and_distinct():
    assert runner_alias("gpu-box") == "lanpool-runner-gpu-box"
    odd = runner_alias("Bob's box *")
    assert " " not in odd and "*" not in odd and "'" not in odd
    assert odd != runner_alias("Bob_s box *") and runner_alias("Bob_s_box__") != odd


def test_the_entry_pins_the_runner_uses_our_key_and_the_proxy(tmp_path):
    home = tmp_path / "lan pool %h"
    text = host_entry(_entry(), home, "/opt/py 3/bin/python", CLIENT)
    lines = [line.strip() for line in text.splitlines()]
    assert lines[0] == "Host lanpool-train-3 lanpool-j-abc"
    options = dict(line.split(" ", 1) for line in lines[1:])
    assert options["User"] == "alice"
    assert options["HostKeyAlias"] == "lanpool-runner-gpu-box"
    assert options["StrictHostKeyChecking"] == "yes"
    assert options["IdentitiesOnly"] == "yes" and options["IdentityAgent"] == "none"
    assert options["ForwardAgent"] == "no" and options["ForwardX11"] == "no"
    # `%` doubled (ssh expands tokens there), spaces kept by double quotes.
    assert options["IdentityFile"] == f'"{tmp_path}/lan pool %%h/id_ed25519"'
    assert options["UserKnownHostsFile"] == f'"{tmp_path}/lan pool %%h/ssh/known_hosts"'
    # The hop (standard library only: -I -S), the agent's address and pinned alias, the dev offer.
    proxy = shlex.split(options["ProxyCommand"].replace("%%", "%"))
    assert proxy == [
        "/opt/py 3/bin/python",
        "-I",
        "-S",
        str(HOP),
        str(home),
        "10.0.0.7",
        "7422",
        "lanpool-agent-gpu-box",
        f"lanpool-exec j-abc --dev-sshd ssh-ed25519:{CLIENT}",
    ]
    assert options["ProxyUseFdpass"] == "yes"
    # Node K's entry goes to node K's runner: the request names the job only.
    assert "--node" not in host_entry(_entry(node=1), home, "python", CLIENT)
    assert "ControlMaster" not in host_entry(_entry(), home, "python", CLIENT, control_master=False)


def test_a_long_home_puts_the_control_sockets_in_dot_ssh(tmp_path):
    text = host_entry(_entry(), tmp_path / ("x" * 90), "python", CLIENT)
    assert 'ControlPath "~/.ssh/lanpool-cm-%C"' in text
    assert 'ControlPath "/short/ssh/cm-%C"' in host_entry(_entry(), Path("/short"), "python", CLIENT)


def test_a_home_with_a_double_quote_or_newline_is_refused(tmp_path):
    for bad in ('a"b', "a\nb"):
        with pytest.raises(UsageError):
            host_entry(_entry(), tmp_path / bad, "python", CLIENT)


def test_pin_replaces_the_runners_line_and_keeps_the_others(tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(f"lanpool-runner-a ssh-ed25519 {KEY}\nlanpool-runner-b ssh-ed25519 OLD\n")
    pin(known, "lanpool-runner-b", KEY)
    assert known.read_text() == f"lanpool-runner-a ssh-ed25519 {KEY}\nlanpool-runner-b ssh-ed25519 {KEY}\n"
    assert pinned(known, "lanpool-runner-b") == KEY and pinned(known, "lanpool-runner-c") is None


def test_install_puts_the_include_first_once_and_keeps_the_rest(tmp_path):
    user_config = tmp_path / "dot-ssh" / "config"
    home = tmp_path / "lan pool"
    assert install_include(home, user_config)
    assert user_config.read_text().splitlines()[0] == f'Include "{home}/ssh/config"'
    assert stat.S_IMODE(user_config.parent.stat().st_mode) == 0o700
    user_config.write_text(user_config.read_text() + "Host mine\n    User me\n")
    before = user_config.read_text()
    assert not install_include(home, user_config)  # there already: nothing added
    assert user_config.read_text() == before

    theirs = tmp_path / "theirs"
    theirs.write_text("Host box\n    HostName 10.0.0.2\n")
    assert install_include(home, theirs)
    lines = theirs.read_text().splitlines()
    assert lines[0] == f'Include "{home}/ssh/config"' and lines[-2:] == ["Host box", "    HostName 10.0.0.2"]


def test_install_writes_through_a_linked_config(tmp_path):
    target = tmp_path / "dotfiles" / "ssh_config"
    target.parent.mkdir()
    target.write_text("Host x\n")
    link = tmp_path / "dot-ssh" / "config"
    link.parent.mkdir()
    link.symlink_to(target)
    assert install_include(tmp_path / "home", link)
    assert link.is_symlink() and target.read_text().startswith("Include ")


def test_a_long_home_makes_dot_ssh_for_the_control_sockets(tmp_path, monkeypatch):
    # ssh makes no directory for a ControlPath: with none, every `ssh lanpool-RUN` would fail.
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    (tmp_path / "user").mkdir()
    home = tmp_path / ("x" * 90)
    write_ssh_config(home, [_entry()], "python", CLIENT)
    assert stat.S_IMODE((tmp_path / "user" / ".ssh").stat().st_mode) == 0o700
    known = (home / "ssh" / "known_hosts").read_text().splitlines()
    assert known == [f"lanpool-runner-gpu-box ssh-ed25519 {KEY}", f"lanpool-agent-gpu-box ssh-ed25519 {KEY}"]
