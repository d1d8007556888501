"""The controller's disk fills (LANPOOL_HOME on a small tmpfs): `run` ends in one line saying
so, exits non-zero, and loses nothing the store already held; a job whose end could not be
recorded is recorded by the next `status` once there is room.

The tmpfs is mounted in a mount namespace of the test's own (`unshare --mount --propagation
private`, as tests/netns_python does), so nothing of it leaks. Mounting needs root: elsewhere
this test skips. A full file system, not SQLite's max_page_count: the writes that fail are
every write the controller makes (its store, its WAL, its caches)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import lanpool_env, write_project

pytestmark = pytest.mark.timeout(300)

WORKFLOWS = """
workflows:
  - name: quick
    commands: [echo quick]
  - name: slow
    commands:
      - echo started
      - sleep 6
      - echo finished
"""

# Runs inside the namespace: the tmpfs is LANPOOL_HOME, seeded with the controller's key.
SCRIPT = r"""
set -u
mount -t tmpfs -o size=8m tmpfs "$H" || exit 99
cp -a "$SEED"/. "$H"/
app() { "$PY" -m lanpool.app.cli.main headless "$@"; }
fill() { cat /dev/zero > "$H/fill" 2>/dev/null; true; }
step() { name=$1; shift; "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"; echo $? >"$OUT/$name.rc"; }
cd "$PROJECT"
step first app run quick --runner "$ADDR"
fill
step full app run quick --runner "$ADDR"
step listed app status --no-refresh --json
rm -f "$H/fill"
app run slow --runner "$ADDR" >"$OUT/during.out" 2>"$OUT/during.err" &
pid=$!
for _ in $(seq 600); do grep -q started "$OUT/during.out" 2>/dev/null && break; sleep 0.1; done
fill
wait $pid; echo $? >"$OUT/during.rc"
rm -f "$H/fill"
step after app status --json
step logs app logs "$(head -1 "$OUT/during.err" | cut -d' ' -f2 | tr -d :)"
"""


def _result(out: Path, name: str) -> tuple[int, str, str]:
    return int((out / f"{name}.rc").read_text()), (out / f"{name}.out").read_text(), (out / f"{name}.err").read_text()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="mounting a tmpfs needs root and unshare")
def test_a_full_disk_under_lanpool_home_ends_run_in_one_line(agent, controller_home, tmp_path):
    project = write_project(tmp_path / "project", WORKFLOWS)
    home, out = tmp_path / "small-home", tmp_path / "out"
    home.mkdir()
    out.mkdir()
    env = lanpool_env(
        home,
        H=str(home),
        SEED=str(controller_home),
        PY=sys.executable,
        OUT=str(out),
        PROJECT=str(project),
        ADDR=agent.address,
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if done.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    assert not os.path.ismount(home)  # the mount stayed in the namespace
    rc, stdout, _ = _result(out, "first")
    assert rc == 0 and stdout == "quick\n"

    # The disk full before `run` starts: its run cannot be created.
    for name in ("full", "listed"):
        rc, stdout, stderr = _result(out, name)
        assert rc == 1 and stdout == "", (name, stdout)
        _one_line_saying_full(stderr, home)

    # The disk fills while a job runs: its log and its end cannot be stored.
    rc, stdout, stderr = _result(out, "during")
    assert rc == 1 and "started" in stdout, (stdout, stderr)
    lines = stderr.splitlines()
    assert lines[0].startswith("run ")  # the run's own first line, then the one error
    # Where the log's lines were refused first (a race with the job's end), the run said so as it
    # went on: "could not store log lines yet: ..." (app/store/log_batch.py), then kept them to retry.
    refused = [line for line in lines[1:] if line.startswith("could not store log lines yet: ")]
    assert all("disk is full" in line for line in refused), stderr
    _one_line_saying_full("\n".join(line for line in lines[1:] if line not in refused), home)

    # With room again, nothing stored before is lost and the job's end is recorded.
    rc, stdout, stderr = _result(out, "after")
    assert rc == 0, stderr
    runs = {r["workflow"]: r["jobs"][0] for r in json.loads(stdout)}
    assert set(runs) == {"quick", "slow"}
    assert runs["quick"]["status"] == "DONE" and runs["slow"]["status"] == "DONE" and runs["slow"]["exit_code"] == 0
    rc, stdout, stderr = _result(out, "logs")
    assert rc == 0 and stdout.splitlines() == ["started", "finished"], (stdout, stderr)


def _one_line_saying_full(stderr: str, home: Path) -> None:
    assert "Traceback" not in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith(f"app: error: the disk holding {home} is full") and "free space there" in stderr, stderr
