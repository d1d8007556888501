"""Which runs `status` lists: its filters (`--state`, `--workflow`, `--runner`, `--tag`,
`--project`) as one SQL condition on the runs table.

A run matches when every filter given matches; a filter on jobs (state, workflow, runner)
matches when any job of the run does, as `squeue --states` keeps a job array whose one
task is running. The condition goes inside the "newest N runs" query, so `-n N` counts
matching runs, and the index on created_at is walked until N of them are found.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class RunFilter:
    states: tuple[str, ...] = ()  # job states, checked by the caller (JobState values)
    workflow: str = ""  # the run's workflow, or a workflow of one of its jobs (a dependency)
    runner: str = ""  # a runner any node of any of its jobs ran on
    tag: str = ""
    project: str = ""  # the project's name (its dir's last part) ...
    project_dir: str = ""  # ... or its dir, absolute

    def __bool__(self) -> bool:
        return any((self.states, self.workflow, self.runner, self.tag, self.project, self.project_dir))

    def where(self) -> tuple[str, list[object]]:
        """`(condition, params)` on the unaliased `runs` table; `("1", [])` for no filter."""
        parts: list[str] = []
        params: list[object] = []
        of_run = "SELECT 1 FROM jobs j WHERE j.run_name = runs.name"
        if self.states:
            parts.append(f"EXISTS ({of_run} AND j.status IN ({', '.join('?' * len(self.states))}))")
            params += self.states
        if self.workflow:
            parts.append(f"(runs.workflow = ? OR EXISTS ({of_run} AND j.workflow = ?))")
            params += [self.workflow, self.workflow]
        if self.runner:
            on_node = "SELECT 1 FROM job_nodes n WHERE n.job_id = j.id AND n.runner = ?"
            parts.append(f"EXISTS ({of_run} AND (j.runner = ? OR EXISTS ({on_node})))")
            params += [self.runner, self.runner]
        if self.tag:
            parts.append("runs.tag = ?")
            params.append(self.tag)
        if self.project:
            parts.append("runs.project = ?")
            params.append(self.project)
        if self.project_dir:
            parts.append("runs.project_dir = ?")
            params.append(self.project_dir)
        return (" AND ".join(parts) or "1"), params
