"""The TUI's Run dialog with env overrides and secrets, and cancelling a job queued on
its runner. Pilot against real agents on loopback, real SQLite.
The helpers and the shared agent are test_tui's."""

import json

import pytest

pytest.importorskip("textual")

from textual.widgets import Input, Label, Static  # noqa: E402

from lanpool.app.home import ControllerHome  # noqa: E402
from lanpool.app.keys import load_or_create_client_key  # noqa: E402
from lanpool.app.runners.client import RunnerSession  # noqa: E402
from lanpool.app.tui.dialogs.run_dialog import RunDialog  # noqa: E402
from lanpool.app.tui.dialogs.simple import ConfirmDialog  # noqa: E402
from tests.harness import start_agent  # noqa: E402
from tests.integration import test_tui  # noqa: E402
from tests.integration.test_tui import errors, known_runner, log_texts, type_into, wait_status
from tests.unit.test_tui import SIZE, notes, pilot_test, tui, wait_until

# test_tui's fixtures (pytest finds them by name here): its agent for the module, the error check.
shared_agent = test_tui.shared_agent
agent = test_tui.agent
no_unexpected_errors = test_tui.no_unexpected_errors

WORKFLOWS = """
workflows:
  - name: show
    env: {GREETING: from-the-workflow, KEPT: kept}
    commands: ['echo "greeting=$GREETING kept=$KEPT extra=$EXTRA"']
  - name: token
    env: {TOKEN: "${{ secrets.API_TOKEN }}"}
    commands: ['echo "token=$TOKEN"']
  - name: twosecrets
    env: {TOKEN: "${{ secrets.API_TOKEN }}", OTHER: "${{ secrets.NOT_SET_HERE }}"}
    commands: ['echo "never runs"']
"""
SECRET = "s3cr3t-value-of-the-token"


async def open_dialog(pilot, workflow: str) -> RunDialog:
    app = pilot.app
    await pilot.press("r")
    dialog = await wait_until(pilot, lambda: isinstance(app.screen, RunDialog) and app.screen, "the Run dialog")
    dialog.query_one("#workflow").value = workflow
    await wait_until(pilot, lambda: dialog.workflow == workflow, f"workflow {workflow} picked")
    return dialog


def dialog_text(dialog: RunDialog, selector: str) -> str:
    return str(dialog.query_one(selector, Static).render())


def screen_texts(app) -> str:
    """Every label, static and input value on the screen now: where a secret must never show."""
    parts = [str(w.render()) for w in app.screen.query(Static)] + [w.value for w in app.screen.query(Input)]
    return "\n".join(parts)


@pilot_test
async def test_env_override_from_the_run_dialog_reaches_the_job(agent, make_project):
    await known_runner(agent)
    app = tui(make_project(WORKFLOWS))
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(pilot, "show")
        await type_into(pilot, "#env", "GREETING='hello there' EXTRA=x=1")
        await wait_until(pilot, lambda: "RUN" in dialog_text(dialog, "#plan"), "the plan with the env")
        await pilot.press("ctrl+r")
        line = "greeting=hello there kept=kept extra=x=1"  # over the workflow's env, the rest kept
        await wait_until(pilot, lambda: line in log_texts(app), "the overridden env in the job's log")
        [run] = app.ctl.runs.recent()
        assert run.workflow == "show"


@pilot_test
async def test_bad_env_is_one_line_in_the_dialog_and_nothing_runs(agent, make_project):
    await known_runner(agent)
    app = tui(make_project(WORKFLOWS))
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(pilot, "show")
        for text, expected in [
            ("NOEQUALS", "expected KEY=VALUE"),
            ("LANPOOL_JOB_ID=forged", "set by lanpool"),
            ("MASTER_ADDR=10.0.0.1", "set by lanpool"),
            ("'1BAD=x'", "not an environment variable name"),
            ("A='unclosed", "quotation"),
        ]:
            await type_into(pilot, "#env", text)
            await pilot.press("ctrl+r")
            await pilot.pause(0.2)
            assert app.screen is dialog, f"{text!r} was accepted"
            error = str(dialog.query_one("#run-error", Label).render())
            assert error.startswith("env: ") and expected in error, (text, error)
        assert app.ctl.runs.job_lines() == []


@pilot_test
async def test_secrets_are_shown_set_or_missing_never_their_value(agent, make_project):
    await known_runner(agent)
    app = tui(make_project(WORKFLOWS), errors_expected=True)
    app.ctl.secrets.set("API_TOKEN", SECRET)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(pilot, "twosecrets")
        await wait_until(pilot, lambda: "secrets:" in dialog_text(dialog, "#secrets"), "the secrets line")
        shown = dialog_text(dialog, "#secrets")
        assert "API_TOKEN set" in shown and "NOT_SET_HERE missing" in shown, shown
        assert "secrets set NOT_SET_HERE" in shown
        # The plan names the missing secret too; nothing on screen holds the value.
        await wait_until(pilot, lambda: "NOT_SET_HERE" in dialog_text(dialog, "#plan"), "the plan's refusal")
        assert SECRET not in screen_texts(app)

        # An env override that drops the missing secret's variable: nothing missing any more.
        await type_into(pilot, "#env", "OTHER=plain")
        await wait_until(pilot, lambda: "missing" not in dialog_text(dialog, "#secrets"), "the secret no more used")
        await type_into(pilot, "#env", "")
        await wait_until(pilot, lambda: "missing" in dialog_text(dialog, "#secrets"), "missing again")

        await pilot.press("ctrl+r")  # the controller refuses before anything is sent: one clear line
        [message] = await wait_until(pilot, lambda: errors(app), "the missing secret's error")
        assert "secret 'NOT_SET_HERE' is not set on this controller" in message, message
        assert "app headless secrets set NOT_SET_HERE" in message
        assert app.ctl.runs.job_lines() == []
        assert app.is_running

        # The set one runs, its value masked in the log shown.
        dialog = await open_dialog(pilot, "token")
        assert "API_TOKEN set" in dialog_text(dialog, "#secrets") and SECRET not in screen_texts(app)
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: "token=***" in log_texts(app), "the masked token in the log")
        assert not any(SECRET in line for line in log_texts(app))
        assert SECRET not in screen_texts(app)


# -- cancel a job queued on its runner --------------------------------------------

QUEUE_WORKFLOWS = """
workflows:
  - name: big
    resources: {cpu: 2}
    commands: ["echo start $LANPOOL_JOB_ID", "sleep 30"]
"""


async def _runner_status(runner, job_id: str):
    key = load_or_create_client_key(ControllerHome.default().key)
    async with await RunnerSession.open(runner.host, runner.port, key, None) as session:
        return await session.status(job_id)


@pytest.mark.parametrize("key", ["s", "x"])
@pilot_test
async def test_cancel_a_job_queued_on_a_busy_runner(tmp_path, controller_home, make_project, cli, key):
    # All of the runner is 2 CPUs: the second and third `big` wait in its queue.
    runner = start_agent(
        tmp_path / "agent", controller_home, extra_env={"LANPOOL_FAKE_CPUS": "2"}, extra_args=("--no-mdns",)
    )
    try:
        project = make_project(QUEUE_WORKFLOWS)
        cli("headless", "runners", "add", runner.address, check=True)
        ids = []
        for _ in range(3):
            out = cli("headless", "run", "big", "-d", "--json", cwd=project, check=True)
            ids.append(json.loads(out.stdout)["jobs"][0]["job_id"])
        holder, queued, behind = ids
        assert (await _runner_status(runner, behind)).position == 2

        app = tui(project)
        async with app.run_test(size=SIZE) as pilot:
            await wait_status(pilot, queued, "QUEUED")
            table = app.query_one("#runs-table")
            table.move_cursor(row=table.get_row_index(queued), animate=False)
            await pilot.press(key)
            assert isinstance(app.screen, ConfirmDialog)
            await pilot.press("y")
            await wait_until(
                pilot, lambda: app.ctl.runs.job(queued).state.is_terminal(), "the queued job cancelled", timeout=30
            )
            job = app.ctl.runs.job(queued)
            assert job.status in ("STOPPED", "ABORTED") and "cancelled while queued" in (job.error or ""), job
            await wait_until(pilot, lambda: any(m.startswith(f"job {queued}: ") for m, _ in notes(app)), "the outcome")
            # Gone from the runner's queue: the job behind it moved up, the holder still runs.
            assert (await _runner_status(runner, queued)).state in ("STOPPED", "ABORTED")
            moved = await _runner_status(runner, behind)
            assert moved.state == "QUEUED" and moved.position == 1, moved
            assert (await _runner_status(runner, holder)).state == "RUNNING"
            await pilot.press(key)  # an ended job is not cancelled twice
            assert not isinstance(app.screen, ConfirmDialog)
    finally:
        runner.stop()
