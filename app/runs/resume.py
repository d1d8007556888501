"""What a run needs besides the job itself: the checkpoint it resumes from.

`resume-from` in a workflow, or `--resume` on the command line, names a job (a
run name, a job id, or WORKFLOW:TAG); its newest checkpoint, from node 0 (global
rank 0 writes them), is placed on every node like a dependency's artifacts.
"""

from lanpool.app.errors import LanpoolError, NotFoundError, UsageError
from lanpool.app.home import ControllerHome
from lanpool.app.runs.planning import Plan, not_finished_yet
from lanpool.app.store import JobRow, Store
from lanpool.app.workflows import Project


class Resumes:
    def __init__(self, store: Store, home: ControllerHome) -> None:
        self.store = store
        self.home = home

    def of(
        self, project: Project, plan: Plan, workflow_name: str, cli_resume: tuple[JobRow, str] | None
    ) -> dict[str, tuple[JobRow, str]]:
        """workflow -> (job, checkpoint) for each job to run that resumes: `--resume` for the
        requested workflow (it wins over its `resume-from`), `resume-from` for any workflow."""
        out = {}
        for planned in plan.to_run:
            if cli_resume is not None and planned.workflow == workflow_name:
                out[planned.workflow] = cli_resume
                continue
            ref = planned.job.resume_from
            if not ref:
                continue
            wf = project.get(planned.workflow)
            try:
                out[planned.workflow] = self.job_and_checkpoint(ref)
            except LanpoolError as exc:  # same exit code, but saying which file line named it
                where = f"{wf.file}:{wf.line_of('resume-from')}: " if wf.file else ""
                raise type(exc)(f"{where}workflow {wf.name!r}: resume-from {ref!r}: {exc.message}") from None
        return out

    def job_and_checkpoint(self, ref: str) -> tuple[JobRow, str]:
        """The job to resume from (a run name, job id or WORKFLOW:TAG) and its checkpoint
        (a path in the workspace)."""
        if ":" in ref:
            workflow, _, tag = ref.partition(":")
            job = self.store.tagged_job(tag, workflow) if workflow and tag else None
            if job is None:
                subject = f"{workflow or 'WORKFLOW'!r} tagged {tag!r}"
                raise NotFoundError(not_finished_yet(subject, f"run {workflow or 'WORKFLOW'} --tag {tag or 'TAG'}"))
        else:
            job = self.store.resolve_jobs(ref)[-1]
        from lanpool.app.transfer.artifacts import other_node_path  # the artifact pull's graph: only a resume needs it

        ckpts = [(p, s) for p, s in self.store.artifacts(job.id) if p.endswith(".ckpt")]
        # Node 0's (global rank 0 writes checkpoints) before other nodes' copies (node-K/...).
        ckpts = [c for c in ckpts if not other_node_path(c[0])] or ckpts
        if not ckpts:
            raise UsageError(
                f"job {job.id} brought back no .ckpt file to resume from "
                "(`app headless artifacts list` shows what it has)"
            )
        local = self.home.job_artifacts(job.id)
        # The newest checkpoint the job wrote (snapshots rotate; the latest is what resumes).
        path = max(ckpts, key=lambda c: (local / c[0]).stat().st_mtime if (local / c[0]).exists() else 0)[0]
        if not (local / path).exists():
            raise UsageError(f"the artifacts of job {job.id} are not in the local store any more")
        return job, path
