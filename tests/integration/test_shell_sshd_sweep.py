"""A one-time sshd's directory left behind by a killed agent (its session script holds the job's
environment) is removed by the next agent: agent/shell/sshd.py sweep_stale, and the hostile
look-alikes it must leave alone.
The part with real agents and the CLI (integration); the rest: tests/unit/test_shell_sshd_sweep.py."""

import os
import subprocess
import sys
from pathlib import Path

from lanpool.agent.shell.sshd import sweep_stale
from tests.harness import start_agent


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # reaped: no process has it (until the kernel hands it out again)


def _session_dir(base: Path, pid: int, tail: str = "abc123") -> Path:
    d = base / f"lanpool-sshd-{pid}-{tail}"
    d.mkdir(mode=0o700)
    (d / "session.sh").write_text("export SECRET=hunter2\n")
    return d


def test_a_dead_agents_directory_goes_and_a_live_ones_stays(tmp_path):
    dead = _session_dir(tmp_path, _dead_pid())
    live = _session_dir(tmp_path, os.getpid())
    assert sweep_stale(str(tmp_path)) == [dead.name]
    assert not dead.exists()
    assert (live / "session.sh").exists()


def test_look_alikes_are_left_alone(tmp_path):
    pid = _dead_pid()
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("x")
    (tmp_path / f"lanpool-sshd-{pid}-link").symlink_to(target)  # a link is never followed
    (tmp_path / f"lanpool-sshd-{pid}-file").write_text("not a directory")
    other = tmp_path / f"lanpool-sshd-{pid}-x.y"  # not a name mkdtemp makes
    other.mkdir()
    older = tmp_path / "lanpool-sshd-abcdefgh"  # an older agent's name: no pid to check
    older.mkdir()
    assert sweep_stale(str(tmp_path)) == []
    assert (target / "keep").exists()
    assert (tmp_path / f"lanpool-sshd-{pid}-link").is_symlink()
    assert other.exists() and older.exists()


def test_an_agent_starting_removes_what_a_killed_one_left(tmp_path, controller_home):
    base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path(os.environ.get("TMPDIR", "/tmp"))
    # Every agent sweeps the same place, at its start and at each sshd offer: another test's agent
    # (xdist runs them side by side; a dev sshd offers one per ssh) may take the directory first.
    # Then it is gone but not in this agent's log, and the test tries again.
    for attempt in range(3):
        left = _session_dir(base, _dead_pid(), f"test{attempt}_" + tmp_path.name[-8:].replace("-", "_"))
        try:
            agent = start_agent(tmp_path / f"agent{attempt}", controller_home)
            try:
                assert not left.exists()
                if left.name in agent.log_tail():
                    return
            finally:
                agent.stop()
        finally:
            if left.exists():
                for f in left.iterdir():
                    f.unlink()
                left.rmdir()
    raise AssertionError("3 times, another agent removed the directory before this one could")
