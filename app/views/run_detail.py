"""One run in full, as `status RUN` shows it (like `scontrol show job`, `sky status -v`): the run,
then each job with its nodes, runner, resources, environment, attempts, timings, exit,
artifacts and, while it waits, why.

The same dict is `status RUN --json` and what the text is printed from. The environment is
shown as stored, which holds a secret's placeholder (`${{ secrets.NAME }}`), never its value;
a value given on the command line (`--env KEY=...`) is written `***` where its name looks
like a credential's or it equals a secret's current value.
"""

import json
import re
from collections.abc import Collection
from typing import Any

from lanpool.app.store import JobRow, Store

MASK = "***"
# Names whose values are credentials by convention (WANDB_API_KEY, HF_TOKEN, AWS_SECRET_ACCESS_KEY ...).
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|CREDENTIALS?|AUTH)(_|$)", re.IGNORECASE)


def masked_env(env: dict[str, Any], secret_values: Collection[str]) -> dict[str, str]:
    """`env` with every value that may be a credential written MASK (placeholders kept: they hold no value)."""
    out: dict[str, str] = {}
    for name, value in env.items():
        text = str(value)
        placeholder = text.startswith("${{") and text.endswith("}}")
        hide = not placeholder and (bool(_SECRET_NAME.search(name)) or (text in secret_values and text != ""))
        out[str(name)] = MASK if hide else text
    return out


def run_detail(
    store: Store,
    jobs: list[JobRow],
    runner_states: dict[str, str | None],
    secret_values: Collection[str] = (),
) -> dict[str, Any]:
    """`jobs` (one run's, or one job of it) in full, with their run."""
    run_name = jobs[0].run_name
    run = store.run(run_name)
    return {
        "run": run_name,
        "workflow": run.workflow if run else jobs[0].workflow,
        "project": run.project if run else "",
        "project_dir": run.project_dir if run else "",
        "tag": run.tag if run else None,
        "created_at": run.created_at if run else None,
        "variables": store.run_variables(run_name),
        "jobs": [_job(store, j, runner_states, secret_values) for j in jobs],
    }


def _job(
    store: Store, job: JobRow, runner_states: dict[str, str | None], secret_values: Collection[str]
) -> dict[str, Any]:
    try:
        spec: dict[str, Any] = json.loads(job.spec or "{}")
    except ValueError:
        spec = {}
    if not isinstance(spec, dict):
        spec = {}
    env = spec.get("env") if isinstance(spec.get("env"), dict) else {}
    events = store.job_events(job.id)
    queued = [detail for _at, status, detail in events if status == "QUEUED"]
    waiting = job.status == "QUEUED"
    return {
        "job": job.id,
        "workflow": job.workflow,
        "status": job.status,
        "exit_code": job.exit_code,
        "error": job.error,
        "queue_reason": (job.error or (queued[-1] if queued else "")) if waiting else None,
        "runner": job.runner or None,
        "runner_state": runner_states.get(job.runner) if job.runner else None,
        "nodes": [
            {k: n.get(k) for k in ("node", "runner", "host", "port", "status", "exit_code", "error")}
            for n in store.nodes(job.id)
        ],
        "resources": spec.get("resources") or {},
        "image": spec.get("image") or None,
        "commands": spec.get("commands") or [],
        "working_dir": spec.get("working_dir") or None,
        "ports": spec.get("ports") or [],
        "env": masked_env(env or {}, secret_values),
        "passed_env": spec.get("passed_env") or [],  # names only: their values never leave the caller
        "attempts": job.retries + 1,
        "submitted_at": job.submitted_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "artifacts": [{"path": p, "size": s} for p, s in store.artifacts(job.id)],
        "artifacts_pulled": job.artifacts_pulled,
        "warnings": store.warnings(job.id),
        "events": [{"at": at, "status": status, "detail": detail} for at, status, detail in events],
    }
