"""A run seen from Python (`lanpool.Run`), and how each API call reaches the Controller: the
store opened for the call and closed after, the coroutine on a loop of its own (on a thread of its
own where the caller's thread already runs one: a notebook)."""

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from lanpool.app.controller import Controller
from lanpool.app.errors import UsageError
from lanpool.app.home import ControllerHome

T = TypeVar("T")


def controller(home: str | Path | None = None) -> Controller:
    """The Controller of `home` (a controller's LANPOOL_HOME), else of this user's default."""
    return Controller(ControllerHome(Path(home).expanduser()) if home is not None else None)


def call(work: Callable[[Controller], Coroutine[Any, Any, T]], home: str | Path | None = None) -> T:
    """`work(ctl)` to its end, on a Controller opened for it and closed after."""

    async def main() -> T:
        ctl = controller(home)
        try:
            return await work(ctl)
        finally:
            ctl.close()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a loop runs here already (Jupyter)
        return pool.submit(asyncio.run, main()).result()


def _job_json(job: Any) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "run": job.run_name,
        "workflow": job.workflow,
        "runner": job.runner,
        "status": job.status,
        "exit_code": job.exit_code,
        "error": job.error,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
    }


class Run:
    """A run by name (`lanpool.run` returns one; `lanpool.Run("pink-fly-1")` opens one the CLI
    or the TUI started). Each method asks the runners where its jobs are not over yet."""

    def __init__(self, name: str, home: str | Path | None = None) -> None:
        self.name = name
        self.home = home

    def __repr__(self) -> str:
        return f"lanpool.Run({self.name!r})"

    def _jobs(self, ctl: Controller, job: str | None) -> list[Any]:
        jobs = ctl.runs.resolve(self.name)
        if job is None:
            return list(jobs)
        mine = [j for j in jobs if j.id == job or j.id.startswith(job)]
        if len(mine) != 1:
            raise UsageError(f"run {self.name} has no job {job!r} (its jobs: {', '.join(j.id for j in jobs)})")
        return mine

    def status(self) -> list[dict[str, Any]]:
        """Each job of the run: status, exit code, runner, times (refreshed from its runner)."""

        async def go(ctl: Controller) -> list[dict[str, Any]]:
            jobs = self._jobs(ctl, None)
            await ctl.refresh(jobs)
            return [_job_json(ctl.runs.job(j.id)) for j in jobs]

        return call(go, self.home)

    def wait(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """Wait until every job of the run has ended (their logs and artifacts brought back, as
        `logs -f` does); their statuses. `timeout` seconds: TimeoutError, the jobs left running."""

        async def go(ctl: Controller) -> list[dict[str, Any]]:
            jobs = self._jobs(ctl, None)
            await asyncio.wait_for(asyncio.gather(*(ctl.follow(j.id, follow=True) for j in jobs)), timeout)
            return [_job_json(ctl.runs.job(j.id)) for j in jobs]

        return call(go, self.home)

    def logs(self, job: str | None = None) -> str:
        """The log text (stdout and stderr lines) of the run's jobs so far, or of one `job`."""

        async def go(ctl: Controller) -> str:
            parts: list[str] = []

            def sink(_job_id: str, stream: str, data: bytes) -> None:
                if stream in ("out", "err"):
                    parts.append(data.decode("utf-8", "replace"))

            for j in self._jobs(ctl, job):
                await ctl.follow(j.id, sink=sink, follow=False)
            return "".join(parts)

        return call(go, self.home)

    def metrics(self, job: str | None = None) -> list[dict[str, Any]]:
        """The metric points its jobs logged (step, name, value, time; with `job_id`), in order."""

        async def go(ctl: Controller) -> list[dict[str, Any]]:
            jobs = self._jobs(ctl, job)
            await ctl.refresh(jobs)
            return [{**p, "job_id": j.id} for j in jobs for p in ctl.metrics(j.id)]

        return call(go, self.home)

    def stop(self, grace: float | None = None) -> list[dict[str, Any]]:
        """Stop the jobs not over yet (TERM, then KILL after `grace` seconds); every job's status."""

        async def go(ctl: Controller) -> list[dict[str, Any]]:
            jobs = self._jobs(ctl, None)
            for j in jobs:
                if not ctl.runs.job(j.id).state.is_terminal():
                    await ctl.stop(j.id, grace_s=grace)
            return [_job_json(ctl.runs.job(j.id)) for j in jobs]

        return call(go, self.home)
