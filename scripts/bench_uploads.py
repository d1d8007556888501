"""Uploads by content, through the real CLI and a real agent on 127.0.0.1.

1. The upload itself (hash with the cache, HaveBlobs, PutBlob of what is
   missing), in this process against the agent: a 500 MB project, then again
   after a one-line edit (one blob sent; target <= 1 s for the second). And the
   whole `run` (a new process: start-up, plan, upload, the runner copying
   500 MB into a fresh workspace, the job, its end) for each.
2. Peak RSS of `run` with a 1 GB untracked file in the project (target: flat,
   < 100 MB: files are streamed from disk, never held whole).
Prints figures; no pass/fail exit code.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests import harness  # noqa: E402

APP = list(harness.venv_app())
WORKFLOWS = 'workflows:\n  - name: noop\n    commands: ["true"]\n'


def _write_random(path: Path, size: int) -> None:
    with open(path, "wb") as fh:
        left = size
        while left:
            n = min(left, 8 << 20)
            fh.write(os.urandom(n))
            left -= n


def _run(project: Path, env: dict, runner: str) -> tuple[float, int]:
    """Wall seconds and peak RSS (MB) of one `app headless run noop`."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*APP, "headless", "run", "noop", "--runner", runner],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"run failed:\n{err.decode()[-2000:]}")
    return wall, usage.ru_maxrss // 1024


def _upload_s(project: Path, env: dict, address: str) -> tuple[float, int]:
    """Seconds and blobs sent by one upload of `project`'s snapshot, in this process."""
    import asyncio

    os.environ.update(env)  # the controller's home: read when the Controller is made
    from lanpool.app.controller import Controller
    from lanpool.app.transfer.snapshot import build_manifest
    from lanpool.app.transfer.uploads import upload, workspace_files

    ctl = Controller()
    host, port = address.rsplit(":", 1)

    async def once() -> tuple[float, int]:
        session = await ctl.pool.connect(host, int(port), trust=True)
        try:
            started = time.perf_counter()
            manifest = build_manifest(project)
            files = workspace_files(manifest, ctl.home, ctl.store, [])
            sent = await upload(session, files, lambda _t: None)
            return time.perf_counter() - started, sent
        finally:
            session.close()

    try:
        return asyncio.run(once())
    finally:
        ctl.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-uploads", description=__doc__.split("\n\n")[0])
    parser.add_argument("--project-mb", type=int, default=500)
    parser.add_argument("--untracked-mb", type=int, default=1024)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="lanpool-bench-up-"))
    env = harness.lanpool_env(tmp / "controller")
    agent = harness.start_agent(tmp / "agent", tmp / "controller", env=env, app=APP, name="bench-up")
    out: dict = {}
    try:
        project = harness.write_project(tmp / "project", WORKFLOWS)
        files = 50
        for i in range(files):
            _write_random(project / f"data-{i:02d}.bin", args.project_mb * 1024**2 // files)
        (project / "train.py").write_text("".join(f"x{i} = {i}\n" for i in range(100)))
        out["first_upload_s"], out["first_upload_blobs"] = _upload_s(project, env, agent.address)
        out["first_run_s"], out["first_run_rss_mb"] = _run(project, env, agent.address)
        time.sleep(3.5)  # files younger than 3 s are hashed again each time (app/transfer/hash_cache.py): not this one
        (project / "train.py").write_text((project / "train.py").read_text().replace("x5 = 5", "x5 = 6"))
        out["upload_after_edit_s"], out["upload_after_edit_blobs"] = _upload_s(project, env, agent.address)
        (project / "train.py").write_text((project / "train.py").read_text().replace("x5 = 6", "x5 = 7"))
        out["second_run_after_edit_s"], _ = _run(project, env, agent.address)
        out["noop_run_s"], _ = _run(project, env, agent.address)  # nothing changed: dispatch alone
        # A 1 GB untracked file: sent once, streamed.
        small = harness.write_project(tmp / "small", WORKFLOWS)
        _, out["rss_small_project_mb"] = _run(small, env, agent.address)
        _write_random(small / "big.bin", args.untracked_mb * 1024**2)
        out["untracked_run_s"], out["rss_with_untracked_mb"] = _run(small, env, agent.address)
    finally:
        agent.stop(15)
        shutil.rmtree(tmp, ignore_errors=True)
    # docs/bench/bench-uploads.json -> docs/benchmarks.md (scripts/bench-report)
    from bench_results import record, row

    record(
        "bench-uploads",
        [
            row(
                f"upload of a {args.project_mb} MB project ({out.get('first_upload_blobs')} blobs)",
                out.get("first_upload_s"),
                unit="s",
            ),
            row("upload after a one-line edit", out.get("upload_after_edit_s"), target="<= 1 s", unit="s"),
            row(
                f"peak RSS of `run` with a {args.untracked_mb} MB untracked file, vs a small project",
                out.get("rss_with_untracked_mb"),
                out.get("rss_small_project_mb"),
                target="< 100 MB",
                unit="MB",
            ),
        ],
    )
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(
        f"upload of a {args.project_mb} MB project: {out['first_upload_s']:.2f} s ({out['first_upload_blobs']} blobs); "
        f"after a one-line edit: {out['upload_after_edit_s']:.2f} s ({out['upload_after_edit_blobs']} blob) "
        "(target <= 1 s)"
    )
    print(
        f"whole `run`: first {out['first_run_s']:.2f} s, after a one-line edit {out['second_run_after_edit_s']:.2f} s "
        "(start-up, plan, upload, the runner copying the project into a fresh workspace, the job)"
    )
    print(f"re-run with nothing changed: {out['noop_run_s']:.2f} s")
    print(
        f"peak RSS of run: {out['rss_small_project_mb']} MB small project, "
        f"{out['rss_with_untracked_mb']} MB with a {args.untracked_mb} MB untracked file "
        f"({out['untracked_run_s']:.1f} s) (target < 100 MB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
