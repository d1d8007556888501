"""The Artifacts tab: the files the shown job brought back, with their sizes, and `d`, which
downloads a job's artifacts to a directory with a progress bar.

The pane owns which job it shows (`job_id`); the app tells it (`show_job`) when the selection
changes or the job ends.
"""

from functools import partial
from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, ProgressBar

from lanpool.app.controller import Controller
from lanpool.app.home import ControllerHome
from lanpool.app.tui.dialogs.simple import Field, FormDialog
from lanpool.app.tui.widgets.artifacts_list import ArtifactsList
from lanpool.app.tui.widgets.headers import set_header
from lanpool.app.tui.widgets.panes import Pane
from lanpool.app.tui.workers import run_on_app
from lanpool.app.views.formatting import size


class ArtifactsPane(Pane):
    def __init__(self, ctl: Controller) -> None:
        super().__init__("Artifacts", id="artifacts")
        self.ctl = ctl
        self.job_id: str | None = None

    def compose(self) -> ComposeResult:
        yield Label("no job selected", id="artifacts-header", classes="header")
        yield ArtifactsList(id="artifacts-table")
        with Vertical(id="download-box"):
            yield Label("", id="download-label")
            yield ProgressBar(id="download-progress", show_eta=False)

    def on_mount(self) -> None:
        self.query_one("#download-box").display = False

    def show_job(self, job_id: str | None) -> None:
        """This job's artifacts (None: keep the header, as when a shown job's run was deleted)."""
        self.job_id = job_id
        if not job_id:
            return
        job = self.ctl.runs.job(job_id)
        files = self.ctl.runs.artifacts(job_id)
        total = sum(n for _, n in files)
        if files:
            text = f"run {job.run_name} · job {job.id}: {len(files)} file(s), {size(total)}.  d: download"
        elif job.state.is_terminal():
            text = f"run {job.run_name} · job {job.id}: no artifacts"
        else:
            text = f"run {job.run_name} · job {job.id}: artifacts come back when the job ends"
        set_header(self.query_one("#artifacts-header", Label), text)
        self.query_one(ArtifactsList).show_files(files)

    def download(self, job_id: str) -> None:
        """Ask where, then bring job `job_id`'s artifacts there."""
        job = self.ctl.runs.job(job_id)
        # Never the project: files there would join the next snapshot (app/home.py).
        default = str(ControllerHome.downloads(job.run_name))

        def chosen(answer: dict[str, str] | None) -> None:
            if answer:
                output = Path(answer["dir"]).expanduser()
                # On the app: its one handler reports a failure (a worker's StateChanged does not bubble).
                run_on_app(self, partial(self._download, job_id, output), "download", exclusive=True)

        self.app.push_screen(
            FormDialog(
                f"Download the artifacts of job {job_id} (run {job.run_name})",
                [Field("dir", "to directory", default)],
                ok="Download",
            ),
            chosen,
        )

    async def _download(self, job_id: str, output: Path) -> None:
        box = self.query_one("#download-box")
        bar = self.query_one("#download-progress", ProgressBar)
        label = self.query_one("#download-label", Label)
        box.display = True
        label.update(f"downloading to {output}…")
        bar.update(total=None, progress=0)

        def progress(done: int, total: int) -> None:
            bar.update(total=max(total, 1), progress=done)

        try:
            files = await self.ctl.download_artifacts(job_id, output, progress)
        finally:
            box.display = False
        self.notify(f"{len(files)} file(s), {size(sum(n for _, n in files))} -> {output}")
        self.show_job(self.job_id)
