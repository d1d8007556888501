"""What `r` starts: the Run dialog, its plan (asked again as its fields change), and the run
itself, whose log the app follows as the new job's.

Not a pane: a run touches every tab (its row in Runs, its log in Logs) and the feeds, so it
works through the app it is given (`RunHost`: what it needs of LanpoolApp, which imports this
module); its workers run on that app, whose one handler turns a failure into a notification.
"""

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from lanpool.app.controller import Submitted
from lanpool.app.errors import LanpoolError
from lanpool.app.secret_store import secret_refs

if TYPE_CHECKING:  # the Run dialog and the workflows (yaml) load when r is first pressed, not before the first frame
    from lanpool.app.controller import Controller
    from lanpool.app.tui.dialogs.run_dialog import RunDialog, RunRequest
    from lanpool.app.tui.live import LiveFeeds
    from lanpool.app.tui.panes.runs import RunsPane
    from lanpool.app.workflows import Project


class RunHost(Protocol):
    """What a run needs of the app (LanpoolApp)."""

    ctl: "Controller"
    feeds: "LiveFeeds"
    runs: "RunsPane"
    project: "Project | None"
    project_error: str

    def load_project(self) -> None: ...
    def select_job(self, job_id: str) -> None: ...
    def action_tab(self, tab: str) -> None: ...
    def start_run(self, request: "RunRequest") -> Any: ...
    def log_sink(self, job_id: str, stream: str, data: bytes) -> None: ...
    def job_ended(self, job_id: str) -> None: ...
    def notify(self, message: str, *, severity: Any = ..., timeout: float | None = ...) -> None: ...
    def push_screen(self, screen: Any, callback: Any = ...) -> Any: ...
    def run_worker(self, work: Any, *, group: str = ..., exclusive: bool = ..., exit_on_error: bool = ...) -> Any: ...


class RunFlow:
    def __init__(self, app: RunHost) -> None:
        self.app = app

    def open(self) -> None:
        app = self.app
        app.load_project()
        if app.project is None:
            app.notify(app.project_error or "no project", severity="error")
            return
        if not app.project.workflows:
            app.notify("the project has no workflows", severity="error")
            return
        from lanpool.app.tui.dialogs.run_dialog import RunDialog

        runners = app.ctl.pool.names()
        dialog = RunDialog(app.project, runners, app.ctl.variables, secrets=self.secrets_used)
        app.push_screen(dialog, self._submit)

    def secrets_used(self, project: "Project", workflow: str, env: dict[str, str]) -> list[tuple[str, bool]]:
        """The secrets a run of `workflow` refers to (its own env and its dependencies', after the
        dialog's env overrides) and whether each is set here: names only, never a value."""
        names: set[str] = set()
        todo, seen = [workflow], set()
        while todo:
            name = todo.pop()
            wf = project.workflows.get(name)
            if wf is None or name in seen:
                continue
            seen.add(name)
            names |= secret_refs({**wf.env, **env})
            todo += [dep.workflow for dep in wf.depends_on if dep.tag is None]  # a tagged one is not rerun
        if not names:
            return []
        known = set(self.app.ctl.secrets.names())
        return [(name, name in known) for name in sorted(names)]

    def plan(self, dialog: "RunDialog", request: "RunRequest") -> None:
        """The dialog's fields changed: its plan, once the keys stop."""
        if self.app.project is not None:
            work = partial(self._plan, dialog, self.app.project, request)  # a coroutine only once it starts
            self.app.run_worker(work, group="plan", exclusive=True, exit_on_error=False)

    async def _plan(self, dialog: "RunDialog", project: "Project", request: "RunRequest") -> None:
        await asyncio.sleep(0.2)  # typing: plan once the keys stop
        try:
            # Hashing the project's files can take a while: a thread, with its own connection.
            plan = await asyncio.to_thread(
                self.app.ctl.plan_in_thread,
                project,
                request.workflow,
                request.overrides,
                request.no_cache,
                request.reuse,
                request.env or None,
            )
        except LanpoolError as exc:
            dialog.show_plan(f"[red]{exc.message}[/red]")
            return
        rows = [
            f"{'[green]RUN  [/green]' if j.action == 'run' else '[cyan]REUSE[/cyan]'} {j.workflow}"
            + (f"  ← {', '.join(j.deps)}" if j.deps else "")
            + (f"  ({_dialog_words(j.reason)})" if j.reason else "")
            for j in plan.jobs
        ]
        dialog.show_plan("\n".join(rows))

    def _submit(self, request: "RunRequest | None") -> None:
        if request is not None:
            self.app.start_run(request)

    async def run(self, request: "RunRequest") -> None:
        """The run the dialog asked for: its first job's log shown and followed here."""
        app = self.app
        project = app.project
        if project is None:  # the Run dialog opens only with a project
            return

        def submitted(sub: Submitted) -> None:
            app.feeds.adopt(sub.job_id, me)
            app.runs.refresh_runs()
            app.runs.move_to(sub.job_id)  # the cursor goes with the shown job (or its highlight takes Logs back)
            app.select_job(sub.job_id)
            app.action_tab("logs")
            app.notify(f"run {sub.run_name}: job {sub.job_id} on {sub.runner}")

        def say(text: str) -> None:
            app.notify(text, timeout=6)

        me = asyncio.current_task()

        def sink(job_id: str, stream: str, data: bytes) -> None:
            # One follower per job feeds the view: this run's, unless the user's
            # selection started another first (multi-node jobs announce no submit).
            owner = app.feeds.following.get(job_id)
            if owner is None or owner.done():
                app.feeds.adopt(job_id, me)
                owner = me
            if owner is me:
                app.log_sink(job_id, stream, data)

        outcome = await app.ctl.run(
            project,
            request.workflow,
            request.runner,
            request.overrides,
            sink=sink,
            say=say,
            on_submitted=submitted,
            no_cache=request.no_cache,
            reuse=request.reuse,
            nodes=request.nodes,
            env=request.env or None,
        )
        for job in outcome.jobs:
            app.job_ended(job.id)
        if not outcome.jobs:
            app.notify(f"run {outcome.run_name}: every job reused; nothing ran")


def _dialog_words(reason: str) -> str:
    """A plan's reason in the Run dialog's words: its boxes, not the CLI's flags."""
    return reason.replace("--no-cache", "no cache").replace("--reuse", "tick reuse")
