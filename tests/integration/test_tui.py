"""The TUI driven by Textual's pilot against a real agent on loopback: real SSH,
real SQLite, real mDNS on 127.0.0.1. Keys are pressed as a user would; each test
checks what the user would see (table cells, log lines, notifications) and what
really happened (the store, the downloaded files).
The part with real agents and the CLI (integration); the rest: tests/unit/test_tui.py."""

import asyncio
import json
import secrets
import shutil
from pathlib import Path

import pytest

pytest.importorskip("textual")


from textual import events  # noqa: E402
from textual.widgets import DataTable, Input, Label, Select  # noqa: E402

from lanpool.app.controller import Controller  # noqa: E402
from lanpool.app.tui.app import LOG_WINDOW, LanpoolApp  # noqa: E402
from lanpool.app.tui.dialogs.run_dialog import RunDialog  # noqa: E402
from lanpool.app.tui.dialogs.simple import ConfirmDialog, FormDialog  # noqa: E402
from lanpool.app.tui.panes.logs import LOG_PAGE  # noqa: E402
from lanpool.app.tui.widgets.log_view import LogView  # noqa: E402
from tests.harness import start_agent  # noqa: E402
from tests.unit.test_tui import (  # noqa: F401 (fixtures, used by name)
    SIZE,
    VARIABLES,
    WORKFLOWS,
    _apps,
    errors,
    no_unexpected_errors,
    notes,
    pilot_test,
    project,
    recording,
    tui,
    wait_until,
)


@pytest.fixture(scope="module")
def shared_agent(tmp_path_factory):
    """One agent for the module (starting one costs a second or more); each test's
    controller home gets the key it trusts. No mDNS: other tests here browse."""
    base = tmp_path_factory.mktemp("tui-agent")
    # The process executor, whether or not a Docker engine answers (scripts/test starts one).
    a = start_agent(base / "agent", base / "key-home", extra_args=("--no-mdns", "--executor", "process"))
    yield a, base / "key-home"
    a.stop()


@pytest.fixture
def agent(shared_agent, controller_home: Path):
    a, key_home = shared_agent
    controller_home.mkdir(parents=True, exist_ok=True)
    for name in ("id_ed25519", "id_ed25519.pub"):
        shutil.copy2(key_home / name, controller_home / name)
    return a


def rows_index(app: LanpoolApp, key: str) -> int:
    return list(rows(app, "runs-table")).index(key)


def rows(app: LanpoolApp, table_id: str) -> dict[str, dict[str, str]]:
    """The rows of a DataTable as the user sees them: {row key: {column key: text}}."""
    table = app.query_one(f"#{table_id}", DataTable)
    out = {}
    for row_key in table.rows:
        out[row_key.value] = {col.value: str(table.get_cell(row_key, col)) for col in table.columns}
    return out


def log_texts(app: LanpoolApp) -> list[str]:
    return [line.text for line in app.query_one(LogView).lines]


def label_text(app: LanpoolApp, selector: str) -> str:
    return str(app.query_one(selector, Label).render())


async def type_into(pilot, selector: str, text: str) -> None:
    """Replace an Input's text: focus it, clear it by keyboard, paste the text (as a
    terminal's bracketed paste does: typing long paths key by key is slow in the pilot)."""
    widget = pilot.app.screen.query_one(selector, Input)
    widget.focus()
    await pilot.pause()
    await pilot.press("home", "ctrl+k")
    if text:
        pilot.app.post_message(events.Paste(text))
    await pilot.pause()
    assert widget.value == text


async def add_runner(pilot, address: str) -> None:
    """Runners tab, `a`, type the address, Enter: the runner is checked and shown LIVE."""
    await pilot.press("2", "a")
    assert isinstance(pilot.app.screen, FormDialog)
    await type_into(pilot, "#field-address", address)
    await pilot.press("enter")
    await wait_until(
        pilot,
        lambda: any(r["state"] == "LIVE" for r in rows(pilot.app, "runners-table").values()),
        f"runner at {address} LIVE",
    )


async def known_runner(agent) -> None:
    """The runner as `app headless runners add` leaves it: pinned and checked, before the TUI starts."""
    ctl = Controller()
    try:
        name = await ctl.add_runner(agent.host, agent.port)  # trusted: accepting our key is not enough
        assert await ctl.pool.probe(ctl.store.runner(name)) == "LIVE"
    finally:
        ctl.close()


async def submit(pilot, workflow: str | None = None) -> str:
    """`r`, pick the workflow, ctrl+r; returns the job id once submitted."""
    app = pilot.app
    before = {r[0].id for r in app.ctl.store.job_rows()}
    await pilot.press("r")
    await wait_until(pilot, lambda: isinstance(app.screen, RunDialog), "the Run dialog")
    if workflow is not None:
        app.screen.query_one("#workflow", Select).value = workflow
        await wait_until(pilot, lambda: app.screen.workflow == workflow, f"workflow {workflow} picked")
    await pilot.press("ctrl+r")
    return await wait_until(
        pilot,
        lambda: next((r[0].id for r in app.ctl.store.job_rows() if r[0].id not in before), None),
        "the job submitted",
    )


def job_status(app: LanpoolApp, job_id: str) -> str:
    return rows(app, "runs-table").get(job_id, {}).get("status", "")


async def wait_status(pilot, job_id: str, status: str, timeout: float = 30.0) -> None:
    """The Runs tab shows `status` for the job (the table is refreshed every second)."""
    await wait_until(
        pilot,
        lambda: job_status(pilot.app, job_id).startswith(status),
        f"job {job_id} {status} in the runs table",
        timeout,
    )


@pilot_test
async def test_runner_added_by_address_is_live(agent, project):
    app = tui(project)
    async with app.run_test(size=SIZE) as pilot:
        # The Runners tab is filled just after the first frame (not on the first screen).
        await wait_until(pilot, lambda: "no runners yet" in label_text(app, "#runners-hint"), "the runners hint")
        assert rows(app, "runners-table") == {}
        await add_runner(pilot, agent.address)
        [(name, row)] = rows(app, "runners-table").items()
        assert name == "test-runner"
        assert row["address"] == agent.address and row["state"] == "LIVE" and row["source"] == "manual"
        assert row["executor"].startswith("process, ") and row["jobs"] == "0"  # "process, sandboxed" where bwrap runs
        assert "1 runner(s), 1 answering" in label_text(app, "#runners-hint")
        assert (f"added runner test-runner at {agent.address}", "information") in notes(app)
        assert app.ctl.store.runner("test-runner")["paired"] == 1


@pilot_test
async def test_runner_found_by_mdns_is_unpaired_until_added(tmp_path, controller_home, project):
    # A name of its own: other agents may be announcing on this machine's loopback too.
    name = f"tui-mdns-{secrets.token_hex(3)}"
    # It accepts our key; that alone does not make it a runner of ours.
    a = start_agent(tmp_path / "mdns-agent", controller_home, name=name, extra_args=("--executor", "process"))
    try:
        app = tui(project, discover=True)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("2")
            await wait_until(
                pilot,
                lambda: rows(app, "runners-table").get(name, {}).get("state") == "UNPAIRED",
                f"{name} discovered over mDNS and UNPAIRED",
                timeout=30,
            )
            await pilot.pause(2.5)  # probed again (every 1 s here): accepting our key does not make it LIVE
            assert rows(app, "runners-table")[name]["state"] == "UNPAIRED"
            await add_runner(pilot, a.address)  # the user's act
            row = rows(app, "runners-table")[name]
            assert row["state"] == "LIVE"
            assert row["source"] == "mdns" and row["address"] == a.address and row["executor"].startswith("process, ")
    finally:
        a.stop()


@pilot_test
async def test_pair_with_wrong_code_is_a_notification_then_right_code_pairs(tmp_path, controller_home, project, cli):
    a = start_agent(tmp_path / "fresh", controller_home, authorize=False, name="fresh-runner")
    try:
        code = json.loads(cli("agent", "status", "--data-dir", str(a.data_dir), "--json").stdout)["pairing_code"]
        app = tui(project, errors_expected=True)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("2", "p")
            assert isinstance(app.screen, FormDialog)
            await type_into(pilot, "#field-target", a.address)
            app.screen.query_one("#field-code").focus()
            await pilot.press(*"AAAA-BBBB")  # typed key by key
            await pilot.press("enter")
            await wait_until(pilot, lambda: any(sev == "error" for _, sev in notes(app)), "an error notification")
            [message] = [m for m, sev in notes(app) if sev == "error"]
            assert "could not prove the pairing code" in message
            assert app.is_running and not isinstance(app.screen, FormDialog)
            assert app.ctl.store.runner("fresh-runner") is None

            await pilot.press("p")
            await type_into(pilot, "#field-target", a.address)
            await type_into(pilot, "#field-code", code.lower())
            await pilot.press("enter")
            await wait_until(
                pilot,
                lambda: rows(app, "runners-table").get("fresh-runner", {}).get("state") == "LIVE",
                "fresh-runner paired and LIVE",
            )
            assert ("paired with runner fresh-runner", "information") in notes(app)
    finally:
        a.stop()


@pilot_test
async def test_unreachable_address_is_a_notification_not_a_crash(controller_home, project):
    app = tui(project, errors_expected=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2", "a")
        await type_into(pilot, "#field-address", "127.0.0.1:1")
        await pilot.press("enter")
        [message] = await wait_until(pilot, lambda: errors(app), "an error notification")
        assert "127.0.0.1:1" in message, message
        assert app.is_running and rows(app, "runners-table") == {}
        await pilot.press("1")  # still usable
        assert app.query_one("#tabs").active == "runs"


@pilot_test
async def test_run_from_dialog_streams_its_log_and_ends_done(agent, project):
    app = tui(project)
    async with app.run_test(size=SIZE) as pilot:
        await add_runner(pilot, agent.address)
        # r, then ctrl+r at once: the first workflow with its defaults (the plan, which
        # comes a moment later for a dialog already closed, is dropped without an error).
        await pilot.press("r", "ctrl+r")
        job_id = await wait_until(
            pilot, lambda: app.ctl.store.job_rows() and app.ctl.store.job_rows()[0][0].id, "the job submitted"
        )
        job = app.ctl.store.job(job_id)
        assert job.workflow == "make"
        await wait_until(pilot, lambda: app.query_one("#tabs").active == "logs", "the new job's log shown")
        await wait_until(pilot, lambda: "done" in log_texts(app), "the last log line")
        lines = app.query_one(LogView).lines
        assert [line.text for line in lines if line.stream == "out"] == [f"building in {job.run_name}", "done"]
        assert [line.text for line in lines if line.stream == "err"] == ["to stderr"]  # shown in red
        await wait_until(pilot, lambda: app.ctl.store.job(job_id).state.is_terminal(), "the job's end")
        await pilot.press("1")
        await wait_status(pilot, job_id, "DONE (0)")
        row = rows(app, "runs-table")[job_id]
        assert row["run"] == job.run_name and row["workflow"] == "make" and row["runner"] == "test-runner"
        assert row["artifacts"] == "2"
        assert f"run {job.run_name}" in label_text(app, "#log-header") and "DONE (0)" in label_text(app, "#log-header")
        assert (f"run {job.run_name} (make): DONE (0)", "information") in notes(app)


@pilot_test
async def test_many_lines_stream_in_order_and_the_window_pages_back(agent, project):
    await known_runner(agent)
    app = tui(project)
    async with app.run_test(size=SIZE) as pilot:
        job_id = await submit(pilot, "many")
        view = app.query_one(LogView)
        await wait_until(pilot, lambda: view.lines and view.lines[-1].text == "line-25000", "line-25000", 60)
        # Bounded: the view holds the newest LOG_WINDOW lines, in order; the store has all.
        assert log_texts(app) == [f"line-{i}" for i in range(25001 - LOG_WINDOW, 25001)]
        assert app.ctl.store.log_line_count(job_id) == 25000
        assert view.following
        # Following: the view scrolls to its end on the next refresh (later on a busy machine).
        await wait_until(pilot, lambda: view.scroll_y == view.max_scroll_y > 0, "the view at its end", 20)
        # Scrolling to the top pages the older lines back in from the store.
        view.focus()
        for _ in range(LOG_WINDOW // LOG_PAGE + 2):  # a page at a time: each g at the top asks for one more
            top = view.lines[0].text
            if top == "line-1":
                break
            await pilot.press("g")
            await wait_until(pilot, lambda top=top: view.lines[0].text != top, "an older page", 10)
        await wait_until(pilot, lambda: view.lines[0].text == "line-1", "line-1 paged back in")
        texts = log_texts(app)
        assert texts == [f"line-{i}" for i in range(1, len(texts) + 1)]


@pilot_test
async def test_enter_on_a_run_row_shows_its_stored_log(agent, project):
    await known_runner(agent)
    app = tui(project)
    async with app.run_test(size=SIZE) as pilot:
        first = await submit(pilot, "fail")
        await wait_until(pilot, lambda: app.ctl.store.job(first).state.is_terminal(), "fail ended")
        second = await submit(pilot, "make")
        await wait_until(pilot, lambda: app.ctl.store.job(second).state.is_terminal(), "make ended")
    # A new app on the same store: the log comes from SQLite.
    app = tui(project)
    async with app.run_test(size=SIZE) as pilot:
        assert list(rows(app, "runs-table")) == [second, first]  # newest first
        assert job_status(app, first) == "FAILED (3)"
        await pilot.press("down", "enter")
        await wait_until(pilot, lambda: app.query_one("#tabs").active == "logs", "the Logs tab")
        assert app.job_id == first
        assert [line.text for line in app.query_one(LogView).lines if line.stream == "out"] == ["before"]
        assert "FAILED (3)" in label_text(app, "#log-header")


@pilot_test
async def test_runs_filter_and_status_narrow_the_rows(agent, project):
    await known_runner(agent)
    app = tui(project)
    async with app.run_test(size=SIZE) as pilot:
        failed = await submit(pilot, "fail")
        await wait_until(pilot, lambda: app.ctl.store.job(failed).state.is_terminal(), "fail ended")
        done = await submit(pilot, "make")
        await wait_until(pilot, lambda: app.ctl.store.job(done).state.is_terminal(), "make ended")
        await pilot.press("1")
        await wait_until(pilot, lambda: set(rows(app, "runs-table")) == {failed, done}, "both rows")

        await pilot.press("slash")
        assert app.focused is app.query_one("#runs-filter")
        await pilot.press(*"fail")
        assert list(rows(app, "runs-table")) == [failed]
        await pilot.press("enter")  # back to the table
        assert app.focused is app.query_one("#runs-table")

        await pilot.press("slash", "home", "ctrl+k")
        assert set(rows(app, "runs-table")) == {failed, done}
        await type_into(pilot, "#runs-filter", app.ctl.store.job(done).run_name)  # a run name works as well
        assert list(rows(app, "runs-table")) == [done]
        await type_into(pilot, "#runs-filter", "nothing-like-this")
        assert rows(app, "runs-table") == {}
        await type_into(pilot, "#runs-filter", "")

        app.query_one("#runs-status", Select).value = "DONE"
        await pilot.pause()
        assert list(rows(app, "runs-table")) == [done]
        app.query_one("#runs-status", Select).value = "FAILED"
        await pilot.pause()
        assert list(rows(app, "runs-table")) == [failed]


@pilot_test
async def test_wrong_variable_type_is_shown_and_nothing_is_submitted(agent, project):
    await known_runner(agent)
    app = tui(project)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        dialog = app.screen
        assert isinstance(dialog, RunDialog)
        dialog.query_one("#workflow", Select).value = "greet"
        await wait_until(pilot, lambda: dialog.query("#var-times"), "the variables of greet")
        assert dialog.query_one("#var-times", Input).value == "3"
        assert dialog.query_one("#var-who", Input).value == "world"

        await type_into(pilot, "#var-times", "many")
        await pilot.press("ctrl+r")
        await pilot.pause(0.3)
        assert app.screen is dialog  # still open
        error = str(dialog.query_one("#run-error", Label).render())
        assert "times" in error and "number" in error, error
        assert app.ctl.store.recent_runs() == []

        await type_into(pilot, "#nodes", "0")
        await type_into(pilot, "#var-times", "5")
        await pilot.press("ctrl+r")
        await pilot.pause(0.3)
        assert app.screen is dialog and "nodes" in str(dialog.query_one("#run-error", Label).render())
        await type_into(pilot, "#nodes", "")

        await type_into(pilot, "#var-who", "tui")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: "times=5 who=tui" in log_texts(app), "the overridden values in the log")
        [run] = app.ctl.store.recent_runs()
        assert run.workflow == "greet"


@pytest.mark.parametrize("key,status", [("s", "STOPPED"), ("x", "ABORTED")])
@pilot_test
async def test_stop_and_abort_ask_first(agent, project, key, status):
    await known_runner(agent)
    app = tui(project)
    async with app.run_test(size=SIZE) as pilot:
        job_id = await submit(pilot, "graceful")
        await wait_until(pilot, lambda: "ready" in log_texts(app), "the job ready")
        assert app.ctl.store.job(job_id).status == "RUNNING"  # its log streams in while it runs
        await pilot.press("1")
        await wait_status(pilot, job_id, "RUNNING")

        await pilot.press(key)
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("n")  # changed my mind: still running
        assert not isinstance(app.screen, ConfirmDialog)
        await pilot.pause(0.3)
        assert app.ctl.store.job(job_id).status == "RUNNING"

        await pilot.press(key)
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        await wait_status(pilot, job_id, status)
        assert app.ctl.store.job(job_id).status == status
        # What the stop worker saw. The job's own follower may record the end (and the table
        # show it) a moment before the worker's follow returns: wait for the worker.
        await wait_until(
            pilot, lambda: (f"job {job_id}: {status}", "information") in notes(app), "the stop worker's outcome"
        )
        if status == "STOPPED":
            await wait_until(pilot, lambda: "got TERM" in log_texts(app), "the job's TERM trap in the log")
        await pilot.press(key)  # an ended job is not stopped twice
        assert not isinstance(app.screen, ConfirmDialog)
        assert any("already ended" in m for m, _ in notes(app))


@pilot_test
async def test_a_missing_artifact_is_a_warning_in_the_log_header(agent, make_project):
    project = make_project(
        WORKFLOWS + '  - name: forgetful\n    commands: ["echo made nothing"]\n    artifacts: [model.ckpt]\n',
        files={".lanpool/variables.yaml": VARIABLES},
    )
    await known_runner(agent)
    app = tui(project)
    async with app.run_test(size=SIZE) as pilot:
        job_id = await submit(pilot, "forgetful")
        await wait_until(pilot, lambda: app.ctl.store.warnings(job_id), "the job's warning recorded")
        await pilot.press("3")
        await wait_until(
            pilot,
            lambda: "warning: artifact 'model.ckpt' was not produced" in label_text(app, "#log-header"),
            "the warning in the log header",
        )


@pilot_test
async def test_delete_run_asks_first_and_refuses_a_running_job(agent, project):
    await known_runner(agent)
    app = tui(project)
    async with app.run_test(size=SIZE) as pilot:
        running = await submit(pilot, "graceful")
        await pilot.press("1")
        await wait_status(pilot, running, "RUNNING")
        await pilot.press("D")  # a run with a job still running: refused, nothing asked
        assert not isinstance(app.screen, ConfirmDialog)
        await wait_until(pilot, lambda: any("stop it first" in m for m, _ in notes(app)), "the refusal")
        assert app.ctl.store.job(running).status == "RUNNING"
        await app.ctl.stop(running, abort=True)

        done = await submit(pilot, "make")
        await wait_until(pilot, lambda: app.ctl.store.job(done).artifacts_pulled, "the artifacts pulled")
        run = app.ctl.store.job(done).run_name
        stored = app.ctl.home.job_artifacts(done)
        assert stored.is_dir()
        await pilot.press("1")
        await wait_status(pilot, done, "DONE")
        app.query_one("#runs-table", DataTable).move_cursor(row=rows_index(app, done))
        await pilot.press("D")
        assert isinstance(app.screen, ConfirmDialog) and "artifact file(s)" in app.screen.question
        await pilot.press("n")  # changed my mind: all still there
        assert app.ctl.store.run(run) is not None and stored.is_dir()
        await pilot.press("D")
        await pilot.press("y")
        await wait_until(pilot, lambda: app.ctl.store.run(run) is None, "the run deleted")
        assert not stored.exists()
        await wait_until(pilot, lambda: done not in rows(app, "runs-table"), "the run gone from the table")
        assert any("deleted 1 run(s)" in m for m, _ in notes(app))


@pilot_test
async def test_artifacts_download_to_a_chosen_dir(agent, project, tmp_path):
    await known_runner(agent)
    app = tui(project)
    async with app.run_test(size=SIZE) as pilot:
        job_id = await submit(pilot, "make")
        await wait_until(pilot, lambda: app.ctl.store.job(job_id).artifacts_pulled, "the artifacts pulled")
        await pilot.press("5")
        await wait_until(pilot, lambda: rows(app, "artifacts-table"), "the artifacts listed")
        assert {k: r["size"].strip() for k, r in rows(app, "artifacts-table").items()} == {
            "out/a.txt": "6 B",
            "out/sub/b.bin": "4.9 KiB",
        }
        assert "2 file(s)" in label_text(app, "#artifacts-header")

        await pilot.press("d")
        assert isinstance(app.screen, FormDialog)
        dest = tmp_path / "downloaded here"
        await type_into(pilot, "#field-dir", str(dest))
        await pilot.press("enter")
        await wait_until(
            pilot, lambda: any("file(s)" in m and str(dest) in m for m, _ in notes(app)), "the download's notification"
        )
        assert (dest / "out" / "a.txt").read_text() == "hello\n"
        assert (dest / "out" / "sub" / "b.bin").read_bytes() == bytes(5000)
        assert not app.query_one("#download-box").display


@pilot_test
async def test_download_defaults_to_the_download_dir_never_the_project(agent, project, tmp_path, monkeypatch):
    """Files downloaded into the project would join its next snapshot (and change its cache key)."""
    downloads = tmp_path / "downloads"
    monkeypatch.setenv("LANPOOL_DOWNLOADS", str(downloads))
    await known_runner(agent)
    before = sorted(p.relative_to(project) for p in project.rglob("*"))
    app = tui(project)
    async with app.run_test(size=SIZE) as pilot:
        job_id = await submit(pilot, "make")
        await wait_until(pilot, lambda: app.ctl.store.job(job_id).artifacts_pulled, "the artifacts pulled")
        run_name = app.ctl.store.job(job_id).run_name
        await pilot.press("1", "d")
        assert isinstance(app.screen, FormDialog)
        field = app.screen.query_one("#field-dir", Input)
        assert field.value == str(downloads / run_name)
        await pilot.press("enter")  # the default, as it is
        await wait_until(pilot, lambda: any("file(s)" in m for m, _ in notes(app)), "the download's notification")
    assert (downloads / run_name / "out" / "a.txt").read_text() == "hello\n"
    assert sorted(p.relative_to(project) for p in project.rglob("*")) == before  # nothing new in the project


# It runs until the test releases it: a fixed sleep could end between two of the TUI's looks on
# a loaded machine, which then saw DONE without RUNNING (seen in CI).
NAP = """
workflows:
  - name: nap
    commands:
      - echo awake
      - while [ ! -e release ]; do sleep 0.2; done
      - echo over
"""


@pilot_test
async def test_a_job_run_detached_elsewhere_shows_running_then_done_with_no_cli_call(agent, make_project, cli):
    """`run -d` in another process writes the store once (SUBMITTED or QUEUED); the TUI asks the
    runner in the background (one connection per runner) and shows RUNNING, then DONE."""
    await known_runner(agent)
    project = make_project(NAP, name="elsewhere")
    app = tui(project)
    async with app.run_test(size=SIZE) as pilot:
        res = await asyncio.to_thread(
            cli, "headless", "run", "nap", "-d", "--json", "--runner", agent.address, cwd=project, check=True
        )
        [submitted] = json.loads(res.stdout.strip().splitlines()[-1])["jobs"]
        job_id = submitted["job_id"]
        assert submitted["status"] != "RUNNING" or app.ctl.store.job(job_id).started_at, submitted
        await wait_status(pilot, job_id, "RUNNING", 30)
        for workspace in (agent.data_dir / "jobs").glob("*/workspace"):
            (workspace / "release").touch()  # a file in the job's workspace: what a sandboxed job sees
        await wait_status(pilot, job_id, "DONE", 30)
        assert app.ctl.store.job(job_id).state.name == "DONE"
        assert b"over" in b"".join(chunk[3] for chunk in app.ctl.store.log_chunks(job_id))
