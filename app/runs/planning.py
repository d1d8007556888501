"""Planning a run: the DAG of a workflow and its dependencies, each job's cache
key, and whether it runs or reuses an earlier job with the same inputs.

A key hashes everything a job's result depends on: its resolved spec, its
variables, the content of the repo files it depends on (all of the snapshot,
or only `depends-on.repo.include`), and its dependencies' keys. The parts are
kept with the job so that a later plan can say which input changed.
"""

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lanpool.app.errors import LanpoolError, UsageError
from lanpool.app.home import ControllerHome
from lanpool.app.store import JobRow, Store
from lanpool.app.transfer.snapshot import file_hashes
from lanpool.app.workflows import Project, WorkflowError
from lanpool.app.workflows.model import Dependency, render_value
from lanpool.app.workflows.resolve import RUN_ARGS, ResolvedJob, override_target, resolve

# Built-ins are left as placeholders in keys: they differ on every run.
KEY_BUILTINS = {"run_name": "{run_name}", "job_id": "{job_id}"}
_MAX_FILES_KEPT = 5000  # per-file hashes kept to explain changes; above, only their digest


@dataclass
class PlannedJob:
    workflow: str
    job: ResolvedJob
    deps: list[str]  # workflows planned in this run that this job takes artifacts from
    tagged: list[JobRow]  # jobs of tagged runs (`prepare:NAME`) it takes artifacts from
    key: str
    inputs: dict[str, Any]
    action: str = "run"  # "run" or "reuse"
    reuse: JobRow | None = None
    reason: str = ""


@dataclass
class Plan:
    workflow: str
    jobs: list[PlannedJob] = field(default_factory=list)  # dependencies first

    @property
    def to_run(self) -> list[PlannedJob]:
        return [j for j in self.jobs if j.action == "run"]

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "jobs": [
                {
                    "workflow": j.workflow,
                    "action": j.action,
                    "reason": j.reason,
                    "key": j.key,
                    "reuse_job": j.reuse.id if j.reuse else None,
                    "depends_on": j.deps,
                    "tagged_inputs": [t.id for t in j.tagged],
                    "variables": j.job.variables,
                }
                for j in self.jobs
            ],
        }


def known_variables(project: Project, workflow: str) -> dict[str, object]:
    """Every variable an override may name in a run of `workflow` (its DAG's)."""
    names: dict[str, object] = {}
    for name in dag_order(project, workflow):
        for k, v in project.variables_of(name).items():
            names.setdefault(k, v)
    return names


def dag_order(project: Project, workflow: str) -> list[str]:
    """`workflow` and the workflows it depends on (not via tags), dependencies first."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        for dep in project.get(name).depends_on:
            if not dep.tag:
                visit(dep.workflow)
        order.append(name)

    visit(workflow)
    return order


def check_overrides(project: Project, workflow: str, overrides: dict[str, str]) -> None:
    known = known_variables(project, workflow)
    for name in overrides:
        if name != RUN_ARGS and override_target(name, known) is None:
            alike = [n for n in known if n.replace("-", "_") == name.replace("-", "_")]
            if len(alike) > 1:
                raise WorkflowError(
                    f"--{name} could mean variable {alike[0]!r} or {alike[1]!r}: rename one in {project.variables_path}"
                )
            valid = ", ".join(f"--{n}" for n in sorted(known)) or f"none (add them to {project.variables_path})"
            raise WorkflowError(f"unknown variable --{name} for {workflow!r}; valid: {valid}")


def make_plan(
    project: Project,
    store: Store,
    home: ControllerHome,
    workflow: str,
    overrides: dict[str, str],
    no_cache: bool = False,
    reuse_requested: bool = False,
    env: dict[str, str] | None = None,
) -> Plan:
    """`env`: `run --env`/`--env-file` (app/runs/env_overrides.py), over each job's own `env:`."""
    check_overrides(project, workflow, overrides)
    plan = Plan(workflow)
    keys: dict[str, str] = {}
    all_files = None
    for name in dag_order(project, workflow):
        wf = project.get(name)
        job = with_env(resolve(project, name, overrides, KEY_BUILTINS), env)
        if wf.repo_include is None:
            all_files = all_files if all_files is not None else file_hashes(project.root)
            files = all_files
        else:
            files = file_hashes(project.root, wf.repo_include)
        tagged = [job for dep in wf.depends_on if dep.tag for job in _fixed_inputs(store, project, name, dep)]
        deps = [d.workflow for d in wf.depends_on if not d.tag]
        inputs = _inputs(job, files, {d: keys[d] for d in deps}, {t.workflow: t.id for t in tagged})
        key = _digest(inputs)
        keys[name] = key
        planned = PlannedJob(name, job, deps, tagged, key, inputs)

        def spec_with(variables: dict[str, Any], name: str = name) -> dict[str, Any] | None:
            """The job's spec had its variables been `variables`: what of a change they explain."""
            try:
                old = {k: render_value(v) for k, v in variables.items()}
                again = with_env(resolve(project, name, {**overrides, **old}, KEY_BUILTINS), env)
            except LanpoolError:  # a variable since removed, a value its workflow refuses now
                return None
            spec: dict[str, Any] = _inputs(again, {}, {}, {})["spec"]
            return spec

        _decide(
            planned,
            store,
            home,
            str(project.root),
            requested=(name == workflow),
            no_cache=no_cache,
            reuse_requested=reuse_requested,
            spec_with=spec_with,
        )
        plan.jobs.append(planned)
    return plan


def with_env(job: ResolvedJob, env: dict[str, str] | None) -> ResolvedJob:
    """The job with the run's env overrides applied after its workflow's `env:` (they are inputs:
    its key sees them; a secret among them is its `${{ secrets.NAME }}` placeholder)."""
    return dataclasses.replace(job, env={**job.env, **env}) if env else job


def not_finished_yet(subject: str, command: str) -> str:
    """The one wording for a run, tag or workflow a dependency or resume names that has no
    finished job yet, and what to run."""
    return f"{subject} has no finished job yet: run `app headless {command}` first"


def _fixed_inputs(store: Store, project: Project, name: str, dep: Dependency) -> list[JobRow]:
    """The finished jobs a `WORKFLOW:TAG`, `WORKFLOW:latest` or `:TAG` dependency stands for."""
    if dep.latest:  # dstack's `download:latest`: the newest DONE run of it in this project
        found = store.latest_done_job(str(project.root), dep.workflow)
        if found is None:
            subject = f"workflow {name!r} depends on {dep}: {dep.workflow!r} (in this project)"
            raise UsageError(not_finished_yet(subject, f"run {dep.workflow}"))
        return [found]
    tag = dep.tag or ""
    if not dep.workflow:  # late 2022 `- tag: NAME`: every finished job of the run tagged NAME
        jobs = store.tagged_jobs(tag)
        if not jobs:
            subject = f"workflow {name!r} depends on the run tagged {tag!r}: that tag"
            raise UsageError(not_finished_yet(subject, f"run WORKFLOW --tag {tag}"))
        return jobs
    found = store.tagged_job(tag, dep.workflow)
    if found is None:
        subject = f"workflow {name!r} depends on {dep}: {dep.workflow!r} tagged {tag!r}"
        raise UsageError(not_finished_yet(subject, f"run {dep.workflow} --tag {tag}"))
    return [found]


def _inputs(
    job: ResolvedJob, files: dict[str, str], dep_keys: dict[str, str], tagged: dict[str, str]
) -> dict[str, Any]:
    spec = {
        "commands": job.commands,
        "env": job.env,
        "image": job.image,
        "artifacts": job.artifacts,
        "artifacts_all_nodes": job.artifacts_all_nodes,
        "working_dir": job.working_dir,
        "nodes": job.nodes,
        "gpu_name": job.resources.get("gpu_name", ""),
    }
    if job.resume_from:  # only when set: keys of jobs without it stay what they were
        spec["resume_from"] = job.resume_from
    if job.python or job.requirements:  # the pip line left the commands: the key still sees them
        spec["python"], spec["requirements"] = job.python, job.requirements
    if not job.hold_base:  # only when set: keys of jobs that hold the base stay what they were
        spec["hold_base"] = False
    if job.passed_env:  # the names only: the caller's values are never stored, even hashed
        spec["passed_env"] = job.passed_env
    files_digest = _digest(files)
    return {
        "spec": spec,
        "variables": job.variables,
        "files_digest": files_digest,
        "files": files if len(files) <= _MAX_FILES_KEPT else None,
        "deps": dep_keys,
        "tagged": tagged,
    }


def _digest(value: object) -> str:
    if isinstance(value, dict) and "files" in value:  # the per-file map is summarised by files_digest
        value = {k: v for k, v in value.items() if k != "files"}
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _decide(
    job: PlannedJob,
    store: Store,
    home: ControllerHome,
    project_dir: str,
    *,
    requested: bool,
    no_cache: bool,
    reuse_requested: bool,
    spec_with: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
) -> None:
    if no_cache:
        job.reason = "--no-cache"
        return
    if requested and not reuse_requested:
        job.reason = "the requested workflow always runs (--reuse to reuse a run with the same inputs)"
        return
    earlier = store.reusable_job(job.key)
    if earlier is not None and (not store.artifacts(earlier.id) or home.job_artifacts(earlier.id).is_dir()):
        job.action, job.reuse = "reuse", earlier
        job.reason = f"same inputs as job {earlier.id} (run {earlier.run_name})"
        return
    job.reason = explain_change(store, project_dir, job, spec_with)


def explain_change(
    store: Store,
    project_dir: str,
    job: PlannedJob,
    spec_with: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
) -> str:
    """What differs from the job a rerun would have reused (store.last_inputs), each input once:
    a field that differs only because a variable did (a `$lr` in the commands) is the variable's change."""
    last = store.last_inputs(project_dir, job.workflow, job.inputs["variables"])
    if last is None:
        return "never ran with these inputs"
    last_id, before = last
    now = job.inputs
    var_changes = sorted(
        k
        for k in set(before.get("variables", {})) | set(now["variables"])
        if before.get("variables", {}).get(k) != now["variables"].get(k)
    )
    old_spec = before.get("spec", {})
    as_before = spec_with(before.get("variables", {})) if var_changes and spec_with else None
    changed = []
    for field_name in sorted(set(old_spec) | set(now["spec"])):
        if old_spec.get(field_name) != now["spec"].get(field_name):
            if as_before is not None and as_before.get(field_name) == old_spec.get(field_name):
                continue  # the variables' doing: said once, below
            changed.append(field_name)
    if var_changes:
        changed.append("variables " + ", ".join(var_changes))
    if before.get("files_digest") != now["files_digest"]:
        old, new = before.get("files") or {}, now.get("files") or {}
        files = sorted(p for p in set(old) | set(new) if old.get(p) != new.get(p))
        if files:
            shown = ", ".join(files[:3]) + (f" (+{len(files) - 3} more)" if len(files) > 3 else "")
            changed.append(f"files {shown}")
        else:
            changed.append("repo files")
    dep_changes = sorted(
        k for k in set(before.get("deps", {})) | set(now["deps"]) if before.get("deps", {}).get(k) != now["deps"].get(k)
    )
    if dep_changes:
        changed.append("dependency " + ", ".join(dep_changes))
    if before.get("tagged") != now["tagged"]:
        changed.append("tagged input")
    if not changed:
        return f"job {last_id} had the same inputs but did not finish DONE (or its artifacts are gone)"
    return f"changed since job {last_id}: " + "; ".join(changed)
