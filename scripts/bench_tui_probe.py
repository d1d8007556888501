"""The measured side of scripts/bench-tui: runs one TUI in this process and times it.

Started by scripts/bench_tui.py as a fresh interpreter; writes a JSON object to
$BENCH_OUT. All times are CLOCK_MONOTONIC seconds since $BENCH_T0, which the
parent reads just before it spawns this process, so they include interpreter
start-up and every import.

How "the screen reflects it" is measured: the app runs under Textual's pilot
(`App.run_test`, headless driver, fixed terminal size). `App._display`, which
Textual calls with each frame the compositor produced (a full `LayoutUpdate`
or a `ChopsUpdate` of the changed regions), is wrapped: the wrapper also
turns the frame into the escape sequences a terminal would get
(`render_segments`, the work the real driver does minus the write) and then
checks the pending expectations against that frame. A key is injected the
way the terminal driver does it (`driver.send_message(events.Key)`, i.e.
`run_coroutine_threadsafe` into the app's loop), timestamped just before; it
counts as answered at the first frame whose *text* shows the change (e.g. the
Metrics pane's title, the job's log header, the log's first line after `g`,
the newest line after `G`; log lines are matched by their first 24 characters,
which a notification toast over the right of the screen leaves visible) while
the app's state agrees (active tab, cursor, following). Latency = that frame's
time - the key's time. No pilot waiting (`press`, `pause`) sits inside a
measurement.

    python scripts/bench_tui_probe.py startup lanpool PROJECT [--big-job ID --expect RUN] [--size WxH]
    python scripts/bench_tui_probe.py startup minimal [--rows N]
    python scripts/bench_tui_probe.py follow PROJECT --runner HOST:PORT [--workflow NAME] [--gap S]

Diagnostics (follow): BENCH_PROFILE=FILE dumps a cProfile of the run;
BENCH_DEBUG=1 keeps each key's first frames (state and text) and the object
types a full collection walks; BENCH_GC="freeze;thr:A,B,C" tries other
collector settings after start-up. BENCH_TRACE=1 keeps, per key, where its time went
(handled, each screen update, each widget's render, GC CPU); BENCH_TRACE=FILE also dumps a
cProfile of the keys' windows only (key sent -> its frame) there. Whatever the mode, the probe goes through
`app.tui.load_app()` like `app PATH` does (imports, collector settings).
"""

import os
import time

T0 = float(os.environ.get("BENCH_T0", time.monotonic()))


def now() -> float:
    return time.monotonic() - T0


MARKS: dict[str, float] = {"interpreter": now()}

import argparse  # noqa: E402
import asyncio  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_stats import pct  # noqa: E402


def rss_mib(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- frames -------------------------------------------------------------------------------


def frame_text(update) -> str:
    """The characters a frame writes, one line of text per updated strip."""
    from textual._compositor import ChopsUpdate, LayoutUpdate

    out = []
    if isinstance(update, LayoutUpdate):
        for line in update.strips:
            out.append("".join(seg.text for strip in line for seg in strip))
    elif isinstance(update, ChopsUpdate):
        for chops in update.chops:
            out.append("".join(seg.text for strip in chops.values() if strip is not None for seg in strip))
    return "\n".join(out)


class Frames:
    """Wraps App._display: counts frames, renders them as a terminal would, answers waiters."""

    def __init__(self, app) -> None:
        from textual._compositor import CompositorUpdate

        self.app = app
        self.times: list[float] = []
        self.waiters: list[tuple] = []  # (predicate(text) -> bool, future)
        self.render_s = 0.0
        self.debug = None  # a list: every frame's (time, state()) goes there
        self.state = None
        original = app._display

        def display(screen, renderable) -> None:
            original(screen, renderable)
            if not isinstance(renderable, CompositorUpdate):
                return
            t = time.monotonic()
            renderable.render_segments(app.console)  # what the terminal driver would write
            done = time.monotonic()
            self.render_s += done - t
            self.times.append(done - T0)
            if self.debug is not None:
                text = frame_text(renderable)
                rows = [line for line in text.split("\n") if line.strip()]
                self.debug.append(
                    (
                        round(done - T0, 3),
                        self.state() if self.state else None,
                        type(renderable).__name__,
                        len(rows),
                        [r[:120] for r in rows[-2:]],
                    )
                )
            if self.waiters:
                text = frame_text(renderable)
                for waiter in list(self.waiters):
                    pred, fut = waiter
                    if not fut.done() and pred(text):
                        fut.set_result(done - T0)
                        self.waiters.remove(waiter)

        app._display = display

    async def wait(self, pred, timeout: float = 5.0) -> float | None:
        """Time (since T0) of the first frame from now on that satisfies pred; None on timeout."""
        fut = asyncio.get_running_loop().create_future()
        waiter = (pred, fut)
        self.waiters.append(waiter)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None
        finally:
            if waiter in self.waiters:
                self.waiters.remove(waiter)


def send_key(app, key: str) -> float:
    """Inject a key as the terminal driver does; returns the time (since T0) it was sent."""
    from textual import events

    char = key if len(key) == 1 else None
    event = events.Key(key, char)
    event.set_sender(app)
    t = now()
    app._driver.send_message(event)
    return t


class KeyTrace:
    """BENCH_TRACE=1: where a key's time goes. Marks, since the key was sent: its handling
    (App.on_event, start and end), each screen update after it (Screen._on_timer_update: start,
    end, whether it laid the screen out) and the GC's CPU time in between."""

    def __init__(self, app) -> None:
        from textual.screen import Screen

        self.events: list[tuple[float, str]] = []
        self.on = False
        # BENCH_TRACE=FILE: also a cProfile of the keys' windows only (key sent -> its frame), dumped there.
        self.profile = None if os.environ["BENCH_TRACE"] == "1" else __import__("cProfile").Profile()
        original_event = app.on_event
        original_update = Screen._on_timer_update
        trace = self

        async def on_event(event) -> None:
            from textual import events

            key = trace.on and isinstance(event, events.Key)
            if key:
                trace.mark("key in")
            await original_event(event)
            if key:
                trace.mark("key out")

        def update(screen) -> None:
            if trace.on:
                trace.mark("update" + (" layout" if screen._layout_required else ""))
            original_update(screen)
            if trace.on:
                trace.mark("update end")

        from textual._styles_cache import StylesCache

        original_render = StylesCache.render_widget

        def render_widget(cache, widget, crop):
            if not trace.on:
                return original_render(cache, widget, crop)
            t = time.monotonic()
            try:
                return original_render(cache, widget, crop)
            finally:
                # (widget, lines asked, ms) of each widget render in the key's window
                trace.events.append(
                    (
                        now(),
                        f"render {widget.__class__.__name__}#{widget.id} {crop.height} "
                        f"{(time.monotonic() - t) * 1000:.1f}",
                    )
                )

        StylesCache.render_widget = render_widget  # type: ignore[method-assign]
        app.on_event = on_event
        Screen._on_timer_update = update  # type: ignore[method-assign]

    def mark(self, what: str) -> None:
        self.events.append((now(), what))

    def start(self) -> None:
        self.events, self.on = [], True
        if self.profile is not None:
            self.profile.enable()

    def take(self, sent: float) -> list:
        self.on = False
        if self.profile is not None:
            self.profile.disable()
        return [(round((t - sent) * 1000, 1), what) for t, what in self.events]


async def key_latency(app, frames: Frames, key: str, pred, timeout: float = 5.0) -> float | None:
    """Seconds from sending `key` to the first frame satisfying pred(text) (None: not seen in `timeout`)."""
    waiting = asyncio.ensure_future(frames.wait(pred, timeout))
    await asyncio.sleep(0)  # registered before the key goes
    sent = send_key(app, key)
    seen = await waiting
    return None if seen is None else seen - sent


# -- start-up ---------------------------------------------------------------------------------


def import_app() -> type:
    """What `app PATH` runs before building the app: app.cli.main (imported with the collector
    off), then app.tui.load_app()."""
    gc.disable()
    import lanpool.app.cli.main  # noqa: F401

    gc.freeze()
    gc.enable()
    from lanpool.app import tui

    return tui.load_app()


async def startup_lanpool(args) -> dict:
    LanpoolApp = import_app()
    from textual.widgets import DataTable, TabbedContent

    from lanpool.app.tui.widgets.log_view import LogView

    MARKS["imports"] = now()
    tui = LanpoolApp(Path(args.project).resolve())
    MARKS["constructed"] = now()
    frames = Frames(tui)
    res: dict = {}
    # The first frame that shows the runs list: its header, and the newest run when there are runs.
    expect = args.expect
    rows_seen = asyncio.ensure_future(frames.wait(lambda text: "SUBMITTED" in text and expect in text, 60))
    await asyncio.sleep(0)
    async with tui.run_test(size=args.size, notifications=True) as pilot:
        MARKS["ready"] = now()  # run_test: the app is ready and the screen has processed its messages
        table = tui.query_one("#runs-table", DataTable)
        MARKS["first_frame"] = frames.times[0] if frames.times else float("nan")
        MARKS["rows_frame"] = (await rows_seen) or float("nan")
        MARKS["interactive"] = max(MARKS["ready"], MARKS["rows_frame"])
        res["rows"] = table.row_count
        tabs = tui.query_one("#tabs", TabbedContent)
        # The user's first key, right away: Runners tab.
        res["first_key_s"] = await key_latency(
            tui, frames, "2", lambda text: tabs.active == "runners" and "LAST SEEN" in text
        )
        MARKS["first_key_answered"] = now()
        await pilot.pause(0.3)
        trace = KeyTrace(tui) if os.environ.get("BENCH_TRACE") else None
        if trace:
            trace.start()
        t_key = now()
        res["runs_tab_s"] = await key_latency(
            tui, frames, "1", lambda text: tabs.active == "runs" and "SUBMITTED" in text
        )
        if trace:
            res["runs_tab_trace"] = trace.take(t_key)
            if trace.profile is not None:
                trace.profile.dump_stats(os.environ["BENCH_TRACE"])
        if args.big_job and table.row_count > 2:
            await pilot.pause(0.3)
            from textual.coordinate import Coordinate

            names = [str(table.get_cell_at(Coordinate(r, 0))) for r in range(3)]
            keys = [table.coordinate_to_cell_key(Coordinate(r, 0)).row_key.value for r in range(3)]
            assert keys[2] == args.big_job, f"the big job is not row 2 of the runs list: {keys}"
            table.move_cursor(row=0)
            await pilot.pause(0.3)
            res["down_small_job_s"] = await key_latency(
                tui, frames, "down", lambda text: table.cursor_row == 1 and names[1] in text
            )
            await pilot.pause(0.3)
            # Down onto the big job: highlighting a row loads its log window (LOG_WINDOW lines) from SQLite.
            res["down_big_job_s"] = await key_latency(
                tui, frames, "down", lambda text: table.cursor_row == 2 and names[2] in text and tui.job_id == keys[2]
            )
            await pilot.pause(0.3)
            view = tui.query_one(LogView)
            header = f"job {args.big_job}"
            last = view.lines[-1].text[:24] if view.lines else "?"
            res["enter_log_s"] = await key_latency(
                tui, frames, "enter", lambda text: tabs.active == "logs" and header in text and last in text
            )
            res["log_window_lines"] = len(view.lines)
            await pilot.pause(0.3)
            top = [line.text[:24] for line in view.lines[:3]]
            res["log_top_s"] = await key_latency(
                tui, frames, "g", lambda text: not view.following and any(t in text for t in top)
            )
            await pilot.pause(0.5)  # the older page comes in from SQLite
            res["log_window_lines_after_g"] = len(view.lines)
            res["log_end_s"] = await key_latency(tui, frames, "G", lambda text: view.following and last in text)
    res["frames"] = len(frames.times)
    return res


async def startup_minimal(args) -> dict:
    from textual.app import App, ComposeResult
    from textual.widgets import DataTable

    MARKS["imports"] = now()

    class Minimal(App):
        def compose(self) -> ComposeResult:
            yield DataTable()

        def on_mount(self) -> None:
            table = self.query_one(DataTable)
            table.cursor_type = "row"
            for label in (
                "RUN",
                "JOB",
                "WORKFLOW",
                "VARIABLES",
                "RUNNER",
                "STATUS",
                "SUBMITTED",
                "DURATION",
                "ARTIFACTS",
            ):
                table.add_column(label)
            for i in range(args.rows):  # the shape of lanpool's runs list: RUNS_LIMIT rows, 9 columns
                table.add_row(
                    f"swift-fox-{i}",
                    f"{i:012x}",
                    "train",
                    "epochs=10 lr=0.0003 model=117M",
                    "gpu1",
                    "DONE (0)",
                    f"{i + 1}h ago",
                    "12m 3s",
                    "2",
                )
            table.focus()

    tui = Minimal()
    MARKS["constructed"] = now()
    frames = Frames(tui)
    res: dict = {}
    async with tui.run_test(size=args.size):
        MARKS["ready"] = now()
        table = tui.query_one(DataTable)
        MARKS["first_frame"] = frames.times[0] if frames.times else float("nan")
        if table.row_count and frames.times:
            MARKS["rows_frame"] = MARKS["first_frame"]
        else:
            MARKS["rows_frame"] = await frames.wait(lambda text: "swift-fox-0" in text, 10) or float("nan")
        MARKS["interactive"] = max(MARKS["ready"], MARKS["rows_frame"])
        res["rows"] = table.row_count
        res["first_key_s"] = await key_latency(
            tui, frames, "down", lambda text: table.cursor_row == 1 and "swift-fox-1" in text
        )
        MARKS["first_key_answered"] = now()
    res["frames"] = len(frames.times)
    return res


# -- following a fast job --------------------------------------------------------------------------


async def follow(args) -> dict:
    LanpoolApp = import_app()
    from textual.widgets import TabbedContent

    from lanpool.app.tui.dialogs.run_dialog import RunRequest
    from lanpool.app.tui.widgets.log_view import LogView

    # mDNS browsing off: agents of other programs announcing on this machine's loopback would join the
    # pool; the bench's runner is known by address (the pool's probe loop still checks it every 3 s).
    tui = LanpoolApp(Path(args.project).resolve(), discover=False)
    frames = Frames(tui)
    trace = KeyTrace(tui) if os.environ.get("BENCH_TRACE") else None
    gc_pauses: list[tuple[float, int, float, float]] = []  # (time, generation, seconds, CPU seconds)
    gc_started = [0.0, 0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_started[:] = time.monotonic(), time.thread_time()
        else:
            gc_pauses.append(
                (
                    gc_started[0] - T0,
                    info["generation"],
                    time.monotonic() - gc_started[0],
                    time.thread_time() - gc_started[1],
                )
            )

    gc.callbacks.append(on_gc)
    received = {"lines": 0, "chunks": 0, "first": None, "last": None}
    shown = {"lines": 0, "appends": 0, "first": None, "last": None}
    on_log = tui.log_sink

    def counting_on_log(job_id: str, stream: str, data: bytes) -> None:
        if job_id == tui.job_id and stream != "met":
            t = now()
            received["lines"] += data.count(b"\n")
            received["chunks"] += 1
            received["first"] = received["first"] or t
            received["last"] = t
            tail = data[data.rfind(b"\n", 0, len(data) - 1) + 1 :][:10]
            if tail.isdigit():  # the flood's lines start with their number
                received["last_no"] = int(tail)
        on_log(job_id, stream, data)

    tui.log_sink = counting_on_log  # the sink the Run worker and the feeds call
    tui.feeds._on_log = counting_on_log
    rng = random.Random(7)
    samples: list[dict] = []
    memory: list[dict] = []
    lag: list[float] = []
    behind: list[int] = []
    spikes: list = []
    res: dict = {}

    async def sample_memory(view) -> None:
        while True:
            memory.append(
                {"t": now(), "rss_mib": rss_mib(), "view_lines": len(view.lines), "pending": len(tui.logs.pending)}
            )
            shown = view.lines[-1].text[:10] if view.lines else ""
            streaming = received["last"] is not None and now() - received["last"] < 0.2
            if view.following and streaming and shown.isdigit() and "last_no" in received:
                behind.append(received["last_no"] - int(shown))  # newest line received - newest held by the view
            await asyncio.sleep(0.5)

    async def loop_lag() -> None:
        """How late a 10 ms sleep wakes up: the event loop's own responsiveness."""
        while True:
            t, c = time.monotonic(), time.thread_time()
            await asyncio.sleep(0.01)
            lag.append(time.monotonic() - t - 0.01)
            if lag[-1] > 0.05:  # (when, ms late, ms of CPU this thread used meanwhile)
                spikes.append((round(t - T0, 3), round(lag[-1] * 1000), round((time.thread_time() - c) * 1000)))

    async with tui.run_test(size=args.size, notifications=True) as pilot:
        view = tui.query_one(LogView)
        append = view.append

        def counting_append(lines) -> None:
            if lines and not getattr(view, "detached", False):  # a detached view leaves them in the store
                t = now()
                shown["lines"] += len(lines)
                shown["appends"] += 1
                shown["first"] = shown["first"] or t
                shown["last"] = t
            append(lines)

        view.append = counting_append
        tabs = tui.query_one("#tabs", TabbedContent)
        res["gc_objects_at_start"] = len(gc.get_objects())
        res["gc_frozen_at_start"] = gc.get_freeze_count()
        for step in filter(None, os.environ.get("BENCH_GC", "").split(";")):  # experiments: freeze; thr:a,b,c
            if step == "freeze":
                gc.freeze()
            elif step.startswith("thr:"):
                gc.set_threshold(*map(int, step[4:].split(",")))
        tasks = [asyncio.ensure_future(sample_memory(view)), asyncio.ensure_future(loop_lag())]
        await pilot.pause(0.5)
        submitted_at = now()
        before = tui.job_id  # the newest job of an earlier run may be highlighted
        tui.start_run(
            RunRequest(args.workflow, runner=args.runner, no_cache=True)
        )  # what the Run dialog's submit starts
        # Following: the Logs tab shows the job's lines.
        first_line = await frames.wait(
            lambda text: (
                tui.job_id not in (None, before)
                and tabs.active == "logs"
                and bool(view.lines)
                and view.lines[-1].text[:24] in text
            ),
            60,
        )
        if first_line is None:
            notes = [n.message for n in tui._notifications]
            raise SystemExit(
                f"the job's lines never showed up in the Logs tab; notifications: {notes}; "
                f"job {tui.job_id} (before: {before}), tab {tabs.active}, {len(view.lines)} lines, "
                f"received {received}; workers {[(w.name, w.state, w.error) for w in tui.workers]}"
            )
        job_id = tui.job_id
        res["job_id"] = job_id
        res["submit_to_first_line_s"] = first_line - submitted_at

        def running() -> bool:
            return not tui.ctl.store.job(job_id).state.is_terminal()

        checks = {
            "4 (Metrics tab)": lambda: lambda text: tabs.active == "metrics" and "metrics" in text,
            "3 (Logs tab)": lambda: lambda text: tabs.active == "logs" and f"job {job_id}" in text,
            "g (top of log)": None,  # built at press time (the window's first lines)
            "G (follow)": None,
        }

        def pred_for(name: str):
            if name == "g (top of log)":
                # at the window's top (or on the same line once the older page came in above it),
                # that line drawn: with traffic the window's first line changes 20 times a second
                page = tui.query_one(LogView).max_lines // 4
                return lambda text: (
                    not view.following
                    and view.scroll_y <= page
                    and bool(view.lines)
                    and view.lines[int(view.scroll_y)].text[:24] in text
                )
            if name == "G (follow)":
                # the newest line held when the frame is drawn is on screen, and the view follows
                return lambda text: view.following and bool(view.lines) and view.lines[-1].text[:24] in text
            return checks[name]()

        keys = {"4 (Metrics tab)": "4", "3 (Logs tab)": "3", "g (top of log)": "g", "G (follow)": "G"}

        async def cycle(phase: str) -> None:
            for name, key in keys.items():
                await asyncio.sleep(rng.uniform(args.gap * 0.5, args.gap * 1.5))  # not in step with any timer
                if os.environ.get("BENCH_DEBUG"):
                    frames.debug = []
                    frames.state = lambda: (
                        view.following,
                        view.scroll_y,
                        view.max_scroll_y,
                        len(view.lines),
                        view.lines[-1].text[:12] if view.lines else "",
                        view.scroll_x,
                    )
                if trace:
                    trace.start()
                t_key = now()
                s = await key_latency(tui, frames, key, pred_for(name), timeout=5.0)
                if trace:
                    gc_ms = sum(p[3] for p in gc_pauses if t_key <= p[0] <= t_key + (s or 0)) * 1000
                    traced = [(0.0, f"gc cpu {gc_ms:.1f} ms"), *trace.take(t_key)]
                samples.append(
                    {
                        "phase": phase,
                        "key": name,
                        "s": s,
                        "t": now(),
                        "view_lines": len(view.lines),
                        **({"debug": frames.debug[:12]} if frames.debug is not None else {}),
                        **({"trace": traced[:80]} if trace else {}),
                    }
                )

        t_traffic = now()
        frames_before = len(frames.times)
        lag_before = len(lag)
        while running():
            await cycle("traffic")
        t_end = now()
        res["traffic_s"] = t_end - t_traffic
        res["traffic_frames_per_s"] = (len(frames.times) - frames_before) / max(1e-9, t_end - t_traffic)
        traffic_lag = lag[lag_before:]
        # let the end of the job come in (status, artifacts, the last flush)
        for _ in range(100):
            if tui.ctl.store.job(job_id).synced and not tui.logs.pending:
                break
            await asyncio.sleep(0.1)
        await pilot.pause(0.3)
        n_traffic = sum(1 for s in samples if s["phase"] == "traffic")
        lag_before = len(lag)
        frames_before = len(frames.times)
        t_idle = now()
        if os.environ.get("BENCH_DEBUG"):
            import collections

            gc.collect()
            idle_types = collections.Counter(type(o).__name__ for o in gc.get_objects())
            from textual.dom import DOMNode
            from textual.timer import Timer

            def nodes() -> collections.Counter:
                return collections.Counter(
                    f"{type(o).__module__}.{type(o).__name__}"
                    for o in gc.get_objects()
                    if isinstance(o, (DOMNode, Timer))
                )

            idle_nodes = nodes()
        while sum(1 for s in samples if s["phase"] == "idle") < max(n_traffic, 12):
            await cycle("idle")
        res["idle_s"] = now() - t_idle
        res["idle_frames_per_s"] = (len(frames.times) - frames_before) / max(1e-9, res["idle_s"])
        idle_lag = lag[lag_before:]
        if os.environ.get("BENCH_DEBUG"):  # what a full collection walks
            import collections

            t = time.thread_time()
            gc.collect()
            res["gc_collect_ms"] = (time.thread_time() - t) * 1000
            end_types = collections.Counter(type(o).__name__ for o in gc.get_objects())
            res["gc_types"] = end_types.most_common(25)
            res["gc_types_idle_growth"] = (end_types - idle_types).most_common(15)
            res["gc_nodes_idle_growth"] = (nodes() - idle_nodes).most_common(15)
        for task in tasks:
            task.cancel()
        job = tui.ctl.store.job(job_id)
        res["job_status"] = job.status
        res["job_run_s"] = (job.finished_at or 0) - (job.started_at or 0)
        res["stored_lines"] = tui.ctl.store.log_line_count(job_id)
        res["view_lines_end"] = len(view.lines)
        res["view_last_line"] = view.lines[-1].text[:40] if view.lines else ""
        res["window"] = view.max_lines

    if trace and trace.profile is not None:
        trace.profile.dump_stats(os.environ["BENCH_TRACE"])
    res["samples"] = samples
    res["received"] = received
    res["shown"] = shown
    res["received_lines_per_s"] = received["lines"] / max(1e-9, (received["last"] or 0) - (received["first"] or 0))
    res["shown_lines_per_s"] = shown["lines"] / max(1e-9, (shown["last"] or 0) - (shown["first"] or 0))
    res["memory"] = memory
    res["behind_lines"] = {
        "median": statistics.median(behind) if behind else None,
        "max": max(behind) if behind else None,
        "n": len(behind),
    }
    res["view_lines_max"] = max((m["view_lines"] for m in memory), default=0)
    res["pending_max"] = max((m["pending"] for m in memory), default=0)
    res["loop_lag_ms"] = {
        phase: {
            "median": 1000 * statistics.median(xs) if xs else None,
            "p95": 1000 * pct(xs, 0.95) if xs else None,
            "max": 1000 * max(xs) if xs else None,
        }
        for phase, xs in (("traffic", traffic_lag), ("idle", idle_lag))
    }
    res["frames"] = len(frames.times)
    res["render_segments_s"] = frames.render_s
    res["spikes"] = spikes
    gc.callbacks.remove(on_gc)
    res["gc_objects_at_end"] = len(gc.get_objects())
    res["gc"] = {
        phase: {
            "collections": len(ps),
            "total_ms": 1000 * sum(p[2] for p in ps),
            "max_ms": 1000 * max((p[2] for p in ps), default=0.0),
            "cpu_ms": 1000 * sum(p[3] for p in ps),
            "max_cpu_ms": 1000 * max((p[3] for p in ps), default=0.0),
            "gen2": sum(1 for p in ps if p[1] == 2),
        }
        for phase, ps in (
            ("traffic", [p for p in gc_pauses if t_traffic <= p[0] <= t_end]),
            ("idle", [p for p in gc_pauses if p[0] > t_idle]),
        )
    }
    return res


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["startup", "follow"])
    parser.add_argument("kind_or_project")
    parser.add_argument("project", nargs="?")
    parser.add_argument("--big-job", default="")
    parser.add_argument("--expect", default="", help="text the first screen must show (the newest run)")
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--size", default="120x40")
    parser.add_argument("--runner", default="")
    parser.add_argument("--workflow", default="flood")
    parser.add_argument("--gap", type=float, default=0.25)
    args = parser.parse_args()
    args.size = tuple(int(x) for x in args.size.split("x"))
    if args.mode == "startup":
        kind = args.kind_or_project
        res = asyncio.run(startup_lanpool(args) if kind == "lanpool" else startup_minimal(args))
    else:
        args.project = args.kind_or_project
        profile = os.environ.get("BENCH_PROFILE")  # a cProfile dump of the whole follow run (diagnostics)
        if profile:
            import cProfile

            prof = cProfile.Profile()
            res = prof.runcall(asyncio.run, follow(args))
            prof.dump_stats(profile)
        else:
            res = asyncio.run(follow(args))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    res["marks"] = MARKS
    res["cpu_s"] = usage.ru_utime + usage.ru_stime
    res["peak_rss_mib"] = rss_mib("VmHWM")
    Path(os.environ["BENCH_OUT"]).write_text(json.dumps(res))


if __name__ == "__main__":
    main()
