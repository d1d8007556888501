"""`app headless status` reads a few queries whatever the number of runs: what it
shows stays what docs/cli.md says (runs newest first, `-n` of them, every job of each; `--json`
with each job's warnings and artifacts), and a pull under way is still shown."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lanpool.app.store import Store
from lanpool.protocol import JobState

REPO = Path(__file__).resolve().parents[2]
RUNS = 30


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """RUNS runs, made at known times (two at the very same time), with 1 or 2 jobs each;
    some jobs have warnings, some artifact files."""
    home = tmp_path / "home"
    home.mkdir()
    store = Store(home / "lanpool.db")
    try:
        for r in range(RUNS):
            name = f"run-{r:02d}"
            store.create_run(name, "train", "/proj")
            store.conn.execute("UPDATE runs SET created_at = ? WHERE name = ?", (1000.0 + min(r, RUNS - 2), name))
            for k in range(1 + r % 2):
                job = f"j{r:02d}{k}"
                store.create_job(job, name, "train", {"name": "r", "host": "127.0.0.1", "port": 1}, {})
                store.set_job_status(job, JobState.DONE, exit_code=0, finished_at=2000.0, synced=1)
                if r % 3 == 0:
                    store.add_warning(job, f"artifact 'out-{job}' was not produced")
                if r % 4 == 0:
                    store.set_artifacts(job, [(f"b-{job}.bin", 10 + r), (f"a-{job}.txt", 1)])
    finally:
        store.close()
    return home


def _app(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), LANPOOL_HOME=str(home))
    return subprocess.run(
        [sys.executable, "-m", "lanpool.app.cli.main", "headless", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_status_shows_the_newest_runs_each_with_all_its_jobs(home):
    out = _app(home, "status", "--no-refresh")
    assert out.returncode == 0, out.stderr
    # RUN PROJECT JOB ...
    rows = [line.split()[0:3:2] for line in out.stdout.splitlines()[1:] if line.startswith("run-")]
    runs = list(dict.fromkeys(run for run, _job in rows))
    # Newest first, 20 by default; the last two were made at the same time: each shown once.
    assert runs[:2] in (["run-28", "run-29"], ["run-29", "run-28"])
    assert runs[2:] == [f"run-{r:02d}" for r in range(27, 9, -1)]
    assert sorted(job for _run, job in rows) == sorted(
        f"j{r:02d}{k}" for r in range(10, RUNS) for k in range(1 + r % 2)
    )
    assert sum("warning: job" in line for line in out.stdout.splitlines()) == sum(
        1 + r % 2 for r in range(10, RUNS) if r % 3 == 0
    )
    few = _app(home, "status", "--no-refresh", "-n", "3")
    assert len({line.split()[0] for line in few.stdout.splitlines()[1:] if line.startswith("run-")}) == 3


def test_status_json_has_every_job_with_its_warnings_and_artifacts(home):
    out = _app(home, "status", "--no-refresh", "--json", "-n", "1000")
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    assert len(listed) == RUNS and [r["run"] for r in listed][2:5] == ["run-27", "run-26", "run-25"]
    store = Store(home / "lanpool.db")
    try:
        for run in listed:
            expected = store.jobs_of_run(run["run"])
            assert [j["job"] for j in run["jobs"]] == [j.id for j in expected]
            for j in run["jobs"]:  # what the per-job reads say, job by job
                assert j["warnings"] == store.warnings(j["job"])
                assert [(a["path"], a["size"]) for a in j["artifacts"]] == store.artifacts(j["job"])
    finally:
        store.close()
    assert any(j["warnings"] for r in listed for j in r["jobs"])
    assert any(len(j["artifacts"]) == 2 for r in listed for j in r["jobs"])


# Runs `app headless ARGS...` in-process (stdout kept) and says which of lanpool's modules it loaded.
PROBE = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from lanpool.app.cli.headless import main
    out = io.TextIOWrapper(io.BytesIO())  # `logs` writes to sys.stdout.buffer
    with contextlib.redirect_stdout(out):
        rc = main(sys.argv[1:])
        out.flush()
    text = out.buffer.getvalue().decode()
    print(json.dumps({"rc": rc, "out": text, "modules": sorted(m for m in sys.modules if m.startswith("lanpool.app."))}))
    """
)


def _probe(home: Path, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), LANPOOL_HOME=str(home))
    out = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def _unpulled(home: Path) -> None:
    """run-29's first job ended but its artifacts are not back yet."""
    store = Store(home / "lanpool.db")
    try:
        store.conn.execute("UPDATE jobs SET artifacts_pulled = 0, synced = 0 WHERE id = 'j290'")
    finally:
        store.close()


def test_a_pull_under_way_is_shown(home):
    """A pull's state on disk (left by a pull cut off): status asks how far it is."""
    from lanpool.app.transfer.pull import _meta, pull_percent, staging_dir

    _unpulled(home)
    store_dir = home / "artifacts"
    staging_dir(store_dir, "j290").mkdir(parents=True)
    (staging_dir(store_dir, "j290") / "m.bin").write_bytes(b"x" * 40)
    _meta(store_dir, "j290").write_text(json.dumps({"total": 100}))
    assert pull_percent(store_dir, "j290") == 40
    got = _probe(home, "status", "--no-refresh")
    assert got["rc"] == 0
    assert "pulling artifacts 40%" in next(line for line in got["out"].splitlines() if "j290" in line)


def test_a_status_with_no_pull_under_way_does_not_load_the_artifact_stack(home):
    """The attack on the test above: the same job with no pull's state on disk is shown as
    it is, and neither `status` nor `logs` imports the artifact stack (~50 ms)."""
    _unpulled(home)
    got = _probe(home, "status", "--no-refresh")
    line = next(line for line in got["out"].splitlines() if "j290" in line)
    assert "DONE (0)" in line and "pulling" not in line
    assert "lanpool.app.transfer.files" not in got["modules"] and "lanpool.app.transfer.artifacts" not in got["modules"]
    logs = _probe(home, "logs", "run-28")
    assert logs["rc"] == 0 and "lanpool.app.transfer.files" not in logs["modules"]


def test_a_long_name_is_cut_in_its_column_not_widening_every_line(tmp_path: Path):
    """A workflow or runner name longer than its column (stored before names were bounded at load)
    ends in `...`; `--json` keeps it whole."""
    home = tmp_path / "long"
    home.mkdir()
    store = Store(home / "lanpool.db")
    long = "w" * 300
    try:
        store.create_run("short-run", long, "/proj")
        store.create_job("j1", "short-run", long, {"name": "r" * 200, "host": "127.0.0.1", "port": 1}, {})
        store.set_job_status("j1", JobState.DONE, exit_code=0, finished_at=2000.0, synced=1)
    finally:
        store.close()
    res = _app(home, "status", "--no-refresh")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines) < 200, lines
    assert "w" * 37 + "..." in lines[1] and "w" * 41 not in lines[1]
    assert "r" * 37 + "..." in lines[1]
    assert json.loads(_app(home, "status", "--json", "--no-refresh").stdout)[0]["workflow"] == long
