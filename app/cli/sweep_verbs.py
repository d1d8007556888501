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
    from lanpool.app.controller import JobRow


async def run_sweep(ctl: Controller, project: Project, args: argparse.Namespace) -> int:
    if args.notify or args.notify_cmd is not None:
        raise UsageError("--notify follows one job: for a sweep's point, `app headless attach JOB --notify`")
    if args.ports:
        raise UsageError("--port forwards one job's port to this machine: a sweep's points would all claim it")
    if args.max_parallel and args.detach:
        raise UsageError(
            "--max-parallel is kept by the controller that follows the sweep: drop -d (a point sent keeps "
            "running if this controller stops; the points not sent yet are not), or drop --max-parallel"
        )
    import_paused("lanpool.app.runs.loop")  # the SSH stack (as `run`)

    def ended(row: "JobRow", point: dict[str, str]) -> None:
        took = duration(row.started_at, row.finished_at)
        say(f"run {row.run_name}: point {point_text(point)}: {status_text(row)} in {took}")

    follower = ctl.sweep_follower(
        project, args.workflow, max_parallel=args.max_parallel, judge=not args.detach, say=say, on_end=ended
    )
    async with follower:
        try:
            outcome = await ctl.sweep(
                project,
                args.workflow,
                args.sweep,
                say=say,
                on_submitted=None if args.detach else follower.sent,
                slots=follower.slots,
                **options_of_run(args),
            )
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
            await follower.wait()
        except asyncio.CancelledError:
            if follower.mine:
                run = ctl.runs.job(follower.mine[0]).run_name
                unsent = "; the points not sent yet (--max-parallel) are not sent" if follower.slots else ""
                say(
                    f"run {run}: its jobs keep running: `app headless compare {run}`, `app headless stop {run}`{unsent}"
                )
            raise
    stopped = follower.stopped
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
