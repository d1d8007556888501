"""Detached DAGs: a runner holds a run's whole chain, starts each step when the
steps it waits for are DONE, stages their artifacts itself, and fails dependents of a
failed step. Real agents, real SSH; "no controller alive" = the CLI process has exited.
The in-process part (unit); the rest: tests/integration/test_runner_dag.py."""


def test_gc_keeps_a_finished_step_while_a_step_that_waits_for_it_has_not_run(tmp_path):
    from lanpool.agent.home import AgentHome
    from lanpool.agent.jobs.journal import JobRecord
    from lanpool.agent.retention import collect

    home = AgentHome(tmp_path / "agent")
    home.create()
    for job_id, state, after in (("prep", "DONE", []), ("train", "QUEUED", ["prep"]), ("other", "DONE", [])):
        job_dir = home.job_dir(job_id)
        (job_dir / "workspace").mkdir(parents=True)
        record = JobRecord(job_id, "r", job_id, ["true"], {}, [], state=state, after=after, finished_at=1.0)
        record.save(job_dir)
    report = collect(home, None, 0)
    assert report.jobs_removed == ["other"]
    assert home.job_dir("prep").exists() and report.kept_unfinished == 2
