"""lanpool from Python: `lanpool.run`, `lanpool.compare`, `lanpool.runners` (docs/api.md).

The third front end beside the CLI and the TUI, on the same Controller and the same store
(LANPOOL_HOME, else the user's): a run started here is in `app headless status` and the TUI, and
one started there can be opened here (`lanpool.Run("pink-fly-1")`). No server, no thread left
behind: each call opens the store, does its work and closes it. Calls are synchronous; inside a
running event loop (a notebook) they run on a thread of their own.

    import lanpool
    run = lanpool.run("train", variables={"lr": 3e-4}, project="~/proj")   # detached: returns once sent
    run.wait()
    print(run.metrics()[-1])
    sweep = lanpool.run("train", sweep={"lr": [1e-4, 3e-4]}, project="~/proj")
    print(lanpool.compare(sweep, sort="val_loss")["jobs"][0]["variables"])

Bad input raises `lanpool.Error` (a `LanpoolError`: `.message` is the CLI's one line).
"""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lanpool.app.api.handle import Run, call
from lanpool.app.errors import LanpoolError, UsageError

Error = LanpoolError

__all__ = ["Error", "Run", "compare", "run", "runners"]


def run(
    workflow: str,
    *,
    variables: Mapping[str, object] | None = None,
    sweep: Mapping[str, Sequence[object]] | None = None,
    detach: bool = True,
    project: str | Path = ".",
    runner: str | None = None,
    name: str | None = None,
    env: Mapping[str, str] | None = None,
    max_parallel: int | None = None,
    home: str | Path | None = None,
) -> Run:
    """Run `workflow` of the project at (or above) `project`, as `app headless run` does, and
    return its handle. `variables` override the workflow's (`--lr 3e-4`); `sweep` makes one job
    per combination of the values (`--sweep lr=...`); `detach` (default) returns once the jobs are
    sent (`-d`), else once they ended. `runner`: a runner's name or HOST[:PORT]; `name`: the run's.
    `max_parallel`: a sweep's points sent and not ended at most (`--max-parallel`; needs detach=False)."""
    from lanpool.app.workflows.resolve import render_value

    async def go(ctl: Any) -> str:
        from lanpool.app.workflows import find_project

        root = find_project(Path(project).expanduser())
        if root is None:
            raise UsageError(f"no .lanpool/workflows.yaml (or .dstack/'s) in {project} or above: see docs/workflows.md")
        loaded = ctl.load_project(root)
        known = ctl.variables(loaded, workflow)
        overrides = {}
        for key, value in (variables or {}).items():
            if key not in known:
                have = ", ".join(sorted(known)[:20]) or "none"
                raise UsageError(f"{workflow} has no variable {key!r}; its variables: {have}")
            overrides[key] = render_value(value)
        options: dict[str, Any] = {
            "runner_spec": runner,
            "overrides": overrides,
            "follow": not detach,
            "env": dict(env or {}),
            "run_name": name,
        }
        if sweep is not None or loaded.get(workflow).sweep is not None:
            specs = [_sweep_spec(k, values, render_value) for k, values in (sweep or {}).items()]
            if max_parallel is not None and (detach or isinstance(max_parallel, bool) or max_parallel < 1):
                raise UsageError("max_parallel: a whole number >= 1, kept while the sweep is followed: detach=False")
            follower = ctl.sweep_follower(loaded, workflow, max_parallel=max_parallel, judge=not detach)
            async with follower:  # followed (detach=False): the CLI's limits and early stopping
                sent = None if detach else follower.sent
                outcome = await ctl.sweep(loaded, workflow, specs, on_submitted=sent, slots=follower.slots, **options)
                await follower.wait()
            return str(outcome.run_name)
        if max_parallel is not None:
            raise UsageError(f"max_parallel limits a sweep's points: {workflow} has no sweep: give sweep={{...}}")
        return str((await ctl.run(loaded, workflow, **options)).run_name)

    return Run(call(go, home), home)


def _sweep_spec(variable: str, values: Sequence[object], render: Any) -> str:
    shown = [render(v) for v in values]
    if isinstance(values, str) or not shown or any("," in v for v in shown):
        raise UsageError(f"sweep {variable!r}: give a list of values without commas in them, e.g. [1e-4, 3e-4]")
    return f"{variable}={','.join(shown)}"


def compare(
    *runs: "Run | str",
    metric: Sequence[str] | None = None,
    sort: str | None = None,
    mode: str | None = None,
    home: str | Path | None = None,
) -> dict[str, Any]:
    """Runs (or job ids) side by side, as `app headless compare --json` prints them: `varying`
    (the variables that differ), `metrics`, and `jobs`, one dict per job with its variables,
    status and, per metric, last/best/best_step/points."""
    refs = [r.name if isinstance(r, Run) else str(r) for r in runs]
    if not refs:
        raise UsageError("compare needs a run (or a job id)")
    if mode not in (None, "min", "max"):
        raise UsageError(f"mode {mode!r}: 'min' or 'max'")

    async def go(ctl: Any) -> dict[str, Any]:
        await ctl.refresh([j for ref in refs for j in ctl.runs.resolve(ref)])
        seen = ctl.runs.compared(refs, list(metric) if metric else None, mode, sort)
        return {"varying": seen.varying, "metrics": seen.metrics, "sort": seen.sort, "jobs": seen.rows}

    return call(go, home)


def runners(wait: float = 1.5, home: str | Path | None = None) -> list[dict[str, Any]]:
    """The runners this controller knows and hears (mDNS for `wait` seconds), as `runners --json`."""

    async def go(ctl: Any) -> list[dict[str, Any]]:
        return [v.to_json() for v in await ctl.pool.refresh(wait_s=max(0.0, wait))]

    return call(go, home)
