"""Runs and jobs as the front ends see them: lookup, listings, logs and metrics.

The Controller owns one `Runs` (`ctl.runs`); `app headless` and the TUI read the
store only through it (shaped by the read models of app/views/overview.py). Reads that
may take long (a whole log) open their own SQLite connection, so a worker thread
never shares the event loop's.
"""

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lanpool.app.home import ControllerHome
from lanpool.app.store import JobRow, RunRow, Store
from lanpool.app.store.slurm_nodes import slurm_nodes
from lanpool.app.views import overview
from lanpool.app.views.overview import JobLine, LogWindow, MetricsReader

if TYPE_CHECKING:
    from lanpool.app.store.run_filter import RunFilter
    from lanpool.app.views.compare import Comparison

T = TypeVar("T")


class Runs:
    def __init__(self, store: Store, home: ControllerHome) -> None:
        self.store = store
        self.home = home

    # -- lookup ------------------------------------------------------------------------

    def job(self, job_id: str) -> JobRow:
        return self.store.job(job_id)

    def resolve(self, ref: str) -> list[JobRow]:
        """Jobs named by a run name or a job id (a unique prefix of one works too)."""
        return self.store.resolve_jobs(ref)

    def compared(
        self, refs: list[str], metrics: list[str] | None = None, mode: str | None = None, sort: str | None = None
    ) -> "Comparison":
        """The jobs `refs` name, side by side (app/views/compare.py). A run gives the jobs of the
        workflow it was asked to run (a sweep's points; its dependencies' jobs are left out: name
        one by its job id); a job id gives that job. Each job once, in the order named."""
        from lanpool.app.views.compare import compare

        jobs: dict[str, JobRow] = {}
        for ref in refs:
            found = self.store.resolve_jobs(ref)
            run = self.store.run(ref) if found and found[0].run_name == ref else None
            if run is not None:
                found = [j for j in found if j.workflow == run.workflow] or found
            jobs.update((j.id, j) for j in found if j.id not in jobs)
        variables = {job_id: self.store.job_variables(job_id) for job_id in jobs}
        summaries = self.store.metric_summaries(jobs)  # kept as points arrived: no point read here
        return compare(list(jobs.values()), variables, summaries, metrics=metrics, mode=mode, sort=sort)

    def recent(self, limit: int = 50, only: "RunFilter | None" = None) -> list[RunRow]:
        """The `limit` newest runs (those `only` lets through: `status --state ...`)."""
        return self.store.recent_runs(limit, only)

    def jobs_of(self, run_name: str) -> list[JobRow]:
        return self.store.jobs_of_run(run_name)

    def jobs_of_recent(self, limit: int, only: "RunFilter | None" = None) -> dict[str, list[JobRow]]:
        """The jobs of the `limit` newest runs (those `recent(limit, only)` lists), by run name."""
        return self.store.jobs_of_recent(limit, only)

    def notes_of_recent(
        self, limit: int, only: "RunFilter | None" = None
    ) -> tuple[dict[str, list[str]], dict[str, list[tuple[str, int]]]]:
        """Their jobs' warnings and artifact files, by job id (none: not in the maps)."""
        return self.store.notes_of_recent(limit, only)

    def detail(
        self, jobs: list[JobRow], runner_states: dict[str, str | None], secret_values: list[str]
    ) -> dict[str, Any]:
        """`jobs` (a run's, or one job) in full: `status RUN` (app/views/run_detail.py)."""
        from lanpool.app.views.run_detail import run_detail

        return run_detail(self.store, jobs, runner_states, secret_values)

    def unfinished(self) -> list[JobRow]:
        """Every job of this controller that has not ended (`stop --all`), oldest first."""
        return self.store.unfinished_jobs()

    def nodes(self, job_id: str) -> list[dict[str, Any]]:
        """The job's nodes (runner, status per node); empty for a job not yet placed."""
        return self.store.nodes(job_id)

    def artifacts(self, job_id: str) -> list[tuple[str, int]]:
        return self.store.artifacts(job_id)

    def warnings(self, job_id: str) -> list[str]:
        """What went wrong with a job that ended, e.g. "artifact 'x' was not produced"."""
        return self.store.warnings(job_id)

    def log_end(self, job_id: str) -> int:
        """Where node 0's stored log ends (a Slurm job's nodes: its one log's): a live follow starts there."""
        return self.store.one_log_end(job_id, slurm_nodes(self.store.job(job_id).spec))

    # -- read models (app/views/overview.py) ----------------------------------------------------

    def log_window_start(self, job_id: str, n_lines: int, node: int) -> int:
        """The seq where a window of one node's newest `n_lines` lines starts, from line counts only."""
        from lanpool.app.store.log_counts import window_start

        return window_start(self.store.conn, job_id, node, n_lines, overview.LOG_STREAMS)

    def job_lines(self, text: str = "", status: str = "", limit: int = 500) -> list[JobLine]:
        return overview.job_lines(self.store, text, status, limit)

    def log_window(
        self, job_id: str, max_lines: int, node: int | None = None, before: dict[int, int] | None = None
    ) -> LogWindow:
        return overview.log_window(self.store, job_id, max_lines, node, before=before)

    def read_metrics(self, reader: MetricsReader) -> bool:
        """New metric points into `reader`; True if there were any."""
        return reader.update(self.store)

    # -- long reads, for worker threads: each on its own connection ---------------------------

    def search_log(self, job_id: str, needle: str, limit: int = 1000) -> list[str]:
        return self.in_own_store(lambda store: overview.search_log(store, job_id, needle, limit))

    def save_log(self, job_id: str, path: Path, node: int | None = None) -> int:
        return self.in_own_store(lambda store: overview.save_log(store, job_id, path, node))

    def in_own_store(self, fn: Callable[[Store], T]) -> T:
        """Run `fn` on a connection of its own (the Controller's belongs to the event loop's thread)."""
        store = Store(self.home.db)
        try:
            return fn(store)
        finally:
            store.close()
