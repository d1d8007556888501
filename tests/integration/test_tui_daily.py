"""Daily use without surprises (issue #35): the defects a user met in the TUI, each under a pilot
on the snapshot tests' fixed store: a search in a short log, the `e` key's visibility, the fit at
80x24 and after a resize, the command palette, the charts' ticks, the Run dialog's focus and
reuse, and forgetting offline runners at once."""

import os
from pathlib import Path

import pytest

pytest.importorskip("textual")

from textual.widgets import Checkbox, Input, Select  # noqa: E402
from textual.widgets._footer import FooterKey  # noqa: E402
from textual_plotext import PlotextPlot  # noqa: E402

from lanpool.app.tui.dialogs.run_dialog import RunDialog  # noqa: E402
from lanpool.app.tui.dialogs.simple import ConfirmDialog, FormDialog, HelpScreen  # noqa: E402
from lanpool.app.tui.widgets.footer import Footer  # noqa: E402
from lanpool.app.tui.widgets.metrics_chart import MetricsChart  # noqa: E402
from tests.harness import REPO  # noqa: E402
from tests.integration import test_tui_snapshots as snaps  # noqa: E402
from tests.integration.test_tui_keys import run  # noqa: E402
from tests.integration.test_tui_snapshots import _logs_of_done_job, _on_done_job, _until  # noqa: E402

screen_app = pytest.fixture(snaps.screen_app.__wrapped__)  # the snapshots' fixed store and clock


def screen_text(app) -> str:
    """The screen as a terminal shows it, one text line per row (the compositor's last frame)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def footer_text(app) -> str:
    return screen_text(app).splitlines()[-1]


async def settle(pilot, seconds: float = 0.3) -> None:
    await pilot.pause(seconds)


# -- the log's search ----------------------------------------------------------------------------


def test_search_in_a_log_shorter_than_half_the_window_finds_and_does_not_crash(screen_app):
    async def body(pilot):
        view = await _logs_of_done_job(pilot, 3)
        await pilot.press("slash")
        await _until(pilot, lambda: isinstance(pilot.app.screen, FormDialog))
        await pilot.press(*"line-1", "enter")
        await settle(pilot)
        assert pilot.app.is_running and view.search == "line-1"
        await pilot.press("n", "N")  # next / previous in the same short log
        assert pilot.app.is_running

    run(screen_app, (80, 24), body)


# -- the shell key, e ----------------------------------------------------------------------------


def test_e_is_in_help_footer_palette_and_docs(screen_app):
    async def body(pilot):
        app = pilot.app
        assert any(key == "e" for key, _ in app.KEYS_HELP)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await settle(pilot)
        assert "e" in [key.key for key in app.query_one(Footer).query(FooterKey)]
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert any("shell" in title.lower() for title in titles)

    run(screen_app, (140, 30), body)
    docs = (REPO / "docs" / "tui.md").read_text()
    assert "| `e` |" in docs


def test_the_palette_lists_keys_once(screen_app):
    async def body(pilot):
        titles = [command.title for command in pilot.app.get_system_commands(pilot.app.screen)]
        assert titles.count("Keys") == 1
        assert len(titles) == len(set(titles))

    run(screen_app, (140, 30), body)


# -- 80x24 and resizes ---------------------------------------------------------------------------


@pytest.mark.parametrize("start", [(80, 24), (140, 30)])
def test_the_footer_follows_the_terminal_size(screen_app, start):
    async def body(pilot):
        for size in [start, (80, 24), (140, 30), (80, 24)]:
            await pilot.resize_terminal(*size)
            await settle(pilot)
            text = footer_text(pilot.app)
            assert "? Help" in text and "q Quit" in text, (size, text)
            if size[0] >= 120:
                assert "1 Runs" in text and "palette" in text, (size, text)

    run(screen_app, start, body)


def test_the_logs_header_keeps_the_duration_at_80x24(screen_app):
    async def body(pilot):
        await _on_done_job(pilot)
        await pilot.press("enter")
        await settle(pilot)
        header = screen_text(pilot.app).splitlines()[3]
        assert "DONE (0)" in header and "15m" in header, header

    run(screen_app, (80, 24), body)


async def _run_dialog(pilot, workflow: str = "train") -> RunDialog:
    await pilot.press("r")
    dialog = await _until_value(pilot, lambda: isinstance(pilot.app.screen, RunDialog) and pilot.app.screen)
    dialog.query_one("#workflow", Select).value = workflow
    await _until(pilot, lambda: dialog.workflow == workflow and bool(dialog.query(".var-value")))
    await settle(pilot)
    return dialog


async def _until_value(pilot, get):
    await _until(pilot, lambda: bool(get()))
    return get()


def test_the_run_dialog_fits_80x24_without_scrolling(screen_app):
    async def body(pilot):
        dialog = await _run_dialog(pilot)
        await _until(pilot, lambda: "REUSE" in str(dialog.query_one("#plan").render()))
        await settle(pilot)
        body_box = dialog.query_one("#run-body")
        assert body_box.max_scroll_y == 0, "the dialog's body scrolls"
        screen = dialog.region
        for selector in ["#workflow", ".var-value", "#nodes", "#runner", "#env", "#plan", "#run", "#cancel"]:
            for widget in dialog.query(selector):
                assert screen.contains_region(widget.region) and widget.region.height, selector
        text = screen_text(pilot.app)
        assert "REUSE" in text and "Run" in text

    run(screen_app, (80, 24), body)


# -- the Run dialog's focus and reuse --------------------------------------------------------------


def test_the_run_dialog_opens_focused_and_tab_reaches_the_first_variable(screen_app):
    async def body(pilot):
        dialog = await _run_dialog(pilot)
        assert pilot.app.focused is dialog.query_one("#workflow", Select)
        await pilot.press("tab")
        first = dialog.query(".var-value").first(Input)
        assert pilot.app.focused is first

    run(screen_app, (140, 42), body)


def test_enter_in_a_run_dialog_field_runs(screen_app, monkeypatch):
    asked = []

    async def body(pilot):
        monkeypatch.setattr(pilot.app, "start_run", lambda request: asked.append(request))
        dialog = await _run_dialog(pilot)
        await pilot.press("tab", "enter")
        await settle(pilot)
        assert not isinstance(pilot.app.screen, RunDialog) and dialog.is_attached is False
        assert [r.workflow for r in asked] == ["train"]

    run(screen_app, (140, 42), body)


def test_the_plan_offers_reuse_as_the_dialog_names_it(screen_app, monkeypatch):
    asked = []

    async def body(pilot):
        monkeypatch.setattr(pilot.app, "start_run", lambda request: asked.append(request))
        dialog = await _run_dialog(pilot)
        await _until(pilot, lambda: "RUN" in str(dialog.query_one("#plan").render()))
        plan = str(dialog.query_one("#plan").render())
        assert "--reuse" not in plan and "reuse" in plan, plan
        dialog.query_one("#reuse", Checkbox).value = True
        await settle(pilot)
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert [r.reuse for r in asked] == [True]

    run(screen_app, (140, 42), body)


# -- charts ----------------------------------------------------------------------------------------


def _axis_labels(app) -> tuple[list[str], str]:
    """The first plot's y-axis labels (left of its frame) and its x-axis labels line."""
    plot = app.query(PlotextPlot).first()
    lines = [strip.text for strip in plot.render_lines(plot.region.reset_offset)]
    framed = [line for line in lines if "│" in line or "┤" in line]
    ys = [line.split("┤")[0].strip() for line in framed if "┤" in line]
    bottom = next(i for i, line in enumerate(lines) if "└" in line)
    return [y for y in ys if y], lines[bottom + 1]


def test_log_scale_labels_values_and_steps_get_whole_ticks(screen_app):
    async def body(pilot):
        await _on_done_job(pilot)
        await pilot.press("4")
        chart = pilot.app.query_one(MetricsChart)
        await _until(pilot, lambda: bool(chart.query(PlotextPlot)))
        await settle(pilot)
        ys, xs = _axis_labels(pilot.app)
        assert xs.split() and all("." not in x for x in xs.split()), xs  # steps are whole numbers
        await pilot.press("l")
        await settle(pilot)
        ys, xs = _axis_labels(pilot.app)
        assert ys and not any(y.startswith("-") for y in ys), ys  # values, not exponents
        assert {"0.1", "1"} & set(ys) or any(y in ("0.05", "0.5", "0.2", "2") for y in ys), ys

    run(screen_app, (140, 42), body)


# -- forgetting offline runners --------------------------------------------------------------------


def test_forget_offline_runners_asks_then_forgets_only_those(screen_app):
    async def body(pilot):
        app = pilot.app
        await pilot.press("2")
        await pilot.press("F")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        assert "gpu-box-2" in app.screen.question and "gpu-box-1" not in app.screen.question
        await pilot.press("n")
        await settle(pilot)
        assert app.ctl.pool.state_of("gpu-box-2") == "OFFLINE"  # no: nothing forgotten
        await pilot.press("F")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await settle(pilot)
        assert sorted(app.ctl.pool.names()) == ["gpu-box-1", "laptop"]
        await pilot.press("F")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmDialog)  # none offline now: a note, no question

    run(screen_app, (140, 30), body)


def test_docs_name_every_key_of_the_help(screen_app):
    docs = (Path(REPO) / "docs" / "tui.md").read_text()
    for key, _ in screen_app.KEYS_HELP:
        first = key.split()[0]
        assert f"`{first}`" in docs, key


# -- a job's end, told elsewhere (app --notify, --notify-cmd) ------------------------------------


def test_a_job_that_ends_is_told_to_the_desktop_and_the_command(screen_app, tmp_path, monkeypatch):
    """As `run --notify --notify-cmd CMD` (app/notify.py): the command gets the job in its env,
    the desktop (a stand-in notify-send on PATH, a display set) gets a title and a body; neither
    holds anything the job printed. A command that fails is a warning toast, never a crash."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    told, shown = tmp_path / "told", tmp_path / "shown"
    for name, body in [
        ("tell-me", f'env | grep ^LANPOOL_ | sort > "{told}"\n'),
        ("notify-send", f'printf "%s\\n" "$@" > "{shown}"\n'),
        ("fail-me", "echo no route to the chat >&2; exit 3\n"),
    ]:
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("DISPLAY", ":99")
    screen_app.notify_desktop, screen_app.notify_command = True, [str(bin_dir / "tell-me")]

    jobs = []

    async def body(pilot):
        jobs.append(pilot.app.ctl.runs.job(snaps.DONE_JOB))
        pilot.app.job_ended(snaps.DONE_JOB)
        await _until(pilot, lambda: told.exists() and shown.exists() and told.read_text(), tries=400)
        pilot.app.notify_command = [str(bin_dir / "fail-me")]
        pilot.app.notify_desktop = False
        pilot.app.job_ended(snaps.DONE_JOB)
        # Named by the program's name, whatever its path's length, so the error itself shows.
        failed = "notification command fail-me exited 3: no route to the chat"
        await _until(pilot, lambda: any(n.message == failed for n in pilot.app._notifications), tries=400)
        assert pilot.app.is_running

    run(screen_app, (100, 30), body)
    (job,) = jobs
    env = dict(line.split("=", 1) for line in told.read_text().splitlines())
    assert env["LANPOOL_JOB_ID"] == snaps.DONE_JOB and env["LANPOOL_RUN_NAME"] == job.run_name
    assert env["LANPOOL_JOB_STATE"] == job.status and env["LANPOOL_WORKFLOW"] == job.workflow
    title, text = shown.read_text().splitlines()[-2:]
    assert title == f"lanpool: {job.run_name} {job.status}" and snaps.DONE_JOB in text
