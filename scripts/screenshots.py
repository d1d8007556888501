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
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APP = [str(REPO / ".venv" / "bin" / "app")] if (REPO / ".venv" / "bin" / "app").exists() else \
    [sys.executable, "-m", "app.cli.main"]


def start_agent(tmp: Path, env: dict) -> tuple[subprocess.Popen, str]:
    key = subprocess.run([*APP, "headless", "key"], env=env, capture_output=True, text=True, check=True).stdout
    agent_dir = tmp / "agent"
    subprocess.run([*APP, "agent", "authorize", key.strip(), "--data-dir", str(agent_dir)], env=env,
                   capture_output=True, check=True)
    with open(tmp / "agent.log", "ab") as log:
        agent = subprocess.Popen([*APP, "agent", "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir",
                                  str(agent_dir), "--name", "gpu-box-1", "--no-mdns", "--executor", "process"],
                                 env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    info = agent_dir / "agent.json"
    deadline = time.time() + 30
    while time.time() < deadline:
        if info.exists():
            data = json.loads(info.read_text())
            if data.get("pid") == agent.pid:
                return agent, f"127.0.0.1:{data['port']}"
        if agent.poll() is not None:
            break
        time.sleep(0.1)
    agent.kill()
    raise SystemExit(f"agent did not start:\n{(tmp / 'agent.log').read_text()[-2000:]}")


async def shoot(out: Path, size: tuple[int, int], runner: str) -> list[Path]:
    import app.tui
    from app.tui.dialogs.run_dialog import RunRequest

    LanpoolApp = app.tui.load_app()
    tui = LanpoolApp(REPO, discover=False)  # the runner is known by address; nothing else joins the pool
    saved = []
    async with tui.run_test(size=size, notifications=False) as pilot:
        tui.sub_title = "~/lanpool"  # not this machine's path
        for workflow in ("hello", "train"):
            tui._run(RunRequest(workflow, runner=runner))  # what the Run dialog's submit starts
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
        for tab, name in (("logs", "tui-logs.svg"), ("metrics", "tui-metrics.svg"), ("runs", "tui-runs.svg"),
                          ("runners", "tui-runners.svg")):
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
    env = dict(os.environ, LANPOOL_HOME=str(tmp / "controller"), LANPOOL_MDNS_INTERFACES="127.0.0.1")
    env.pop("LANPOOL_AGENT_HOME", None)
    os.environ.update(LANPOOL_HOME=env["LANPOOL_HOME"], LANPOOL_MDNS_INTERFACES="127.0.0.1")
    agent = None
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        agent, runner = start_agent(tmp, env)
        for path in asyncio.run(shoot(args.out.resolve(), size, runner)):
            print(path.relative_to(REPO) if path.is_relative_to(REPO) else path)
    finally:
        if agent is not None and agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(20)
            except subprocess.TimeoutExpired:
                agent.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
