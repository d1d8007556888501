"""Regenerate docs/tui-*.svg: the TUI's screens after a real run on loopback.

A throw-away controller home and a real `app agent serve` on 127.0.0.1; the
TUI (Textual's pilot, fixed terminal size, no notifications) runs `hello`, then
the bundled `train` workflow (Lightning autoencoder, DDP on 2 CPU processes)
through the same worker as the Run dialog, follows it to the end, and saves
Textual's SVG screenshots of the Runs, Logs, Metrics and Runners tabs. Run
names, times and losses differ from one run to the next; the screens do not.

    scripts/screenshots [--out docs] [--size 120x34]
"""

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.harness
from tests import harness  # noqa: E402


async def shoot(out: Path, size: tuple[int, int], runner: str) -> list[Path]:
    from lanpool.app import tui
    from lanpool.app.tui.dialogs.run_dialog import RunRequest

    LanpoolApp = tui.load_app()
    tui = LanpoolApp(REPO, discover=False)  # the runner is known by address; nothing else joins the pool
    saved = []
    async with tui.run_test(size=size, notifications=False) as pilot:
        tui.sub_title = "~/lanpool"  # not this machine's path
        for workflow in ("hello", "train"):
            tui.start_run(RunRequest(workflow, runner=runner))  # what the Run dialog's submit starts
            deadline = time.time() + 600
            while True:
                await pilot.pause(0.5)
                job = tui.ctl.store.job(tui.job_id) if tui.job_id else None
                if job and job.workflow == workflow and job.synced and job.state.is_terminal():
                    break
                if time.time() > deadline:
                    raise SystemExit(f"{workflow} did not end in 10 minutes")
            if job.status != "DONE":
                raise SystemExit(f"{workflow} ended {job.status}: see `app headless logs {job.id}`")
        await pilot.pause(1.5)  # the last flush, the header's final status, the artifacts
        for tab, name in (
            ("logs", "tui-logs.svg"),
            ("metrics", "tui-metrics.svg"),
            ("runs", "tui-runs.svg"),
            ("runners", "tui-runners.svg"),
        ):
            tui.action_tab(tab)
            await pilot.pause(1.0)
            saved.append(Path(tui.save_screenshot(name, str(out))))
    return saved


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/screenshots", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs", help="where the SVGs go (default docs/)")
    parser.add_argument("--size", default="120x34", help="terminal size WxH (default 120x34)")
    args = parser.parse_args()
    size = tuple(int(x) for x in args.size.split("x"))
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="lanpool-screenshots-"))
    env = harness.lanpool_env(tmp / "controller")
    os.environ.update(LANPOOL_HOME=env["LANPOOL_HOME"], LANPOOL_MDNS_INTERFACES=harness.LOOPBACK)
    agent = None
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        try:
            agent = harness.start_agent(
                tmp / "agent",
                tmp / "controller",
                env=env,
                app=harness.venv_app(),
                verbose=False,
                name="gpu-box-1",
                grace=10,
                new_session=True,
                extra_args=["--no-mdns", "--executor", "process"],
            )
        except harness.AgentStartError as exc:
            raise SystemExit(str(exc)) from None
        for path in asyncio.run(shoot(args.out.resolve(), size, agent.address)):
            print(path.relative_to(REPO) if path.is_relative_to(REPO) else path)
    finally:
        if agent is not None:
            agent.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
