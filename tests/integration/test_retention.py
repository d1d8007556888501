"""Removing runs (`app headless rm`/`prune`, app/runs/retention.py): real SQLite, real files, the real CLI.
The part with real agents and the CLI (integration); the rest: tests/unit/test_retention.py."""

import json

from lanpool.app.controller import Controller
from lanpool.app.home import ControllerHome
from tests.unit.test_retention import (
    _run,
    ctl,  # noqa: F401 (fixtures, used by name)
)


def test_cli_rm_prune_json_and_refusals(cli, controller_home):
    ctl = Controller(ControllerHome(controller_home))
    try:
        _run(ctl, "cli-run", {"j1": "DONE"}, age_days=10, files={"f": b"z" * 2048})
        _run(ctl, "cli-busy", {"j2": "RUNNING"})
    finally:
        ctl.close()
    dry = cli("headless", "prune", "--older-than", "7d", "--dry-run", "--json", check=True)
    assert json.loads(dry.stdout)["runs"] == ["cli-run"] and json.loads(dry.stdout)["artifact_bytes"] == 2048
    busy = cli("headless", "rm", "cli-busy")
    assert busy.returncode == 2 and busy.stderr.count("\n") == 1 and "stop it first" in busy.stderr
    assert "Traceback" not in busy.stderr
    unknown = cli("headless", "rm", "nope")
    assert unknown.returncode == 4 and "no run or job named 'nope'" in unknown.stderr
    bad_age = cli("headless", "prune", "--older-than", "soon")
    assert bad_age.returncode == 2 and "expects an age like 12h, 7d or 2w" in bad_age.stderr
    gone = cli("headless", "rm", "cli-run", check=True)
    assert "removed 1 run(s) (cli-run), 1 job(s), 1 artifact file(s): freed 2.0 KiB" in gone.stderr
    assert not (controller_home / "artifacts" / "j1").exists()
    status = json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout)
    assert [r["run"] for r in status] == ["cli-busy"]
