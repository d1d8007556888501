"""A followed sweep (`run W --sweep ...` without -d, `lanpool.run(..., detach=False)`): each point
followed from the moment it is sent, its end freeing a `--max-parallel` slot for the next, and
`stop_worst` judged on the points' metrics as they come in (app/runs/halving.py).

Both front ends use this one follower (through Controller.sweep_follower), so a sweep followed
from Python keeps the same limits and stops the same points as one followed from the shell.
"""

import asyncio
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any

from lanpool.app.runs.halving import Rungs
from lanpool.app.runs.result import Submitted
from lanpool.app.runs.sweep import point_text
from lanpool.app.store import JobRow, Store
from lanpool.app.store.metric_lines import MetricsReader
from lanpool.app.store.metric_summaries import better_is
from lanpool.app.workflows.model import StopWorst

FOLLOWED_AT_ONCE = 16  # points whose logs are followed together; the others' are read when their turn comes
JUDGED_EVERY_S = 1.0  # how often the points' metrics are looked at (stop_worst)


class SweepFollower:
    """Use as `async with`: hand `sent` and `slots` to Controller.sweep, then `await wait()`.
    Leaving the block (done, an error, Ctrl-C) stops following; the points keep running."""

    def __init__(
        self,
        store: Store,
        follow: Callable[[str], Coroutine[Any, Any, JobRow]],
        stop: Callable[[str, str], Coroutine[Any, Any, object]],
        workflow: str,
        *,
        max_parallel: int | None = None,
        rule: StopWorst | None = None,
        say: Callable[[str], None] = lambda _text: None,
        on_end: Callable[[JobRow, dict[str, str]], None] | None = None,
    ) -> None:
        self.store = store
        self._follow = follow
        self._stop = stop
        self.workflow = workflow
        self.rule = rule
        self.say = say
        self.on_end = on_end
        self.slots = asyncio.Semaphore(max_parallel) if max_parallel else None
        self.mine: list[str] = []  # the points' jobs sent (not their dependencies'), in order
        self.points: dict[str, dict[str, str]] = {}  # job id -> its point
        self.stopped: dict[str, str] = {}  # job id -> why stop_worst stopped it
        self._limit = asyncio.Semaphore(FOLLOWED_AT_ONCE)
        self._follows: list[asyncio.Task[None]] = []
        self._judge: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "SweepFollower":
        if self.rule is not None:  # judged from the first point: with --max-parallel the last come much later
            self._judge = asyncio.create_task(self._judge_points(self.rule))
        return self

    async def __aexit__(
        self, _kind: type[BaseException] | None, _exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        tasks = [*self._follows, *([self._judge] if self._judge else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def sent(self, sub: Submitted, point: dict[str, str]) -> None:
        """Controller.sweep's `on_submitted`: a point's job is followed from now on."""
        if self.store.job(sub.job_id).workflow != self.workflow:
            return  # a point's dependency: the point's own job waits for it
        self.mine.append(sub.job_id)
        self.points[sub.job_id] = point
        self._follows.append(asyncio.create_task(self._follow_one(sub.job_id)))

    async def wait(self) -> None:
        """Until every point sent has ended (call once Controller.sweep has sent them all)."""
        await asyncio.gather(*self._follows)

    async def _follow_one(self, job_id: str) -> None:
        try:
            async with self._limit:
                row = await self._follow(job_id)
        finally:
            if self.slots is not None:
                self.slots.release()  # its end frees a slot for the next point
        if self.on_end is not None:
            self.on_end(row, self.points[job_id])

    async def _judge_points(self, rule: StopWorst) -> None:
        rungs = Rungs(rule, better_is(rule.metric, rule.mode or None))
        readers: dict[str, MetricsReader] = {}
        stops: list[asyncio.Task[object]] = []
        try:
            while True:
                await asyncio.sleep(JUDGED_EVERY_S)
                for job_id in self.mine[len(readers) :]:  # the points sent since
                    readers[job_id] = MetricsReader(job_id)
                for job_id, reader in readers.items():
                    if job_id in self.stopped or not reader.update(self.store):
                        continue
                    for verdict in rungs.observe(job_id, reader.points):
                        if verdict.stop and not self.store.job(job_id).state.is_terminal():
                            why = verdict.reason(rule.metric)
                            self.stopped[job_id] = why
                            run = self.store.job(job_id).run_name
                            self.say(f"run {run}: point {point_text(self.points[job_id])}: {why}")
                            stops.append(asyncio.create_task(self._stop(job_id, why)))
        finally:
            await asyncio.gather(*stops, return_exceptions=True)  # each stop recorded before the sweep ends
