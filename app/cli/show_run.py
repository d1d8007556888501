"""`app headless status RUN`: one run in full, as text or `--json` (app/views/run_detail.py has
what is shown and how the environment is masked)."""

import json
import time
from typing import Any

from lanpool.app.views.formatting import duration, size
from lanpool.app.views.terminal_text import safe_line


def print_run(detail: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(detail, indent=2))
        return
    for line in run_lines(detail):
        print(safe_line(line))  # names, commands and errors come from workflows and runners


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def run_lines(d: dict[str, Any]) -> list[str]:
    lines = [
        f"Run:        {d['run']}",
        f"Workflow:   {d['workflow']}",
        f"Project:    {d['project'] or '-'} ({d['project_dir'] or '-'})",
        f"Tag:        {d['tag'] or '-'}",
        f"Created:    {_when(d['created_at'])}",
        "Variables:  " + (", ".join(f"{k}={v}" for k, v in sorted(d["variables"].items())) or "-"),
    ]
    for j in d["jobs"]:
        lines += [""] + _job_lines(j)
    return lines


def _job_lines(j: dict[str, Any]) -> list[str]:
    exit_code = "-" if j["exit_code"] is None else str(j["exit_code"])
    runner = j["runner"] or "- (not placed yet)"
    if j["runner_state"]:
        runner += f" ({j['runner_state']})"
    resources = ", ".join(f"{k}={v}" for k, v in sorted(j["resources"].items())) or "any runner"
    lines = [
        f"Job {j['job']} ({j['workflow']})",
        f"  State:      {j['status']}   Exit: {exit_code}   Attempts: {j['attempts']}",
    ]
    if j["queue_reason"]:
        lines.append(f"  Waiting:    {j['queue_reason']}")
    if j["error"] and not j["queue_reason"]:
        lines.append(f"  Error:      {j['error'].splitlines()[0] if j['error'].splitlines() else ''}")
    lines += [
        f"  Runner:     {runner}",
        f"  Resources:  {resources}",
        f"  Image:      {j['image'] or '- (process job)'}   Working dir: {j['working_dir'] or '-'}",
        f"  Ports:      {', '.join(str(p) for p in j['ports']) or '-'}",
        f"  Submitted:  {_when(j['submitted_at'])}",
        f"  Started:    {_when(j['started_at'])}"
        + (f"   (waited {duration(j['submitted_at'], j['started_at'])})" if j["started_at"] else ""),
        f"  Finished:   {_when(j['finished_at'])}"
        + (f"   (ran {duration(j['started_at'], j['finished_at'])})" if j["started_at"] else ""),
    ]
    for n in j["nodes"] if len(j["nodes"]) > 1 else []:
        code = "" if n["exit_code"] is None else f" ({n['exit_code']})"
        lines.append(f"  Node {n['node']}:     {n['runner']} {n['host']}:{n['port']} {n['status']}{code}")
    if j["commands"]:
        lines.append("  Commands:")
        lines += [f"    {c}" for c in j["commands"]]
    env = j["env"]
    lines.append("  Env:        " + (", ".join(f"{k}={v}" for k, v in sorted(env.items())) or "-"))
    if j["passed_env"]:
        lines.append("  Passed env: " + ", ".join(j["passed_env"]) + " (from the shell that ran it)")
    arts = j["artifacts"]
    pulled = {1: "", 0: " (not brought back yet)", -1: " (refused)"}.get(j["artifacts_pulled"] or 0, "")
    lines.append(f"  Artifacts:  {len(arts)} file(s), {size(sum(a['size'] for a in arts))}{pulled}")
    lines += [f"    {size(a['size']):>10}  {a['path']}" for a in arts[:20]]
    if len(arts) > 20:
        lines.append(f"    ... {len(arts) - 20} more: `app headless artifacts list {j['job']}`")
    lines += [f"  Warning:    {w}" for w in j["warnings"]]
    lines.append("  Events:")
    lines += [
        f"    {_when(e['at'])}  {e['status']:<9} {e['detail']}".rstrip()
        for e in j["events"]
        if e["status"] != "WARNING"
    ]
    return lines
