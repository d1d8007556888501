"""Usage on a real agent (two GPUs faked at the edge, LANPOOL_FAKE_GPUS) through the real CLI:
`app agent usage` on the runner, `app headless usage` on the controller, across an agent
restart. The in-process part: tests/unit/test_usage.py."""

import json

from tests.harness import default_runner_name, start_agent, stored_jobs

WORKFLOWS = """
workflows:
  - name: one-gpu
    resources: {gpu: 1}
    commands: ["sleep 2"]
  - name: two-gpus
    resources: {gpu: 2}
    commands: ["sleep 1"]
"""

FAKE_GPUS = {"LANPOOL_FAKE_GPUS": "0,1"}
A_SECOND = 1 / 3600  # in hours


def _agent_usage(cli, data_dir, *args: str) -> dict:
    return json.loads(cli("agent", "usage", "--json", "--data-dir", str(data_dir), *args, check=True).stdout)


def _gpu_hours(entries: list[dict]) -> float:
    """sum(duration x GPUs) from the jobs' own start and end times, as the runner recorded them."""
    return sum((e["finished_at"] - e["started_at"]) * e["gpus"] for e in entries) / 3600


def test_usage_is_duration_times_gpus_on_both_sides_and_survives_a_restart(
    tmp_path, controller_home, cli, make_project
):
    data_dir = tmp_path / "agent"
    name = default_runner_name("usage-box")
    agent = start_agent(data_dir, controller_home, name=name, extra_env=FAKE_GPUS)
    try:
        cli("headless", "runners", "add", agent.address, check=True)
        project = make_project(WORKFLOWS)
        for workflow in ("one-gpu", "two-gpus"):
            cli("headless", "run", workflow, "--runner", agent.address, cwd=project, check=True)

        usage = _agent_usage(cli, data_dir)
        entries = usage["entries"]
        assert sorted((e["workflow"], e["gpus"], e["state"]) for e in entries) == [
            ("one-gpu", 1, "DONE"),
            ("two-gpus", 2, "DONE"),
        ]
        total = usage["total"]
        assert total["jobs"] == 2 and abs(total["gpu_hours"] - _gpu_hours(entries)) < 1e-9
        assert total["cpu_hours"] == 0  # neither asked for CPUs
        [owner] = usage["rows"]  # one controller key, with the label it was authorized with
        assert owner["owner"].startswith("SHA256:") and owner["jobs"] == 2
        # The controller stored the same jobs with the runner's times: the sum agrees.
        stored = {j["workflow"]: j for j in stored_jobs(controller_home)}
        asked = {"one-gpu": 1, "two-gpus": 2}
        expected = sum((j["finished_at"] - j["started_at"]) * asked[w] for w, j in stored.items()) / 3600
        assert abs(total["gpu_hours"] - expected) <= 3 * A_SECOND

        mine = json.loads(cli("headless", "usage", "--json", check=True).stdout)
        [row] = [r for r in mine["rows"] if r["runner"] == name]
        assert row["jobs"] == 2 and abs(row["gpu_hours"] - total["gpu_hours"]) <= 3 * A_SECOND
        by_workflow = json.loads(cli("headless", "usage", "--json", "--by", "workflow", check=True).stdout)
        assert {r["workflow"]: r["jobs"] for r in by_workflow["rows"]} == {"one-gpu": 1, "two-gpus": 1}
        table = cli("headless", "usage", "--by", "run", check=True).stdout
        assert "GPU-HOURS" in table and "total" in table

        # The agent stopped: its usage is read from the file all the same.
        agent.stop()
        stopped = _agent_usage(cli, data_dir, "--by", "workflow")
        assert {r["workflow"]: r["jobs"] for r in stopped["rows"]} == {"one-gpu": 1, "two-gpus": 1}
        assert abs(stopped["total"]["gpu_hours"] - total["gpu_hours"]) < 1e-9

        # A crash between a job's usage line and its journal: the journal still says it runs, so
        # the next start settles it again (LOST) and writes a second line. It still counts once.
        [redone] = [e for e in entries if e["workflow"] == "one-gpu"]
        record_file = data_dir / "jobs" / redone["job_id"] / "job.json"
        record = json.loads(record_file.read_text())
        record.update(state="RUNNING", finished_at=None, exit_code=None, pid=None)
        record_file.write_text(json.dumps(record))
        agent = start_agent(data_dir, controller_home, authorize=False, name=name, port=agent.port, extra_env=FAKE_GPUS)
        lines = (data_dir / "usage.jsonl").read_text().splitlines()
        assert [json.loads(line)["job_id"] for line in lines].count(redone["job_id"]) == 2
        after = _agent_usage(cli, data_dir)
        assert after["total"]["jobs"] == 2
        again = {e["job_id"]: e for e in after["entries"]}
        assert again[redone["job_id"]]["state"] == "LOST"  # the last line: what the journal says now
        assert again[redone["job_id"]]["started_at"] == redone["started_at"]
        assert abs(after["total"]["gpu_hours"] - _gpu_hours(after["entries"])) < 1e-9
    finally:
        agent.stop()

    for args in (
        ("agent", "usage", "--data-dir", str(data_dir), "--since", "0s"),
        ("agent", "usage", "--data-dir", str(data_dir), "--since", "last tuesday"),
        ("agent", "usage", "--data-dir", str(data_dir), "--by", "gpu"),
        ("headless", "usage", "--since", "0s"),
        ("headless", "usage", "--since", "30x"),
        ("headless", "usage", "--by", "owner"),
    ):
        bad = cli(*args)
        assert bad.returncode == 2, bad
        assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
