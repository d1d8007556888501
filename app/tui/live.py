"""Background work of an interactive front end: discovery, runner checks, live logs.

The TUI owns one `LiveFeeds`; everything here goes through the controller and
its pool (never the store itself) and tells the front end by callbacks, which
the TUI turns into messages. No textual here.
"""

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from lanpool.app.controller import Controller, LogSink
from lanpool.app.errors import LanpoolError

if TYPE_CHECKING:  # app.runners.discovery imports zeroconf, which only browsing needs
    from lanpool.app.runners.discovery import Advert, Browser

log = logging.getLogger(__name__)

PROBE_EVERY_S = 3.0  # how often known runners are checked (LIVE/BUSY/OFFLINE)
# While a conflict is on record, a fresh browse this often says whether its claim is still
# made: one whose maker died without a goodbye stays in zeroconf's cache for many minutes.
CONFLICT_SWEEP_S = 10.0


class LiveFeeds:
    def __init__(
        self,
        ctl: Controller,
        on_runners: Callable[[], None],
        on_log: LogSink,
        on_job_ended: Callable[[str], None],
        on_error: Callable[[str], None],
        interfaces: list[str] | None = None,
    ) -> None:
        self.ctl = ctl
        self._on_runners = on_runners
        self._on_log = on_log
        self._on_job_ended = on_job_ended
        self._on_error = on_error
        self._interfaces = interfaces
        self._browser: Browser | None = None
        self._claims: dict[str, Advert] = {}  # mDNS service -> the last advert heard from it (what is announced now)
        self._last_sweep = 0.0
        self._tasks: set[asyncio.Task[Any]] = set()
        self.following: dict[str, asyncio.Task[Any]] = {}  # job id -> the task bringing its log in

    async def start(self, discover: bool = True, probe_every_s: float = PROBE_EVERY_S) -> None:
        if discover:
            # zeroconf only when browsing: importing it costs ~100 ms of start-up.
            from lanpool.app.runners.discovery import Browser, browse_interfaces

            interfaces = browse_interfaces() if self._interfaces is None else self._interfaces
            browser = self._browser = Browser(interfaces, self._seen, self._gone)
            try:
                await browser.start()
            except OSError as exc:
                self._on_error(f"mDNS discovery is off: {exc}")
                self._browser = None
        if probe_every_s > 0:
            self._spawn(self._probe_loop(probe_every_s))

    def _seen(self, advert: "Advert") -> None:
        self._claims[advert.service] = advert
        self._spawn(self._fold(advert))

    async def _fold(self, advert: "Advert") -> None:
        try:
            await self.ctl.pool.fold_advert(advert)
        except LanpoolError as exc:
            self._on_error(f"mDNS advert of {advert.name}: {exc.message}")
        self._on_runners()

    def _gone(self, service: str) -> None:
        """A service said goodbye: a conflict it made is over, unless another still makes it."""
        self._claims.pop(service, None)
        names = self.ctl.pool.goodbye(service, list(self._claims.values()))
        if names:
            self._spawn(self._recheck(names))

    async def _recheck(self, names: list[str]) -> None:
        await self.ctl.pool.probe_all(names)
        self._on_runners()

    async def sweep_conflicts(self) -> None:
        """With a conflict on record, browse afresh: a claim no longer heard is over."""
        if self._browser is None or not self.ctl.pool.has_conflicts():
            return
        if time.time() - self._last_sweep < CONFLICT_SWEEP_S:
            return
        from lanpool.app.runners.discovery import discover

        self._last_sweep = started = time.time()
        browse_s = self.ctl.pool.conflict_browse_s
        adverts = await discover(self._browser.interfaces, browse_s)
        heard = {a.service for a in adverts}
        self._claims = {service: a for service, a in self._claims.items() if service in heard}
        await self.ctl.pool.fold_browse(adverts, started, browse_s)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _probe_loop(self, every_s: float) -> None:
        while True:
            try:
                await self.sweep_conflicts()
            except OSError as exc:
                self._on_error(f"mDNS browse failed: {exc}")
            await self.check_runners()
            await asyncio.sleep(every_s)

    async def check_runners(self) -> None:
        await self.ctl.pool.probe_all()
        self._on_runners()

    def follow(self, job_id: str, start: int | None = None) -> bool:
        """Bring a running job's log in live (once per job), lines from `start` on (the
        front end shows what the store held up to there); False if already followed."""
        task = self.following.get(job_id)
        if task is not None and not task.done():
            return False
        self.following[job_id] = self._spawn(self._follow(job_id, start))
        return True

    def adopt(self, job_id: str, task: asyncio.Task[Any] | None = None) -> None:
        """A job whose log some other task (a run started here) already brings in."""
        task = task or asyncio.current_task()
        assert task is not None, "adopt() is called from the task that follows the job"
        self.following[job_id] = task

        def over(done: asyncio.Task[Any]) -> None:  # then nobody follows it: the app's sync may refresh it
            if self.following.get(job_id) is done:
                del self.following[job_id]

        task.add_done_callback(over)

    async def _follow(self, job_id: str, start: int | None) -> None:
        try:
            await self.ctl.follow(job_id, self._on_log, follow=True, say=self._on_error, from_store=False, start=start)
        except LanpoolError as exc:
            self._on_error(f"job {job_id}: {exc.message}")
        else:
            self._on_job_ended(job_id)
        finally:
            if self.following.get(job_id) is asyncio.current_task():
                del self.following[job_id]

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._browser is not None:
            await self._browser.close()
