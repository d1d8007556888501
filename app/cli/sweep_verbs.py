"""`app headless run W --sweep VAR=V1,V2 ...` and `plan W --sweep ...`: a sweep's points planned,
sent (app/runs/sweep.py), followed and compared (app/views/compare.py)."""

import argparse
import asyncio
import json

from lanpool.app.cli import render
from lanpool.app.cli.render import say
from lanpool.app.cli.run_options import env_of, options_of_run, resources_of
from lanpool.app.controller import Controller
from lanpool.app.errors import ExitCode, UsageError
from lanpool.app.startup.import_paused import import_paused
from lanpool.app.views.formatting import duration, status_text
from lanpool.app.workflows import Project

FOLLOWED_AT_ONCE = 16  # points followed together; the others keep running and are read when their turn comes


def _point_text(point: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


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

    async def follow(job_id: str) -> None:
        async with limit:
            row = await ctl.follow(job_id, follow=True)
        if job_id in points:
            ended = f"{status_text(row)} in {duration(row.started_at, row.finished_at)}"
            say(f"run {outcome.run_name}: point {_point_text(points[job_id])}: {ended}")

    try:
        await asyncio.gather(*(follow(s.job_id) for s in outcome.submitted))
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
    failed = [i for i in compared if ctl.runs.job(i).status != "DONE"]
    say(
        f"run {outcome.run_name}: {len(compared) - len(failed)} of {len(compared)} point(s) DONE"
        + (f" ({len(outcome.reused)} reused)" if outcome.reused else "")
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
        rows.append([_point_text(point), asked.action.upper(), asked.key[:12], asked.reason])
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
