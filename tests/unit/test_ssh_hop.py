"""The ProxyCommand of `ssh-config` entries (app/shell/ssh_hop.py), its in-process parts: the
system ssh it runs to the agent, reading the offer line, and what reaches the user's terminal of
what a runner says (hostile input). With a real agent and OpenSSH: tests/integration/test_dev_ssh.py."""

import socket

import pytest

from lanpool.app.shell.ssh_hop import PROXY_FAILED, HopError, main, offered_port, outer_ssh, read_offer, said

KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIOYxWf1Mtm6FznXvhg2EY5c6zmpGCIFBrX5S7zaQXQ2L"


def test_the_outer_ssh_takes_nothing_from_the_users_config_and_pins_the_agent():
    argv = outer_ssh("/home/a b", "-oProxyCommand=evil", 7422, "lanpool-agent-box", "lanpool-exec j --dev-sshd k")
    assert argv[:3] == ["ssh", "-F", "/dev/null"]  # no ~/.ssh/config: no ProxyJump, ControlMaster of theirs
    options = dict(argv[i + 1].split("=", 1) for i, word in enumerate(argv) if word == "-o")
    assert options["StrictHostKeyChecking"] == "yes" and options["HostKeyAlias"] == "lanpool-agent-box"
    assert (
        options["UserKnownHostsFile"] == "/home/a b/ssh/known_hosts" and options["GlobalKnownHostsFile"] == "/dev/null"
    )
    assert options["IdentitiesOnly"] == "yes" and options["IdentityAgent"] == "none" and options["BatchMode"] == "yes"
    assert options["ForwardAgent"] == "no" and options["ClearAllForwardings"] == "yes"
    # A host that looks like an option stays a host: it comes after `--`.
    assert argv[-3:] == ["--", "-oProxyCommand=evil", "lanpool-exec j --dev-sshd k"]


def test_an_offer_gives_its_port_and_anything_else_is_one_line():
    assert offered_port(f"lanpool-sshd 40123 alice {KEY}\n".encode(), b"", "runner x") == 40123
    with pytest.raises(HopError, match="offers no dev sshd"):
        offered_port(b"lanpool-sshd -\n", b"", "runner x")
    with pytest.raises(HopError, match="does not exist on this runner"):
        offered_port(b"", b"some banner\njob j does not exist on this runner\n", "runner x")
    with pytest.raises(HopError, match="pinned key is not the one it showed"):
        offered_port(b"", b"Host key verification failed.\r\n", "runner x")
    with pytest.raises(HopError, match="not an offer"):
        offered_port(f"lanpool-sshd 0 alice {KEY}\n".encode(), b"", "runner x")  # port 0
    with pytest.raises(HopError, match="closed the connection"):
        offered_port(b"", b"", "runner x")


def test_what_a_runner_says_reaches_the_terminal_without_escapes_and_bounded():
    hostile = b"\x1b]0;owned\x07\x1b[2J" + b"A" * 5000 + b"\n"
    text = said(hostile)
    assert "\x1b" not in text and "\x07" not in text and len(text) <= 300
    with pytest.raises(HopError) as err:
        offered_port(b"", hostile, "runner x")
    assert "\x1b" not in str(err.value) and "\n" not in str(err.value)


def test_the_offer_is_read_to_its_newline_and_no_further():
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(f"lanpool-sshd 40123 alice {KEY}\nSSH-2.0-OpenSSH".encode())
        assert read_offer(ours) == f"lanpool-sshd 40123 alice {KEY}\n".encode()
        assert ours.recv(100) == b"SSH-2.0-OpenSSH"  # sshd's banner is left for ssh
        theirs.sendall(b"x" * 1000)  # no newline within the bound: not an offer
        assert len(read_offer(ours)) == 256
        theirs.close()
        ours.recv(1000)
        assert read_offer(ours) == b""


def test_wrong_arguments_are_one_line(capsys):
    assert main(["only-one"]) == PROXY_FAILED
    err = capsys.readouterr().err
    assert err.startswith("lanpool: usage:") and err.count("\n") == 1
    assert main(["/h", "host", "not-a-port", "alias", "exec"]) == PROXY_FAILED
