"""Into a running job: exec, a shell on a PTY, forwarded ports. Real agents, real asyncssh
clients and the real `app` CLI; each door is tried from where it must stay shut too
(a pairing connection, a job that ended, an undeclared port, a plain exec).
The in-process part (unit); the rest: tests/integration/test_job_shell.py, tests/system/test_job_shell.py."""

import asyncssh

from lanpool.agent.shell.into_job import parse_exec
from lanpool.protocol.wire import exec_command


def test_only_the_one_exec_grammar_parses():
    assert parse_exec("lanpool-exec job1 -- echo 'a b'").argv == ("echo", "a b")
    assert parse_exec("lanpool-exec job1").argv == ()
    for bad in (
        "cat /etc/passwd",
        "lanpool-exec",
        "lanpool-exec ../x -- ls",
        "lanpool-exec j1 ls",
        "lanpool-exec j1 --",
        "lanpool-exec 'j1",
        "lanpool-exec j1 -- a\0b",
        "lanpool-exec\tj1 x",
        "lanpool-exec j1 --node",
        "lanpool-exec j1 --node -1 -- ls",
        "lanpool-exec j1 --node 1.5 -- ls",
        "lanpool-exec j1 --node ١ -- ls",  # a digit to str.isdigit, not a node number
        "lanpool-exec j1 --node 4096 -- ls",
        "lanpool-exec j1 --node 99999999999999999999999 -- ls",
        "lanpool-exec j1 --node 1 --node 2 -- ls",
        "lanpool-exec j1 --sshd ssh-ed25519:x --node 1 -- ls",
    ):
        assert parse_exec(bad) is None, bad


def test_a_node_of_the_runners_job_is_named_by_the_grammar():
    request = parse_exec(exec_command("j1", ["echo", "hi"], node=3))
    assert request is not None and request.node == 3 and request.argv == ("echo", "hi")
    assert parse_exec(exec_command("j1", [])).node is None
    assert parse_exec("lanpool-exec j1 -- ls --node 1").node is None  # after `--` it is the command's
    key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().split()[1]
    both = parse_exec(exec_command("j1", ["ls"], node=0, sshd_key=f"ssh-ed25519:{key}"))
    assert both is not None and both.node == 0 and both.sshd_key == key and both.argv == ("ls",)
