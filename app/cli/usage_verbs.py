"""`app headless usage [--since 30d] [--by runner|workflow|run] [--json]`: GPU-, CPU- and wall-hours
of this controller's jobs, from its store (app/views/usage.py builds the rows); no runner is asked."""

import argparse
import json

from lanpool.app.cli import render
from lanpool.app.controller import Controller, parse_age
from lanpool.app.errors import ExitCode, UsageError
from lanpool.app.views.formatting import clip


async def usage(ctl: Controller, args: argparse.Namespace) -> int:
    since_s = window_seconds(args.since)
    seen = ctl.usage(since_s, args.by)
    if args.json:
        print(json.dumps(seen.to_json(), indent=2))
        return ExitCode.OK
    headers = [args.by.upper(), "JOBS", "GPU-HOURS", "CPU-HOURS", "WALL-HOURS"]
    rows = [[clip(r.key or "-"), *_figures(r.jobs, r.gpu_hours, r.cpu_hours, r.wall_hours)] for r in seen.rows]
    total = seen.total
    rows.append(["total", *_figures(total.jobs, total.gpu_hours, total.cpu_hours, total.wall_hours)])
    print(f"jobs of this controller that ran in the last {args.since.strip()}, by {args.by} (GPUs and CPUs as asked)")
    print(render.table(headers, rows))
    if not seen.rows:
        print("no job ran in that window")
    return ExitCode.OK


def window_seconds(text: str) -> float:
    """`--since 30d` as seconds: an age as `prune --older-than` takes it, and more than nothing."""
    try:
        seconds = parse_age(text)
    except UsageError as exc:
        raise UsageError(f"--since: {exc.message}") from None
    if seconds <= 0:
        raise UsageError(f"--since {text.strip()} is an empty window: give an age like 12h, 30d or 2w")
    return float(seconds)


def _figures(jobs: int, gpu: float, cpu: float, wall: float) -> list[str]:
    return [str(jobs), f"{gpu:.3f}", f"{cpu:.3f}", f"{wall:.3f}"]
