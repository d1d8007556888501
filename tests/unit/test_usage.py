"""Usage (`app agent usage`, `app headless usage`): the runner's ledger written at a job's end and
read back as untrusted, each job's hours within the window, grouped; the controller's from its
store. The in-process part (unit); real agents and the CLI: tests/integration/test_usage.py."""

import json
import math
import stat
import time
from pathlib import Path

import pytest

from lanpool.agent import cli as agent_cli
from lanpool.agent.home import AgentHome
from lanpool.agent.jobs.end import settle
from lanpool.agent.jobs.job import Job
from lanpool.agent.jobs.journal import JobRecord
from lanpool.agent.jobs.usage import (
    MAX_LINE_BYTES,
    parse_line,
    parse_window,
    read_usage,
    record_usage,
    render,
    summarize,
    window_text,
)
from lanpool.agent.retention import collect
from lanpool.agent.workspace.spool import LogSpool
from lanpool.app.cli.usage_verbs import window_seconds
from lanpool.app.errors import UsageError
from lanpool.app.store import Store
from lanpool.app.views.usage import usage_of
from lanpool.protocol import JobState

T0 = 1_700_000_000.0
HOUR = 3600.0


def _record(job_id: str, *, started: float | None = T0, finished: float | None = T0 + HOUR, **kw) -> JobRecord:
    fields = {
        "owner": "SHA256:alice",
        "owner_label": "alice@laptop",
        "gpus": [0],
        "gpu_count": 1,
        "cpus": 4.0,
        "memory_mb": 1024,
        "state": JobState.DONE,
        **kw,
    }
    return JobRecord(
        job_id=job_id,
        run_name="run-" + job_id,
        workflow=kw.pop("workflow", "train"),
        commands=["true"],
        env={},
        artifacts=[],
        started_at=started,
        finished_at=finished,
        **{k: v for k, v in fields.items() if k != "workflow"},
    )


def _ledger(tmp_path: Path) -> Path:
    return tmp_path / "usage.jsonl"


def test_a_line_per_job_that_ran_0600_and_none_for_one_that_never_started(tmp_path):
    ledger = _ledger(tmp_path)
    assert record_usage(ledger, _record("a", gpus=[0, 1], gpu_count=2))
    assert record_usage(ledger, _record("never", started=None))  # stopped while queued: it used nothing
    assert stat.S_IMODE(ledger.stat().st_mode) == 0o600
    [entry] = read_usage(ledger, 0, T0 + 10 * HOUR)
    assert (entry.job_id, entry.owner, entry.label, entry.workflow, entry.run) == (
        "a",
        "SHA256:alice",
        "alice@laptop",
        "train",
        "run-a",
    )
    assert (entry.gpus, entry.cpus, entry.memory_mb, entry.state) == (2, 4.0, 1024, "DONE")
    assert (entry.started_at, entry.finished_at) == (T0, T0 + HOUR)


def test_totals_are_duration_times_resources_clipped_to_the_window(tmp_path):
    ledger = _ledger(tmp_path)
    record_usage(ledger, _record("two-gpus", gpus=[0, 1], cpus=8.0, finished=T0 + 2 * HOUR))
    record_usage(ledger, _record("no-cpus", gpus=[2], cpus=0.0, started=T0 + HOUR, finished=T0 + 1.5 * HOUR))
    record_usage(ledger, _record("before", started=T0 - 3 * HOUR, finished=T0 - 2 * HOUR))
    since, until = T0 + HOUR, T0 + 10 * HOUR  # two-gpus started before: counted from `since`
    entries = read_usage(ledger, since, until)
    assert [e.job_id for e in entries] == ["no-cpus", "two-gpus"]  # in the order they ended; `before` out
    report = summarize(entries, "owner", since, until)
    assert report.total.jobs == 2
    assert math.isclose(report.total.gpu_hours, 2 * 1.0 + 1 * 0.5)
    assert math.isclose(report.total.cpu_hours, 8 * 1.0 + 0)  # a job that asked no CPU counts none
    assert math.isclose(report.total.wall_hours, 1.5)
    out = report.to_json()
    assert {e["job_id"]: e["hours"] for e in out["entries"]} == {"no-cpus": 0.5, "two-gpus": 1.0}


def test_rows_by_owner_and_by_workflow_most_gpu_hours_first(tmp_path):
    ledger = _ledger(tmp_path)
    record_usage(ledger, _record("a1", owner="SHA256:alice", owner_label="alice", workflow="train"))
    record_usage(ledger, _record("b1", owner="SHA256:bob", owner_label="bob", workflow="eval", gpus=[0, 1, 2]))
    record_usage(ledger, _record("a2", owner="SHA256:alice", owner_label="alice-new", workflow="eval"))
    entries = read_usage(ledger, 0, T0 + 10 * HOUR)
    by_owner = summarize(entries, "owner", 0, T0 + 10 * HOUR).to_json()["rows"]
    assert [(r["owner"], r["label"], r["jobs"], r["gpu_hours"]) for r in by_owner] == [
        ("SHA256:bob", "bob", 1, 3.0),
        ("SHA256:alice", "alice-new", 2, 2.0),  # one row per key, its latest label
    ]
    by_workflow = summarize(entries, "workflow", 0, T0 + 10 * HOUR).to_json()["rows"]
    assert [(r["workflow"], r["jobs"], r["gpu_hours"]) for r in by_workflow] == [("eval", 2, 4.0), ("train", 1, 1.0)]


def test_a_job_settled_twice_counts_once_the_last_line_winning(tmp_path):
    """A crash between the line and the journal: the restart settles the job again (LOST)."""
    ledger = _ledger(tmp_path)
    record_usage(ledger, _record("a", finished=T0 + HOUR))
    record_usage(ledger, _record("a", finished=T0 + 2 * HOUR, state=JobState.LOST))
    [entry] = read_usage(ledger, 0, T0 + 10 * HOUR)
    assert (entry.state, entry.finished_at) == ("LOST", T0 + 2 * HOUR)
    # The last line wins even where it falls outside the window: the earlier one is not the truth.
    record_usage(ledger, _record("b", finished=T0 + HOUR))
    record_usage(ledger, _record("b", started=T0 - 9 * HOUR, finished=T0 - 8 * HOUR))
    assert [e.job_id for e in read_usage(ledger, T0, T0 + 10 * HOUR)] == ["a"]


def test_hostile_lines_are_skipped_and_the_rest_counted(tmp_path):
    ledger = _ledger(tmp_path)
    record_usage(ledger, _record("good-1"))
    good = json.loads(ledger.read_text())
    bad = [
        b"[1, 2, 3]",
        b'"a string"',
        b"not json at all",
        b"\xff\xfe not utf-8",
        json.dumps({**good, "job_id": "t1", "gpus": "2"}).encode(),  # wrong types
        json.dumps({**good, "job_id": "t2", "gpus": True}).encode(),
        json.dumps({**good, "job_id": "t3", "cpus": None}).encode(),
        json.dumps({**good, "job_id": "t4", "label": 7}).encode(),
        json.dumps({**good, "job_id": ""}).encode(),
        json.dumps({**good, "job_id": "t5", "gpus": -1}).encode(),
        json.dumps({**good, "job_id": "t6", "gpus": 10**30}).encode(),
        json.dumps({**good, "job_id": "t7", "finished_at": good["started_at"] - 1}).encode(),
        json.dumps({k: v for k, v in {**good, "job_id": "t8"}.items() if k != "state"}).encode(),
        json.dumps({**good, "job_id": "t9", "cpus": float("nan")}).encode(),  # NaN: Python's json reads it
        json.dumps({**good, "job_id": "t10", "started_at": 1e300}).encode(),
    ]
    with open(ledger, "ab") as f:
        for line in bad:
            f.write(line + b"\n")
        f.write(b'{"job_id": "huge", "label": "' + b"x" * (10 * 1024 * 1024) + b'"}\n')  # a 10 MB line
        f.write(b"\n")
        f.write(json.dumps({**good, "job_id": "cut"}).encode()[:40])  # a crash cut the last line
    assert [e.job_id for e in read_usage(ledger, 0, T0 + 10 * HOUR)] == ["good-1"]
    # The next line starts on a line of its own: the cut one does not swallow it.
    record_usage(ledger, _record("good-2", finished=T0 + 2 * HOUR))
    assert [e.job_id for e in read_usage(ledger, 0, T0 + 10 * HOUR)] == ["good-1", "good-2"]
    assert parse_line(b"x" * MAX_LINE_BYTES) is None


def test_names_are_clipped_on_read_and_shown_terminal_safe(tmp_path):
    ledger = _ledger(tmp_path)
    hostile = "\x1b]52;c;cHduZWQ=\x07\x1b[2J\u202eevil" + "y" * 1000
    record_usage(ledger, _record("a", owner_label=hostile, workflow="w\x9bx"))
    [entry] = read_usage(ledger, 0, T0 + 10 * HOUR)
    assert len(entry.label) <= 256
    report = summarize([entry], "owner", 0, T0 + 10 * HOUR)
    text = render(report, tmp_path)
    assert not any(c in text for c in "\x1b\x07\x9b\u202e") and "evil" in text
    assert max(len(line) for line in text.splitlines()) < 200  # clipped
    by_workflow = render(summarize([entry], "workflow", 0, T0 + 10 * HOUR), tmp_path)
    assert "\x9b" not in by_workflow and "w?x" in by_workflow
    assert "\x1b" not in json.dumps(report.to_json())  # JSON escapes it


def test_the_window_is_an_age_and_never_empty():
    assert parse_window("30d") == 30 * 86400 and parse_window(" 2w ") == 14 * 86400
    assert window_text(30 * 86400) == "30d" and window_text(90) == "90s"
    for bad in ("0s", "0d", "30", "1.5h", "-1d", "yesterday", ""):
        with pytest.raises(ValueError):
            parse_window(bad)
    assert window_seconds("12h") == 12 * 3600
    for bad in ("0s", "soon"):
        with pytest.raises(UsageError, match="--since"):
            window_seconds(bad)


def _job(home: AgentHome, record: JobRecord) -> Job:
    job_dir = home.job_dir(record.job_id)
    job_dir.mkdir(parents=True)
    return Job(record, job_dir, LogSpool(job_dir / "log.spool"))


def test_a_jobs_end_writes_its_line_and_a_retry_does_not(tmp_path):
    home = AgentHome(tmp_path / "agent")
    home.create()
    now = time.time()
    ended = _job(home, _record("ended", started=now - 5, finished=None, state=JobState.RUNNING))
    settle(ended, JobState.FAILED, 1, "exited with code 1", home.usage_ledger)
    retried = _job(
        home,
        _record("retried", started=now - 5, finished=None, state=JobState.RUNNING, retry_on=["failure"], retry_limit=2),
    )
    settle(retried, JobState.FAILED, 1, "exited with code 1", home.usage_ledger)
    assert retried.record.state == JobState.QUEUED  # back in the queue: not an end
    [entry] = read_usage(home.usage_ledger, now - 60, time.time() + 60)
    assert (entry.job_id, entry.state, entry.finished_at) == ("ended", "FAILED", ended.record.finished_at)
    assert JobRecord.load(home.job_dir("ended")).finished_at == entry.finished_at


def test_gc_removes_finished_jobs_and_keeps_their_usage(tmp_path):
    home = AgentHome(tmp_path / "agent")
    home.create()
    record = _record("old", started=time.time() - 5 * 86400, finished=time.time() - 4 * 86400)
    _job(home, record)
    record.save(home.job_dir("old"))
    record_usage(home.usage_ledger, record)
    report = collect(home, keep_days=1, max_size=None)
    assert report.jobs_removed == ["old"] and not home.job_dir("old").exists()
    assert [e.job_id for e in read_usage(home.usage_ledger, 0, time.time())] == ["old"]


def test_agent_usage_reads_the_file_without_an_agent(tmp_path, capsys):
    home = AgentHome(tmp_path / "agent")
    home.create()
    now = time.time()
    record_usage(home.usage_ledger, _record("a", started=now - 2 * HOUR, finished=now - HOUR, gpus=[0, 1]))
    assert agent_cli.main(["usage", "--data-dir", str(home.root), "--json", "--since", "1d"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total"]["jobs"] == 1 and math.isclose(out["total"]["gpu_hours"], 2.0)
    assert agent_cli.main(["usage", "--data-dir", str(home.root), "--by", "workflow"]) == 0
    text = capsys.readouterr().out
    assert "WORKFLOW" in text and "train" in text and "2.000" in text
    with pytest.raises(SystemExit) as exit_:
        agent_cli.main(["usage", "--data-dir", str(home.root), "--since", "0s"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "empty window" in err


# -- the controller's, from its store ------------------------------------------------------------


def _runner(name: str) -> dict:
    return {"name": name, "host": "10.0.0.1", "port": 7422}


def _stored(store: Store, job_id: str, run: str, workflow: str, runners: list[str], spec: dict, start, end) -> None:
    if not store.run_name_taken(run):
        store.create_run(run, workflow, "/proj")
    store.create_job(job_id, run, workflow, _runner(runners[0]), spec)
    for node, name in enumerate(runners):
        store.set_node(job_id, node, _runner(name), JobState.DONE, 0)
    store.set_job_status(job_id, JobState.DONE, started_at=start, finished_at=end)


def test_the_controller_counts_each_node_with_the_resources_asked(tmp_path):
    store = Store(tmp_path / "lanpool.db")
    now = T0 + 100 * HOUR
    _stored(store, "one", "r1", "train", ["a"], {"resources": {"gpu": 1, "cpu": 4}}, now - 2 * HOUR, now - HOUR)
    gang = {"nodes": 2, "resources": {"gpu": 2}}
    _stored(store, "gang", "r2", "train", ["a", "b"], gang, now - 3 * HOUR, now - HOUR)  # 2 nodes x 2 GPUs
    bad = {"resources": {"gpu": "lots", "cpu": True, "memory_mb": [1]}}
    _stored(store, "bad-spec", "r3", "eval", ["b"], bad, now - HOUR, now)
    store.conn.execute("UPDATE jobs SET spec = '{not json' WHERE id = 'one'")  # as stored by anything
    _stored(store, "old", "r0", "train", ["a"], {"resources": {"gpu": 8}}, now - 50 * HOUR, now - 49 * HOUR)
    store.create_job("queued", "r3", "eval", _runner("b"), {"resources": {"gpu": 1}})  # never ran
    # The window: the last 3 hours (`old` ended before it).
    by_runner = usage_of(store, 3 * HOUR, "runner", now=now).to_json()
    rows = {r["runner"]: r for r in by_runner["rows"]}
    assert rows["a"]["jobs"] == 2 and rows["b"]["jobs"] == 2
    assert math.isclose(rows["a"]["gpu_hours"], 2 * 2 + 0)  # the gang's node 0; `one`'s spec unreadable: 0
    assert math.isclose(rows["b"]["gpu_hours"], 2 * 2)  # the gang's node 1; bad-spec's GPUs no count: 0
    total = by_runner["total"]
    assert total["jobs"] == 3 and math.isclose(total["gpu_hours"], 8.0)
    assert math.isclose(total["wall_hours"], 1 + 2 + 1)  # a job's time once, not once per node
    assert math.isclose(total["cpu_hours"], 0)  # `one`'s spec unreadable; bad-spec's `true` is no count
    assert {(n["job_id"], n["node"]) for n in by_runner["nodes"]} == {
        ("one", 0),
        ("gang", 0),
        ("gang", 1),
        ("bad-spec", 0),
    }
    by_run = {r["run"]: r for r in usage_of(store, 3 * HOUR, "run", now=now).to_json()["rows"]}
    assert math.isclose(by_run["r2"]["gpu_hours"], 8.0) and by_run["r2"]["jobs"] == 1
    # A window of 90 minutes clips the gang to its last half hour, on both nodes.
    by_workflow = usage_of(store, 1.5 * HOUR, "workflow", now=now).to_json()["rows"]
    assert [(r["workflow"], r["jobs"]) for r in by_workflow] == [("train", 2), ("eval", 1)]
    assert math.isclose(by_workflow[0]["gpu_hours"], 2 * 2 * 0.5)
    store.close()
