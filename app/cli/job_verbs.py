"""`app headless status`, `logs`, `stop`, `artifacts` and `metrics`: runs and jobs after they start."""

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from lanpool.app.cli import render
from lanpool.app.cli.render import say
from lanpool.app.controller import Controller, JobRow, RunFilter
from lanpool.app.errors import ExitCode, LanpoolError, NotFoundError, UsageError
from lanpool.app.views.formatting import ago, clip, duration, size, status_text
from lanpool.app.views.log_select import LogSelection, parse_since
from lanpool.app.views.terminal_text import safe_line


async def status(ctl: Controller, args: argparse.Namespace) -> int:
    watch = getattr(args, "watch", None)
    if watch is None or args.json:
        return await _status_once(ctl, args)
    if not 0.1 <= watch <= 3600:
        raise UsageError(f"--watch {watch:g}: give a number of seconds from 0.1 to 3600")
    try:
        while True:  # like `watch`: clear, draw, wait; Ctrl-C ends it
            sys.stdout.write("\x1b[H\x1b[2J")
            await _status_once(ctl, args)
            sys.stdout.flush()
            await asyncio.sleep(watch)
    except (KeyboardInterrupt, asyncio.CancelledError):
        return ExitCode.OK


# Why a job is waiting or ended badly, shown in the table (`--json` has the whole text); a STOPPED
# job has a reason only when one was given (a sweep's stop_worst).
_REASON_STATES = ("QUEUED", "FAILED", "LOST", "STOPPED")
_REASON_CHARS = 60


async def _one_run(ctl: Controller, args: argparse.Namespace) -> int:
    """`status RUN`: that run (or job) in full (app/cli/show_run.py)."""
    from lanpool.app.cli.show_run import print_run

    if _run_filter(args):
        raise UsageError("status RUN shows that run; the filters (--state, --workflow ...) go without a RUN")
    jobs = ctl.runs.resolve(args.ref)
    if not args.no_refresh:
        await ctl.refresh(jobs)
        jobs = [ctl.runs.job(j.id) for j in jobs]
    states = {j.runner: ctl.pool.state_of(j.runner) for j in jobs if j.runner}
    # A secret's value given with `--env` (the stored env has only placeholders otherwise): masked too.
    secrets = list(ctl.secrets.values_for(ctl.secrets.names()).values())
    print_run(ctl.runs.detail(jobs, states, secrets), args.json)
    return ExitCode.OK


async def _status_once(ctl: Controller, args: argparse.Namespace) -> int:
    if getattr(args, "ref", None):
        return await _one_run(ctl, args)
    # A handful of queries whatever the number of runs (`-n 10000` too): runs, their jobs, and
    # the jobs' warnings and artifacts, each read once.
    only = _run_filter(args)
    runs = ctl.runs.recent(args.limit, only)
    jobs = ctl.runs.jobs_of_recent(args.limit, only)
    if not args.no_refresh:
        await ctl.refresh([j for r in runs for j in jobs.get(r.name, [])])
        jobs = ctl.runs.jobs_of_recent(args.limit, only)
    warnings, artifacts = ctl.runs.notes_of_recent(args.limit, only)
    if args.json:
        out = [
            {
                "run": r.name,
                "workflow": r.workflow,
                "project": r.project,
                "project_dir": r.project_dir,
                "tag": r.tag,
                "created_at": r.created_at,
                "jobs": [_job_json(j, warnings.get(j.id, []), artifacts.get(j.id, [])) for j in jobs.get(r.name, [])],
            }
            for r in runs
        ]
        print(json.dumps(out, indent=2))
        return ExitCode.OK
    if not runs and only:
        print("no runs match: `app headless status` without filters lists them all")
        return ExitCode.OK
    if not runs:
        print("no runs yet: `app headless run WORKFLOW` starts one")
        return ExitCode.OK
    rows, warned = [], []
    partial = _partial_pulls(ctl)
    states: dict[str, str | None] = {}
    for r in runs:
        for j in jobs.get(r.name, []):
            warned += [f"job {j.id} ({j.workflow}): {w}" for w in warnings.get(j.id, [])]
            n_art = len(artifacts.get(j.id, []))
            if j.runner and j.runner not in states:
                states[j.runner] = ctl.pool.state_of(j.runner)
            runner_state = states.get(j.runner) if j.runner else None
            pulling = ctl.artifacts.pull_percent(j.id) if not j.artifacts_pulled and j.id in partial else None
            rows.append(
                [
                    clip(r.name),
                    clip(r.project or "-"),
                    j.id,
                    clip(j.workflow),
                    _where(j),
                    status_text(j, runner_state, pulling),
                    ago(j.submitted_at),
                    duration(j.started_at, j.finished_at),
                    str(n_art) if n_art else "-",
                    _reason(j),
                ]
            )
    headers = ["RUN", "PROJECT", "JOB", "WORKFLOW", "RUNNER", "STATUS", "SUBMITTED", "DURATION", "ARTIFACTS", "REASON"]
    print(render.table(headers, rows))
    for line in warned:
        print(safe_line(f"warning: {line}"))
    return ExitCode.OK


async def logs(ctl: Controller, args: argparse.Namespace) -> int:
    jobs = ctl.runs.resolve(args.ref)
    if args.node is not None and len(jobs) > 1:  # a run's jobs: those that have that node
        jobs = [j for j in jobs if ctl.node_count(j.id) > args.node] or jobs[-1:]
    printer = render.LogPrinter(raw=args.raw)
    if args.tail is not None or args.since or args.timestamps:
        return await _chosen_logs(ctl, args, jobs, printer)
    for job in jobs:
        try:
            await ctl.follow(job.id, printer, follow=args.follow, say=say, node=args.node)
        except LanpoolError as exc:
            if args.follow or isinstance(exc, UsageError):
                raise
            # The stored log was printed; the runner could not add to it.
            say(f"(stored log only: {exc.message})")
    return ExitCode.OK


async def _chosen_logs(
    ctl: Controller, args: argparse.Namespace, jobs: list[JobRow], printer: render.LogPrinter
) -> int:
    """`logs` with --tail, --since or -t: the store brought up to date, then read with
    the lines' times (app/views/log_select.py)."""
    if args.tail is not None and args.tail < 0:
        raise UsageError(f"--tail {args.tail}: give a number of lines, 0 or more")
    since = parse_since(args.since) if args.since else None
    await ctl.refresh(jobs)
    for job in jobs:
        if args.node is not None:
            _check_node(ctl, job, args.node)
        chosen = LogSelection(
            ctl.store, job.id, printer, tail=args.tail, since=since, timestamps=args.timestamps, node=args.node
        )
        chosen.print_stored()
        if args.follow and not ctl.store.job(job.id).synced:
            await ctl.follow(job.id, chosen, follow=True, say=say, node=args.node, from_store=False)
    return ExitCode.OK


def _check_node(ctl: Controller, job: JobRow, node: int) -> None:
    if not 0 <= node < (size := ctl.node_count(job.id)):
        raise UsageError(f"job {job.id} runs on {size} node(s): --node takes 0 to {size - 1}, not {node}")


def _run_filter(args: argparse.Namespace) -> RunFilter:
    """`status`'s filters; `--project` is a name, or a dir when it looks like a path (`.`, `../x`, `/a/b`)."""
    project = (getattr(args, "project", None) or "").strip()
    as_dir = project.startswith(".") or "/" in project or os.sep in project
    return RunFilter(
        states=tuple(dict.fromkeys(s for given in args.states or [] for s in given)),
        workflow=args.workflow or "",
        runner=args.runner or "",
        tag=args.tag or "",
        project="" if as_dir else project,
        project_dir=str(Path(project).expanduser().resolve()) if as_dir else "",
    )


def _partial_pulls(ctl: Controller) -> set[str]:
    """Jobs with a pull's state in the artifact store (`JOB.part`, `JOB.part.json`, ...: a pull
    under way or left to resume). Only those are asked how far they are, so a `status` of
    finished jobs never imports the artifact stack (~50 ms)."""
    try:
        return {name.split(".", 1)[0] for name in os.listdir(ctl.home.artifacts) if "." in name}
    except OSError:
        return set()


def _where(job: JobRow) -> str:
    """The RUNNER column: a Slurm runner's multi-node job says its node count."""
    nodes = job.slurm_nodes
    return f"{clip(job.runner)} ({nodes} nodes, slurm)" if nodes and job.runner else clip(job.runner or "-")


async def stop(ctl: Controller, args: argparse.Namespace) -> int:
    """`stop RUN...` or `stop --all`: every job named, each stopped once, the unreachable ones said."""
    jobs = _jobs_to_stop(ctl, args)
    if jobs is None:
        return ExitCode.OK
    failed = 0
    for job in jobs:
        if job.state.is_terminal():
            say(f"job {job.id} already ended: {job.status}")
            continue
        try:
            job = await ctl.stop(job.id, abort=args.abort, grace_s=args.grace)
        except LanpoolError as exc:
            if len(jobs) == 1:
                raise
            failed += 1  # one unreachable runner does not keep the others' jobs running
            say(f"job {job.id} ({job.run_name}): not stopped: {exc.message}")
            continue
        say(f"job {job.id} ({job.run_name}): {status_text(job)}")
    return ExitCode.FAILED if failed else ExitCode.OK


def _jobs_to_stop(ctl: Controller, args: argparse.Namespace) -> list[JobRow] | None:
    """The jobs `stop` names, each once, in the order given; None when the user said no."""
    if args.all and args.refs:
        raise UsageError("stop takes run names or --all, not both")
    if not args.all:
        if not args.refs:
            raise UsageError("name the runs or jobs to stop (`app headless status` lists them), or give --all")
        if args.yes:
            raise UsageError("--yes goes with --all (stopping named runs asks nothing)")
        seen: dict[str, JobRow] = {}
        for ref in args.refs:  # every name checked before anything is stopped: a typo stops nothing
            for job in ctl.runs.resolve(ref):
                seen.setdefault(job.id, job)
        return list(seen.values())
    jobs = ctl.runs.unfinished()
    if not jobs:
        say("no unfinished runs: nothing to stop")
        return None
    runs = sorted({j.run_name for j in jobs})
    what = f"{len(runs)} run(s) ({len(jobs)} job(s)): {', '.join(runs[:5])}" + (" ..." if len(runs) > 5 else "")
    if args.yes:
        return jobs
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise UsageError(f"stop --all would stop {what}; without a terminal to ask on, add --yes")
    sys.stderr.write(safe_line(f"stop {what}? [y/N] "))
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        say("nothing stopped")
        return None
    return jobs


async def artifacts(ctl: Controller, args: argparse.Namespace) -> int:
    jobs = ctl.runs.resolve(args.ref)
    if args.art_verb == "list":
        await ctl.refresh(jobs)
        listing = {j.id: ctl.runs.artifacts(j.id) for j in jobs}
        if args.json:
            print(
                json.dumps(
                    [{"job": jid, "path": p, "size": s} for jid, files in listing.items() for p, s in files], indent=2
                )
            )
        else:
            for jid, files in listing.items():
                for path, n in files:
                    print(f"{size(n):>10}  {jid}  {path}" if args.long else path)
        return ExitCode.OK
    for job in jobs:
        # Never the working directory: inside a project, the files would join its next snapshot.
        output = args.output or ctl.downloads_dir(job.run_name)
        files = await ctl.download_artifacts(job.id, output)
        total = sum(s for _, s in files)
        say(f"job {job.id}: {len(files)} file(s), {size(total)} -> {output}")
    return ExitCode.OK


async def metrics(ctl: Controller, args: argparse.Namespace) -> int:
    jobs = ctl.runs.resolve(args.ref)
    await ctl.refresh(jobs)
    points = [p for j in jobs for p in ctl.metrics(j.id)]
    if args.name:
        _check_metric_names(args.ref, args.name, points)
        points = [p for p in points if p["name"] in args.name]
    if args.gpu:  # the agent's samples of the job's GPUs (agent/host/gpu_telemetry.py)
        from lanpool.app.views.compare import GPU_METRIC  # what the runner samples, not what a job logs

        points = [p for p in points if GPU_METRIC.fullmatch(str(p["name"]))]
    if args.json:
        print(json.dumps(points, indent=2))
        return ExitCode.OK
    if not points and args.gpu:
        print("no GPU figures: the job holds no GPU, or its runner can read none (NVML or nvidia-smi)")
        return ExitCode.OK
    if not points:
        print(
            "no metrics yet (jobs log them through lanpool.training.metrics.LanpoolMetrics, or Lightning's CSVLogger or TensorBoardLogger)"
        )
        return ExitCode.OK
    latest: dict[str, dict[str, Any]] = {}
    for p in points:
        latest[p["name"]] = p
    rows = [
        [
            name,
            str(p["step"]),
            f"{p['value']:.6g}" if p["value"] is not None else "nan",
            str(sum(1 for q in points if q["name"] == name)),
        ]
        for name, p in sorted(latest.items())
    ]
    print(render.table(["METRIC", "LAST STEP", "LAST VALUE", "POINTS"], rows))
    return ExitCode.OK


def _check_metric_names(ref: str, asked: list[str], points: list[dict[str, Any]]) -> None:
    """A `--name` the job never logged is a mistake to say (a typo), not an empty answer."""
    logged = sorted({str(p["name"]) for p in points})
    missing = [n for n in dict.fromkeys(asked) if n not in logged]
    if not missing:
        return
    names = ", ".join(repr(n) for n in missing)
    if not logged:
        have = "it has no metrics yet"
    else:
        shown = ", ".join(logged[:20]) + (f" ... and {len(logged) - 20} more" if len(logged) > 20 else "")
        have = f"its metrics: {shown}"
    raise NotFoundError(f"{safe_line(ref)[:80]} has no metric {safe_line(names)[:200]} ({safe_line(have)})")


def _reason(job: JobRow) -> str:
    tries = f"{job.retries + 1} attempts" if job.retries else ""
    if job.status not in _REASON_STATES or not job.error:
        return tries or "-"
    text = safe_line(job.error.splitlines()[0] if job.error.splitlines() else "")
    text = f"{tries}: {text}" if tries and not text.startswith("retry ") else text
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 3] + "..."


def _job_json(j: JobRow, warnings: list[str], artifacts: list[tuple[str, int]]) -> dict[str, Any]:
    return {
        "job": j.id,
        "workflow": j.workflow,
        "runner": j.runner,
        "slurm_nodes": j.slurm_nodes,  # 0 unless a Slurm runner runs the job's nodes as one job
        "status": j.status,
        "exit_code": j.exit_code,
        "error": j.error,
        "attempts": j.retries + 1,  # runs of the job: a retry (a gang's: every node's) is one more
        "submitted_at": j.submitted_at,
        "started_at": j.started_at,
        "finished_at": j.finished_at,
        "artifacts": [{"path": p, "size": s} for p, s in artifacts],
        "warnings": warnings,
    }
