"""Where a run's jobs go: the runners chosen for it, and its connections to them."""

from collections.abc import Callable

from app.pool import Pool
from app.runner_client import RunnerSession
from app.scheduler import Need
from app.workflows.resolve import ResolvedJob


class Placement:
    """Where a run's jobs go, and the run's connections (closed when it ends).

    Its single-node jobs share one runner, chosen once with room for the largest of
    them (`--runner` may name it, or give its address); each bigger gang gets its own
    N runners with room, all at once (`--runner` may pin a known name among them)."""

    def __init__(self, pool: Pool, spec: str | None, run_name: str, say: Callable[[str], None], need: Need) -> None:
        self.pool = pool
        self.spec = spec
        self.run_name = run_name
        self.say = say
        self.need = need
        self.single: tuple[str, int] | None = None
        self.sessions: dict[tuple[str, int], RunnerSession] = {}

    async def sessions_for(self, job: ResolvedJob, job_id: str) -> tuple[list[RunnerSession], list[str]]:
        """Node k's session at k, and the address node k is reached at."""
        trust = False
        if job.nodes == 1:
            if self.single is None:
                self.single = await self.pool.choose_runner(
                    self.spec, self.need, self.run_name, job_id, job.workflow, self.say
                )
            hosts, trust = [self.single], self.pool.names_an_address(self.spec)
        else:
            pinned = self.spec if self.pool.store.runner(self.spec or "") else None
            hosts = await self.pool.choose_runners(
                pinned, Need.of(job.resources), job.nodes, self.run_name, job_id, job.workflow, self.say
            )
        for host, port in hosts:
            if (host, port) not in self.sessions:
                self.sessions[host, port] = await self.pool.connect(host, port, trust=trust)
        return [self.sessions[h] for h in hosts], [host for host, _port in hosts]

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()


def largest_need(resources: list[dict]) -> Need:
    """One runner takes the run's single-node jobs: it must have room for the largest of them."""
    needs = [Need.of(r) for r in resources]
    return Need(max(n.gpu for n in needs), max(n.cpu for n in needs), max(n.memory_mb for n in needs))
