"""Cancelling a detached gang queued behind a busy runner from the TUI: `s` on
its row stops every member in its runners' queues. Pilot against real agents on loopback,
real SQLite; the helpers are test_tui's."""

import asyncio
import json

import pytest

pytest.importorskip("textual")

from lanpool.app.tui.dialogs.simple import ConfirmDialog  # noqa: E402
from lanpool.protocol import SubmitJob  # noqa: E402
from tests.harness import start_agent  # noqa: E402
from tests.integration import test_tui  # noqa: E402
from tests.integration.test_runner_gang import PAIR
from tests.runner_jobs import GANG_ENV
from tests.runner_jobs import job_log as _log  # noqa: E402
from tests.runner_jobs import open_session as _session  # noqa: E402
from tests.runner_jobs import submit_detached as _submit  # noqa: E402
from tests.unit.test_tui import SIZE, notes, pilot_test, tui, wait_until

no_unexpected_errors = test_tui.no_unexpected_errors  # test_tui's error check (autouse), here too


@pilot_test
async def test_s_on_a_detached_gang_queued_behind_a_busy_runner_cancels_every_member(
    tmp_path, controller_home, make_project, cli
):
    agents = [
        start_agent(
            tmp_path / f"n{k}", controller_home, name=f"node-{k}", extra_env=GANG_ENV, extra_args=("--no-mdns",)
        )
        for k in range(2)
    ]
    try:
        for a in agents:
            cli("headless", "runners", "add", a.address, check=True)
        project = make_project(PAIR)
        await _submit(agents[1], SubmitJob("busy", "r", "w", ["sleep 60"], resources={"cpu": 2}))
        out = await asyncio.to_thread(cli, "headless", "run", "pair", "-d", "--json", cwd=project, timeout=60)
        assert out.returncode == 0, out.stderr
        job_id = json.loads(out.stdout)["jobs"][0]["job_id"]

        app = tui(project)
        async with app.run_test(size=SIZE) as pilot:
            # The controller shows a detached gang RUNNING once every runner accepted it (app/jobs/submit.py),
            # though its members still wait in their queues.
            await wait_until(pilot, lambda: test_tui.job_status(app, job_id) != "", f"job {job_id} in the runs table")
            table = app.query_one("#runs-table")
            table.move_cursor(row=table.get_row_index(job_id), animate=False)
            await pilot.press("s")
            assert isinstance(app.screen, ConfirmDialog)
            await pilot.press("y")
            await wait_until(
                pilot, lambda: app.ctl.runs.job(job_id).state.is_terminal(), "the queued gang cancelled", timeout=30
            )
            job = app.ctl.runs.job(job_id)
            assert job.status in ("STOPPED", "ABORTED") and "cancelled while queued" in (job.error or ""), job
            await wait_until(pilot, lambda: any(m.startswith(f"job {job_id}: ") for m, _ in notes(app)), "the outcome")
        for a in agents:  # both runners' queues are empty of it; it never ran
            async with await _session(a) as s:
                member = await s.status(job_id)
                assert member.state in ("STOPPED", "ABORTED") and member.started_at is None, member
                assert "must not run" not in await _log(s, job_id)
        async with await _session(agents[1]) as s:
            assert (await s.status("busy")).state == "RUNNING"
    finally:
        for a in agents:
            a.stop()
