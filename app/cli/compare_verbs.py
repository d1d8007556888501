"""`app headless compare RUN [RUN ...]`: runs side by side (app/views/compare.py builds the rows)."""

import argparse
import json
from typing import TYPE_CHECKING

from lanpool.app.cli import render
from lanpool.app.controller import Controller
from lanpool.app.errors import ExitCode, NotFoundError
from lanpool.app.views.formatting import clip, duration, status_text
from lanpool.app.views.terminal_text import safe_line

if TYPE_CHECKING:
    from lanpool.app.views.compare import Comparison


async def compare(ctl: Controller, args: argparse.Namespace) -> int:
    refs = list(dict.fromkeys(args.refs))
    await ctl.refresh([j for ref in refs for j in ctl.runs.resolve(ref)])  # unfinished jobs: their last points
    asked = list(dict.fromkeys([*(args.metric or []), *([args.sort] if args.sort else [])]))
    seen = ctl.runs.compared(refs, args.metric, args.mode, args.sort)
    _check_logged(asked, seen)
    if args.json:
        print(json.dumps({"varying": seen.varying, "metrics": seen.metrics, "sort": seen.sort, "jobs": seen.rows}))
        return ExitCode.OK
    print_comparison(ctl, seen)
    return ExitCode.OK


def print_comparison(ctl: Controller, seen: "Comparison") -> None:
    """The rows as a table (also the end of a followed sweep: app/cli/sweep_verbs.py)."""
    headers = ["RUN", "JOB", *(clip(v) for v in seen.varying), "STATUS", "DURATION"]
    for name in seen.metrics:
        mode = next((r["metrics"][name]["mode"] for r in seen.rows if r["metrics"].get(name)), "min")
        headers += [f"{clip(name)} ({mode})", "AT STEP", "LAST"]
    rows = []
    for row in seen.rows:
        job = ctl.runs.job(row["job_id"])
        cells = [clip(row["run"]), row["job_id"][:12]]
        cells += [clip(_shown(row["variables"].get(v, "-"))) for v in seen.varying]
        cells += [status_text(job), duration(job.started_at, job.finished_at)]
        for name in seen.metrics:
            summary = row["metrics"].get(name)
            cells += (
                [_number(summary["best"]), _step(summary["best_step"]), _number(summary["last"])]
                if summary
                else ["-", "-", "-"]
            )
        rows.append(cells)
    print(render.table(headers, rows))
    if not seen.metrics:
        print("no metrics yet (jobs log them through lanpool.training.metrics.LanpoolMetrics, or Lightning's loggers)")


def _check_logged(asked: list[str], seen: "Comparison") -> None:
    """A `--metric`/`--sort` name no job logged is a typo to say, not a column of dashes."""
    missing = [name for name in asked if name not in seen.logged]
    if not missing:
        return
    logged = seen.logged
    have = f"they logged: {', '.join(logged[:20])}" if logged else "they logged no metrics yet"
    names = ", ".join(repr(n) for n in missing)
    raise NotFoundError(f"no job compared logged metric {safe_line(names)[:200]} ({safe_line(have)[:300]})")


def _shown(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _number(value: float | None) -> str:
    return "nan" if value is None else f"{value:.6g}"


def _step(step: object) -> str:
    return "-" if step is None else clip(str(step), 20)  # a job's value: any JSON
