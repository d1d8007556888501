"""A one-time sshd's directory left behind by a killed agent (its session script holds the job's
environment) is removed by the next agent: agent/shell/sshd.py sweep_stale, and the hostile
look-alikes it must leave alone.
The in-process part (unit); the rest: tests/integration/test_shell_sshd_sweep.py."""

from lanpool.agent.shell.sshd import sweep_stale


def test_an_unreadable_base_removes_nothing(tmp_path):
    assert sweep_stale(str(tmp_path / "missing")) == []
