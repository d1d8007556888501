"""`app headless run W --sweep VAR=V1,V2 ...` and `plan W --sweep ...`: a sweep's points planned,
sent (app/runs/sweep.py), followed and compared (app/views/compare.py)."""

import argparse
import asyncio
import json
from typing import TYPE_CHECKING

from lanpool.app.cli import render
from lanpool.app.cli.render import say
from lanpool.app.cli.run_options import env_of, options_of_run, resources_of
from lanpool.app.controller import Controller
from lanpool.app.errors import ExitCode, UsageError
from lanpool.app.runs.sweep import point_text
from lanpool.app.startup.import_paused import import_paused
from lanpool.app.views.formatting import duration, status_text
from lanpool.app.workflows import Project

if TYPE_CHECKING:
    from lanpool.app.runs.sweep import SweepOutcome

FOLLOWED_AT_ONCE = 16  # points followed together; the others keep running and are read when their turn comes


async def run_sweep(ctl: Controller, project: Project, args: argparse.Namespace) -> int:
    if args.notify or args.notify_cmd is not None:
        raise UsageError("--notify follows one job: for a sweep's point, `app headless attach JOB --notify`")
    if args.ports:
        raise UsageError("--port forwards one job's port to this machine: a sweep's points would all claim it")
    import_paused("lanpool.app.runs.loop")  # the SSH stack (as `run`)
    outcome = await ctl.sweep(project, args.workflow, args.sweep, say=say, **options_of_run(args))
    points = outcome.points
    mine = [s.job_id for s in outcome.submitted if ctl.runs.job(s.job_id).workflow == args.workflow]
    compared = [*mine, *(j.id for j in outcome.reused)]
    if args.detach:
        if args.json:
            print(json.dumps({"run": outcome.run_name, "jobs": _jobs_json(ctl, compared, points)}))
        say(
            f"detached: `app headless compare {outcome.run_name}` compares the points, "
            f"`app headless stop {outcome.run_name}` stops them"
        )
        return ExitCode.OK
    limit = asyncio.Semaphore(FOLLOWED_AT_ONCE)
    stopped: dict[str, str] = {}  # job id -> why the sweep stopped it (stop_worst)
    judge = asyncio.create_task(_stop_worst(ctl, outcome, mine, stopped)) if outcome.stop_worst else None

    async def follow(job_id: str) -> None:
        async with limit:
            row = await ctl.follow(job_id, follow=True)
        if job_id in points:
            ended = f"{status_text(row)} in {duration(row.started_at, row.finished_at)}"
            say(f"run {outcome.run_name}: point {point_text(points[job_id])}: {ended}")

    try:
        await asyncio.gather(*(follow(s.job_id) for s in outcome.submitted))
        if judge is not None:
            judge.cancel()
            await asyncio.gather(judge, return_exceptions=True)
    except asyncio.CancelledError:
        say(
            f"run {outcome.run_name}: its jobs keep running: `app headless compare {outcome.run_name}`, "
            f"`app headless stop {outcome.run_name}`"
        )
        raise
    if args.json:
        print(json.dumps({"run": outcome.run_name, "jobs": _jobs_json(ctl, compared, points)}))
    else:
        from lanpool.app.cli.compare_verbs import print_comparison

        print_comparison(ctl, ctl.runs.compared(compared))
    failed = [i for i in compared if ctl.runs.job(i).status != "DONE" and i not in stopped]
    done = len(compared) - len(failed) - len(stopped)
    say(
        f"run {outcome.run_name}: {done} of {len(compared)} point(s) DONE"
        + (f" ({len(outcome.reused)} reused)" if outcome.reused else "")
        + (f", {len(stopped)} stopped by stop_worst" if stopped else "")
    )
    return ExitCode.FAILED if failed else ExitCode.OK


def _jobs_json(ctl: Controller, job_ids: list[str], points: dict[str, dict[str, str]]) -> list[dict[str, object]]:
    jobs = [ctl.runs.job(i) for i in job_ids]
    return [
        {
            "job_id": j.id,
            "run": j.run_name,
            "point": points.get(j.id, {}),
            "runner": j.runner,
            "status": j.status,
            "exit_code": j.exit_code,
        }
        for j in jobs
    ]


def plan_sweep(ctl: Controller, project: Project, args: argparse.Namespace) -> int:
    planned = ctl.sweep_plan(
        project,
        args.workflow,
        args.sweep,
        args.overrides,
        no_cache=args.no_cache,
        env=env_of(args),
        resources=resources_of(args),
    )
    rows, shown = [], []
    for point, plan in planned:
        asked = next(j for j in plan.jobs if j.workflow == args.workflow)
        rows.append([point_text(point), asked.action.upper(), asked.key[:12], asked.reason])
        shown.append(
            {"point": point, "action": asked.action, "key": asked.key, "reason": asked.reason, **plan.to_json()}
        )
    if args.json:
        print(json.dumps(shown, indent=2))
        return ExitCode.OK
    to_run = sum(1 for r in rows if r[1] == "RUN")
    print(f"plan for {args.workflow}: a sweep of {len(rows)} point(s), {to_run} to run, {len(rows) - to_run} reused")
    print(render.table(["POINT", "ACTION", "KEY", "WHY"], rows))
    deps = {j.workflow for _, plan in planned for j in plan.to_run if j.workflow != args.workflow}
    if deps:
        print(
            f"each point to run also runs {', '.join(sorted(deps))} (not run yet with these inputs): "
            f"`app headless run {sorted(deps)[0]}` first, and every point reuses it"
        )
    return ExitCode.OK


JUDGED_EVERY_S = 1.0  # how often a followed sweep looks at its points' metrics (stop_worst)


async def _stop_worst(ctl: Controller, outcome: "SweepOutcome", job_ids: list[str], stopped: dict[str, str]) -> None:
    """A followed sweep's early stopping (app/runs/halving.py): each point's metric, as its log
    comes in, ranked at each rung; a point in the worse part is stopped, saying why. Runs until
    cancelled (the sweep's points have all ended)."""
    from lanpool.app.runs.halving import Rungs
    from lanpool.app.views.compare import better_is
    from lanpool.app.views.overview import MetricsReader

    rule = outcome.stop_worst
    assert rule is not None
    rungs = Rungs(rule, better_is(rule.metric, rule.mode or None))
    readers = {job_id: MetricsReader(job_id) for job_id in job_ids}
    stops: list[asyncio.Task[object]] = []
    try:
        while True:
            await asyncio.sleep(JUDGED_EVERY_S)
            for job_id, reader in readers.items():
                if job_id in stopped or not ctl.runs.read_metrics(reader):
                    continue
                for verdict in rungs.observe(job_id, reader.points):
                    if verdict.stop and not ctl.runs.job(job_id).state.is_terminal():
                        why = verdict.reason(rule.metric)
                        stopped[job_id] = why
                        say(f"run {outcome.run_name}: point {point_text(outcome.points[job_id])}: {why}")
                        stops.append(asyncio.create_task(ctl.stop(job_id, why=why)))
    finally:
        await asyncio.gather(*stops, return_exceptions=True)  # each stop recorded before the sweep ends
