"""A sweep's early stopping (`stop_worst:`): asynchronous successive halving, decided by the
controller that follows the sweep (app/cli/sweep_verbs.py).

Each listed step is a rung. When a job's metric reaches a rung (it logged a point at that step or
later), its value there (the best it logged up to that step) joins the rung's values, and the job
is ranked among the jobs that reached the rung so far: outside the best `keep` part it is stopped,
"stopped by the sweep at step 100 (val_loss 1.92, rank 5 of 8)". Ranking on arrival, not once all
have arrived, keeps a sweep whose points wait in runners' queues from holding its first jobs back;
the first jobs to arrive are compared with fewer others (they are never stopped alone).
"""

import math
from dataclasses import dataclass, field
from typing import Any

from lanpool.app.workflows.model import StopWorst


@dataclass(frozen=True)
class Verdict:
    job_id: str
    step: int
    value: float
    rank: int
    of: int
    stop: bool

    def reason(self, metric: str) -> str:
        return f"stopped by the sweep at step {self.step} ({metric} {self.value:.4g}, rank {self.rank} of {self.of})"


@dataclass
class Rungs:
    """The rungs of one sweep: what each job's metric was when it reached each step."""

    rule: StopWorst
    mode: str  # "min" or "max"
    values: dict[int, dict[str, float]] = field(default_factory=dict)  # step -> job id -> value there

    def observe(self, job_id: str, points: list[dict[str, Any]]) -> list[Verdict]:
        """Rank `job_id` at each rung its points (all it logged so far) reached for the first time;
        the verdicts, the last of them a stop if it was stopped (later rungs are not looked at)."""
        mine: list[tuple[float, float]] = []
        for p in points:
            if p.get("name") == self.rule.metric:
                step, value = _number(p.get("step")), _number(p.get("value"))
                if step is not None and value is not None:
                    mine.append((step, value))
        reached = max((s for s, _v in mine), default=-1.0)
        verdicts = []
        for rung in self.rule.at:
            seen = self.values.setdefault(rung, {})
            if job_id in seen or reached < rung:
                continue
            upto = [v for s, v in mine if s <= rung]
            if not upto:
                continue  # it reached the step without a value up to it: not ranked there
            seen[job_id] = min(upto) if self.mode == "min" else max(upto)
            ranked = sorted(seen.values(), reverse=self.mode == "max")
            rank = ranked.index(seen[job_id]) + 1  # ties share the better rank
            kept = max(1, math.ceil(self.rule.keep * len(seen)))
            verdict = Verdict(job_id, rung, seen[job_id], rank, len(seen), rank > kept)
            verdicts.append(verdict)
            if verdict.stop:
                break
        return verdicts


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None
