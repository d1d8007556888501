"""The TUI driven by Textual's pilot against a real agent on loopback: real SSH,
real SQLite, real mDNS on 127.0.0.1. Keys are pressed as a user would; each test
checks what the user would see (table cells, log lines, notifications) and what
really happened (the store, the downloaded files).
The in-process part (unit); the rest: tests/integration/test_tui.py."""

import asyncio
import functools
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("textual")


from textual.widgets import Input  # noqa: E402

from lanpool.app.tui.app import LanpoolApp  # noqa: E402
from lanpool.app.tui.dialogs.run_dialog import RunDialog  # noqa: E402

SIZE = (160, 45)


WORKFLOWS = """
workflows:
  - name: make
    help: echo a few lines, keep two files
    commands:
      - echo "building in $LANPOOL_RUN_NAME"
      - mkdir -p out/sub
      - echo hello > out/a.txt
      - head -c 5000 /dev/zero > out/sub/b.bin
      - echo "to stderr" >&2
      - echo done
    artifacts: [out]
  - name: many
    commands:
      - seq 1 25000 | sed 's/^/line-/'
  - name: fail
    commands:
      - echo before
      - exit 3
  - name: graceful
    commands:
      - trap 'echo got TERM; sleep 0.3; exit 0' TERM  # a moment to save its work
      - echo ready
      - while true; do sleep 0.1; done
  - name: greet
    commands:
      - echo "times=${{ times }} who=${{ who }}"
"""


VARIABLES = """
variables:
  greet:
    times: 3
    who: world
"""


def pilot_test(test):
    """Run an async test body in its own event loop (the app's pilot needs one)."""

    @functools.wraps(test)
    def run(*args, **kwargs) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


@pytest.fixture
def project(make_project) -> Path:
    return make_project(WORKFLOWS, files={".lanpool/variables.yaml": VARIABLES})


def recording(app: LanpoolApp) -> LanpoolApp:
    """The real app, also keeping every notification it shows in `app.shown` (toasts expire)."""
    app.shown = []
    show = app.notify

    def notify(message, **kwargs) -> None:
        app.shown.append((str(message), kwargs.get("severity", "information")))
        show(message, **kwargs)

    app.notify = notify
    return app


_apps: list[LanpoolApp] = []


def tui(project: Path, errors_expected: bool = False, **kwargs) -> LanpoolApp:
    kwargs.setdefault("discover", False)
    kwargs.setdefault("probe_every_s", 1.0)
    app = recording(LanpoolApp(project_dir=project, **kwargs))
    app.errors_expected = errors_expected
    _apps.append(app)
    return app


def errors(app: LanpoolApp) -> list[str]:
    """Error notifications: a failed worker or handler ends up here, never as a crash."""
    return [m for m, severity in app.shown if severity == "error"]


@pytest.fixture(autouse=True)
def no_unexpected_errors():
    """Whatever a test checks, the app it drove showed no error it did not expect."""
    _apps.clear()
    yield
    for app in _apps:
        if not app.errors_expected:
            assert errors(app) == [], f"error notifications: {errors(app)}"


async def wait_until(pilot, check: Callable[[], object], what: str, timeout: float = 20.0):
    """Let the app run until `check()` is truthy; returns its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        await pilot.pause(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; notifications: {notes(pilot.app)}")


def notes(app: LanpoolApp) -> list[tuple[str, str]]:
    return list(app.shown)


@pilot_test
async def test_plan_is_shown_in_the_run_dialog(controller_home, project):
    app = tui(project)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        dialog = app.screen
        await wait_until(pilot, lambda: "make" in str(dialog.query_one("#plan").render()), "the plan")
        assert "RUN" in str(dialog.query_one("#plan").render())
        await pilot.press("escape")
        assert not isinstance(app.screen, RunDialog)
        assert app.ctl.store.recent_runs() == []


@pilot_test
async def test_dstack_variable_names_with_dots_and_hyphens_in_the_run_dialog(make_project):
    # Widget ids take no `.`: `learning.rate` must still get its field, and its override.
    project = make_project(
        "workflows:\n  - name: t\n    commands: ['echo ${{ learning.rate }} ${{ batch-size }}']\n",
        name="dotted",
        files={".lanpool/variables.yaml": "variables:\n  t:\n    learning.rate: 0.1\n    batch-size: 64\n"},
    )
    app = tui(project)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        dialog = app.screen
        assert isinstance(dialog, RunDialog)
        await wait_until(pilot, lambda: len(dialog.query(".var-value")) == 2, "both variables' fields")
        fields = list(dialog.query(".var-value").results(Input))
        assert sorted(f.value for f in fields) == ["0.1", "64"]
        for field in fields:
            field.value = "0.5" if field.value == "0.1" else "32"
        await pilot.pause()
        request = dialog.request()
        assert request is not None and request.overrides == {"learning.rate": "0.5", "batch-size": "32"}
