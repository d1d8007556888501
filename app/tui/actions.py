"""What the user starts from the TUI: runs, stop and abort, downloads, deleting and
pruning old runs (the runner pool's keys are the Runners pane's, app/tui/panes/runners.py). Each asks first where it acts on something (a
dialog), then does its I/O in a worker; a failed worker becomes a notification
(LanpoolBase.on_worker_state_changed)."""

import asyncio
import subprocess
import sys
from typing import TYPE_CHECKING

from textual import work

from lanpool.app.controller import DEFAULT_PRUNE_AGE, Removal, Submitted, parse_age
from lanpool.app.errors import LanpoolError
from lanpool.app.secret_store import secret_refs
from lanpool.app.tui.dialogs.simple import ConfirmDialog, Field, FormDialog
from lanpool.app.tui.job_view import JobView
from lanpool.app.tui.widgets.tables import RunsTable
from lanpool.app.views.formatting import size
from lanpool.protocol import JobState

if TYPE_CHECKING:  # the Run dialog and the workflows (yaml) load when r is first pressed, not before the first frame
    from lanpool.app.tui.dialogs.run_dialog import RunDialog, RunRequest
    from lanpool.app.workflows import Project


class Actions(JobView):
    # -- stop / abort ---------------------------------------------------------------------

    def action_stop(self, abort: bool = False) -> None:
        job_id = self._selected_job()
        if not job_id:
            self.notify("select a job in Runs first")
            return
        job = self.ctl.runs.job(job_id)
        if job.state.is_terminal():
            self.notify(f"job {job_id} already ended: {job.status}")
            return
        verb = "Abort" if abort else "Stop"
        question = f"{verb} job {job_id} ({job.workflow}, run {job.run_name})?" + (
            "\nNo artifacts come back from an aborted job."
            if abort
            else "\nSIGTERM, then SIGKILL after the grace period; artifacts come back."
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop(job_id, abort)

        self.push_screen(ConfirmDialog(question, verb), answered)

    def action_abort(self) -> None:
        self.action_stop(abort=True)

    @work(group="stop", exit_on_error=False)
    async def _stop(self, job_id: str, abort: bool) -> None:
        self.notify(f"{'aborting' if abort else 'stopping'} job {job_id}…")
        job = await self.ctl.stop(job_id, abort=abort)
        self.notify(f"job {job_id}: {job.status}")
        self.show_runs()

    # -- a shell in a running job ------------------------------------------------------------

    def action_shell(self) -> None:
        """`app headless ssh JOB` on this terminal, the TUI suspended until the shell exits; on the
        node the log shows, when it shows one node of several."""
        job_id = self._selected_job()
        if not job_id:
            self.notify("select a job in Runs first")
            return
        job = self.ctl.runs.job(job_id)
        if job.state is not JobState.RUNNING:
            self.notify(f"job {job_id} is {job.status}: a shell opens in a running job only")
            return
        with self.suspend():
            # A process of its own: the shell owns the terminal, with no event loop of ours in between.
            node = [] if self.node is None or self.job_id != job_id else ["--node", str(self.node)]
            subprocess.run(
                [sys.executable, "-m", "lanpool.app.cli.main", "headless", "ssh", job_id, *node], check=False
            )

    # -- run ------------------------------------------------------------------------------

    def action_run(self) -> None:
        self.load_project()
        if self.project is None:
            self.notify(self.project_error or "no project", severity="error")
            return
        if not self.project.workflows:
            self.notify("the project has no workflows", severity="error")
            return
        from lanpool.app.tui.dialogs.run_dialog import RunDialog

        runners = self.ctl.pool.names()
        dialog = RunDialog(self.project, runners, self.ctl.variables, secrets=self._secrets_used)
        self.push_screen(dialog, self._submit)

    def _secrets_used(self, project: "Project", workflow: str, env: dict[str, str]) -> list[tuple[str, bool]]:
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
        known = set(self.ctl.secrets.names())
        return [(name, name in known) for name in sorted(names)]

    def on_run_dialog_plan_wanted(self, event: "RunDialog.PlanWanted") -> None:
        if self.project is not None:
            self._plan(event.dialog, self.project, event.request)

    @work(group="plan", exclusive=True, exit_on_error=False)
    async def _plan(self, dialog: "RunDialog", project: "Project", request: "RunRequest") -> None:
        await asyncio.sleep(0.2)  # typing: plan once the keys stop
        try:
            # Hashing the project's files can take a while: a thread, with its own connection.
            plan = await asyncio.to_thread(
                self.ctl.plan_in_thread,
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
            self._run(request)

    @work(group="runs", exit_on_error=False)
    async def _run(self, request: "RunRequest") -> None:
        project = self.project
        if project is None:  # the Run dialog opens only with a project
            return

        def submitted(sub: Submitted) -> None:
            self.feeds.adopt(sub.job_id, me)
            self.show_runs()
            table = self.query_one(RunsTable)
            if sub.job_id in table.rows:  # the cursor goes with the shown job (or its highlight takes Logs back)
                table.move_cursor(row=table.get_row_index(sub.job_id), animate=False)
            self.select_job(sub.job_id)
            self.action_tab("logs")
            self.notify(f"run {sub.run_name}: job {sub.job_id} on {sub.runner}")

        def say(text: str) -> None:
            self.notify(text, timeout=6)

        me = asyncio.current_task()

        def sink(job_id: str, stream: str, data: bytes) -> None:
            # One follower per job feeds the view: this run's, unless the user's
            # selection started another first (multi-node jobs announce no submit).
            owner = self.feeds.following.get(job_id)
            if owner is None or owner.done():
                self.feeds.adopt(job_id, me)
                owner = me
            if owner is me:
                self._on_log(job_id, stream, data)

        outcome = await self.ctl.run(
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
            self._job_ended(job.id)
        if not outcome.jobs:
            self.notify(f"run {outcome.run_name}: every job reused; nothing ran")

    # -- download -------------------------------------------------------------------------

    def action_download(self) -> None:
        job_id = self._selected_job()
        if not job_id:
            self.notify("select a job in Runs first")
            return
        self.artifacts.download(job_id)

    # -- delete / prune -------------------------------------------------------------------

    def action_delete_run(self) -> None:
        job_id = self._selected_job()
        if not job_id:
            self.notify("select a job in Runs first")
            return
        run = self.ctl.runs.job(job_id).run_name
        try:
            preview = self.ctl.retention.remove([run], dry_run=True)  # refuses a run still running
        except LanpoolError as exc:
            self.notify(exc.message, severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._removed(self.ctl.retention.remove([run]))

        self.push_screen(ConfirmDialog(f"Delete run {run}?\n{_what(preview)}", "Delete"), answered)

    def action_prune(self) -> None:
        def chosen(answer: dict[str, str] | None) -> None:
            if not answer:
                return
            try:
                older_than = parse_age(answer["age"])
            except LanpoolError as exc:
                self.notify(exc.message, severity="warning")
                return
            preview = self.ctl.retention.prune(older_than, dry_run=True)
            if not preview.runs:
                self.notify(f"no ended run is older than {answer['age']}")
                return

            def answered(yes: bool | None) -> None:
                if yes:
                    self._removed(self.ctl.retention.prune(older_than))

            question = f"Delete {len(preview.runs)} run(s) older than {answer['age']}?\n{_what(preview)}"
            self.push_screen(ConfirmDialog(question, "Delete"), answered)

        self.push_screen(
            FormDialog("Delete ended runs created longer ago than", [Field("age", "age", DEFAULT_PRUNE_AGE)]), chosen
        )

    def _removed(self, removal: Removal) -> None:
        if self.job_id in removal.jobs:  # the log shown was of a job now gone
            self.job_id = None
        self.notify(f"deleted {len(removal.runs)} run(s), {len(removal.jobs)} job(s): {size(removal.freed)} freed")
        self.show_runs()


def _dialog_words(reason: str) -> str:
    """A plan's reason in the Run dialog's words: its boxes, not the CLI's flags."""
    return reason.replace("--no-cache", "no cache").replace("--reuse", "tick reuse")


def _what(removal: Removal) -> str:
    return (
        f"{len(removal.jobs)} job(s), their logs and {removal.files} artifact file(s): "
        f"{size(removal.freed)} freed on this machine (runners keep their copies until `app agent gc`)."
    )
