"""`app headless run` and `plan`: a workflow's jobs, planned, submitted and followed."""

import argparse
import asyncio
import json
import shlex
from pathlib import Path

from lanpool.app.cli import render
from lanpool.app.cli.parser import apply_options, verb_options
from lanpool.app.cli.render import say
from lanpool.app.cli.run_options import env_of, options_of_run, resources_of
from lanpool.app.cli.workflow_args import read_tail, tail_value
from lanpool.app.controller import ARTIFACTS_REFUSED, Controller, JobRow, Submitted
from lanpool.app.errors import ExitCode, LanpoolError, UsageError
from lanpool.app.startup.import_paused import import_paused
from lanpool.app.views.formatting import clip, duration, status_text
from lanpool.app.views.terminal_text import safe_line
from lanpool.app.workflows import Project, find_project
from lanpool.app.workflows.resolve import RUN_ARGS, render_value, uses_run_args

_NO_PROJECT = (
    "no .lanpool/workflows.yaml (or .lanpool/workflows/*.yaml, or .dstack/'s) here or above: see docs/workflows.md"
)


def _project(ctl: Controller, args: argparse.Namespace, verb: str) -> Project:
    """The project, with the words after the workflow name read: `args.overrides` set, and
    the lanpool options among them applied (app/cli/workflow_args.py has the rule)."""
    root = args.project or find_project(Path.cwd())
    moved = tail_value(args.tail, "--project")  # a project dir after the name, unless W has a variable `project`
    project: Project | None = None
    variables: dict[str, object] = {}
    try:
        if root is None:
            raise UsageError(_NO_PROJECT)
        project = ctl.load_project(root)
        variables = dict(ctl.variables(project, args.workflow)) if args.workflow else {}
    except LanpoolError:
        if moved is None:
            raise
    if moved is not None and "project" not in variables:
        project = ctl.load_project(Path(moved))
        variables = dict(ctl.variables(project, args.workflow)) if args.workflow else {}
        if "project" in variables:  # the dir given holds a W whose variable `project` it could also be
            raise UsageError(
                f"--project {moved}: the project dir, or variable 'project' of {args.workflow!r} there? "
                f"Put the dir before the name: app headless {verb} --project {moved} {args.workflow} --project VALUE"
            )
    if project is None:  # not reached: a failed load re-raised or was replaced by the dir after the name
        raise UsageError(_NO_PROJECT)
    takes = bool(args.workflow) and args.workflow in project.workflows and uses_run_args(project.get(args.workflow))
    tail = read_tail(args.tail, variables, verb_options(verb), verb, args.workflow or "", takes)
    apply_options(verb, tail.options, args)
    args.overrides = tail.overrides
    if tail.run_args:  # `${{ run.args }}`, as shell words
        args.overrides[RUN_ARGS] = shlex.join(tail.run_args)
    for note in tail.notes:
        say(note)
    return project


def _workflow_help(ctl: Controller, project: Project, name: str, verb: str) -> None:
    wf = project.get(name)
    print(f"usage: app headless {verb} [options] {name} [--VARIABLE VALUE ...]")
    print("lanpool's options go before the workflow name (after it too, where no variable is spelled the same)")
    if wf.help:
        print(f"\n{wf.help}")
    own = project.variables_of(name)
    # The workflows it depends on take the same overrides: theirs are listed apart, each with its owner.
    theirs = {var: owner for var, owner in _variable_owners(ctl, project, name).items() if var not in own}
    if own or theirs:
        width = max(len(v) for v in [*own, *theirs]) + 2
        if own:
            print(f"\nvariables of {name} (defaults from {project.variables_path}):")
            for var, default in sorted(own.items()):
                print(f"  --{var.ljust(width)} {render_value(default)}")
        if theirs:
            print(f"\nvariables of the workflows {name} depends on (--VARIABLE sets them there too):")
            for var, owner in sorted(theirs.items()):
                print(f"  --{var.ljust(width)} {render_value(project.variables_of(owner).get(var, ''))}  ({owner})")
    else:
        print(f"\nno variables (define them in {project.variables_path})")
    print(
        "\noptions: --runner NAME|HOST[:PORT], -d/--detach, --no-cache, --reuse, --tag NAME, "
        "--env KEY=VALUE, --env-file FILE, --gpu N, --cpu N, --memory SIZE, --name NAME, --sweep VAR=V1,V2, --json"
    )


def _variable_owners(ctl: Controller, project: Project, name: str) -> dict[str, str]:
    """Each variable a run of `name` takes -> the workflow of its DAG whose default it shows."""
    dag, todo = [], [name]
    while todo:  # the workflows `name` depends on, nearest first (a tagged run is fixed: not planned)
        wf = todo.pop(0)
        if wf not in dag and wf in project.workflows:
            dag.append(wf)
            todo += [d.workflow for d in project.get(wf).depends_on if not d.tag]
    return {var: next((w for w in dag if var in project.variables_of(w)), name) for var in ctl.variables(project, name)}


def _list_workflows(project: Project, as_json: bool) -> None:
    """Every workflow of the project, those lanpool refuses marked with why (one line each)."""
    if as_json:
        listing: list[dict[str, object]] = [
            {
                "name": w.name,
                "help": w.help,
                "depends_on": [d.workflow for d in w.depends_on],
                "variables": project.variables_of(w.name),
            }
            for w in project.workflows.values()
        ]
        listing += [{"name": name, "refused": error.message} for name, error in project.refused.items()]
        listing += [{"file_error": message} for message in project.file_errors]
        print(json.dumps(listing, indent=2))
        return
    where = project.workflows_file if len(project.files) < 2 else project.workflows_file.parent
    print(f"workflows in {where}:")
    width = max((len(clip(n)) for n in [*project.workflows, *project.refused]), default=0)
    for wf in project.workflows.values():
        print(f"  {wf.name.ljust(width)}  {wf.help}".rstrip())
    for name, error in project.refused.items():
        print(safe_line(f"  {clip(name).ljust(width)}  refused: {error.message}"))
    for message in project.file_errors:
        print(safe_line(f"  (not read) {message}"))


async def run(ctl: Controller, args: argparse.Namespace) -> int:
    project = _project(ctl, args, "run")
    if args.dev and not args.workflow:  # `dev` alone: the project's one `dev: true` workflow
        args.workflow = _dev_workflow(project)
    if not args.workflow:
        _list_workflows(project, args.json)
        return ExitCode.OK
    if args.help:
        _workflow_help(ctl, project, args.workflow, "run")
        return ExitCode.OK
    if args.sweep or _has_sweep(project, args.workflow):  # one run of a job per point (app/cli/sweep_verbs.py)
        from lanpool.app.cli.sweep_verbs import run_sweep

        return await run_sweep(ctl, project, args)
    if args.max_parallel:
        raise UsageError(f"--max-parallel limits a sweep's points: {args.workflow} has no sweep: add --sweep VAR=V1,V2")
    if (
        args.dev or args.ide is not None or project.get(args.workflow).dev
    ):  # a dev environment (app/cli/dev_env_verbs.py)
        from lanpool.app.cli.dev_env_verbs import run_dev

        return await run_dev(ctl, project, args)
    if args.idle is not None:
        raise UsageError(f"--idle is a dev environment's: `app headless dev {args.workflow}` (or `dev: true` in it)")
    notify_cmd = _notify_cmd(args)  # a bad one is refused before anything runs
    import_paused("lanpool.app.runs.loop")  # the SSH stack, ~60% of a `run`'s imports (Controller.run uses it)
    submitted: list[Submitted] = []
    forwards: list[asyncio.Task[None]] = []

    def announce(sub: Submitted) -> None:
        submitted.append(sub)
        say(f"run {sub.run_name}: job {sub.job_id} ({ctl.runs.job(sub.job_id).workflow}) on runner {sub.runner}")
        if not args.detach and json.loads(ctl.runs.job(sub.job_id).spec or "{}").get("ports"):
            # A detached job's ports: `app headless ports RUN`. Imported only for a job with ports.
            from lanpool.app.cli.shell_verbs import forward_while_running

            forwards.extend(t for t in [forward_while_running(ctl, sub.job_id, say)] if t is not None)
        if args.detach and len(submitted) == 1:  # once for the run, not for each step of a chain
            say(
                f"detached: `app headless logs -f {sub.run_name}` follows it, `app headless stop {sub.run_name}` stops it"
            )

    try:
        outcome = await ctl.run(
            project, args.workflow, sink=render.LogPrinter(), say=say, on_submitted=announce, **options_of_run(args)
        )
    except LanpoolError as exc:
        if not submitted:
            raise
        name = submitted[0].run_name
        raise type(exc)(f"{exc.message}; the job may still run: `app headless logs -f {name}` re-attaches") from None
    finally:
        for task in forwards:
            task.cancel()
    if args.json:  # one object on stdout, after any log lines: the run and its jobs as they stand
        jobs = [ctl.runs.job(s.job_id) for s in outcome.submitted]
        print(
            json.dumps(
                {
                    "run": outcome.run_name,
                    "jobs": [
                        {
                            "job_id": j.id,
                            "workflow": j.workflow,
                            "runner": j.runner,
                            "status": j.status,
                            "exit_code": j.exit_code,
                            "warnings": ctl.runs.warnings(j.id),
                        }
                        for j in jobs
                    ],
                }
            )
        )
    if args.detach:
        return ExitCode.OK
    job = outcome.last
    if job is None:
        say(f"run {outcome.run_name}: every job reused; nothing ran")
        return ExitCode.OK
    say(_summary(ctl, job))
    if args.notify or notify_cmd:
        from lanpool.app.cli.attach_verbs import notify_end

        notify_end(job, notify_cmd, args.notify)
    if job.artifacts_pulled == ARTIFACTS_REFUSED and not job.exit_code:  # it exited 0, but what it made was refused
        return ExitCode.FAILED
    return job.exit_code if job.exit_code is not None else ExitCode.FAILED


async def plan(ctl: Controller, args: argparse.Namespace) -> int:
    project = _project(ctl, args, "plan")
    if args.help:
        _workflow_help(ctl, project, args.workflow, "plan")
        return ExitCode.OK
    if args.sweep or _has_sweep(project, args.workflow):
        from lanpool.app.cli.sweep_verbs import plan_sweep

        return plan_sweep(ctl, project, args)
    resources = resources_of(args)
    the_plan = ctl.plan(project, args.workflow, args.overrides, args.no_cache, args.reuse, env_of(args), resources)
    if args.json:
        out = the_plan.to_json()
        for planned, shown_job in zip(the_plan.jobs, out["jobs"], strict=True):
            shown_job["resources"] = planned.job.resources  # with --gpu/--cpu/--memory applied
        print(json.dumps(out, indent=2))
        return ExitCode.OK
    print(f"plan for {args.workflow}: {len(the_plan.to_run)} of {len(the_plan.jobs)} job(s) to run")
    rows = [
        [
            j.workflow,
            j.action.upper(),
            ", ".join(j.deps + [f"{t.workflow}:{t.run_name}" for t in j.tagged]) or "-",
            j.key[:12],
            j.reason,
        ]
        for j in the_plan.jobs
    ]
    print(render.table(["WORKFLOW", "ACTION", "DEPENDS ON", "KEY", "WHY"], rows))
    if resources:
        from lanpool.app.controller import shown_resources

        asked = next(j for j in the_plan.jobs if j.workflow == args.workflow)
        print(
            f"resources of {args.workflow} (the command line's over the workflow's): {shown_resources(asked.job.resources)}"
        )
    return ExitCode.OK


def _dev_workflow(project: Project) -> str:
    marked = [name for name, wf in project.workflows.items() if wf.dev]
    if len(marked) != 1:
        which = f"several are ({', '.join(sorted(marked)[:5])})" if marked else "none is"
        refused = f" (refused, so not counted: {', '.join(sorted(project.refused)[:5])})" if project.refused else ""
        raise UsageError(f"name the workflow (app headless dev WORKFLOW): {which} marked `dev: true`{refused}")
    return marked[0]


def _has_sweep(project: Project, workflow: str) -> bool:
    """The workflow has a `sweep:` (an unknown or refused one: the usual path says why)."""
    found = project.workflows.get(workflow)
    return found is not None and found.sweep is not None


def _notify_cmd(args: argparse.Namespace) -> list[str] | None:
    """`--notify-cmd` as its argv, checked; `--notify` and `--notify-cmd` need a followed run."""
    if not args.notify and args.notify_cmd is None:
        return None
    if args.detach:
        raise UsageError("--notify needs a followed run: with -d, `app headless attach RUN --notify` notifies later")
    if args.notify_cmd is None:
        return None
    from lanpool.app.notify import notify_command

    return notify_command(args.notify_cmd)


def _summary(ctl: Controller, job: JobRow) -> str:
    # From the job's first start: a retried job's whole time, and how many tries it took.
    text = f"run {job.run_name}: {status_text(job)} in {duration(job.started_at, job.finished_at)}"
    if job.retries:
        text += f" ({job.retries + 1} attempts)"
    if job.error:
        text += f": {job.error}"
    files = ctl.runs.artifacts(job.id)
    if files:
        text += f"; {len(files)} artifact file(s): `app headless artifacts download {job.run_name}`"
    return text
