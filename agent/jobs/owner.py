"""Who a job belongs to: the controller key that submitted it.

A runner is shared (a lab's GPU boxes, paired by several people), so every request about
a job (status, logs, exec and shells, ports, stop, artifacts, a DAG step's dependencies)
is answered only for the key that submitted it; to any other controller the job does not
exist: the same "no job" as for an id never seen, so ids leak nothing. The runner itself
(`app agent ...` on its machine, and the agent's own work: queue, gangs, retries) sees
every job. A job journalled by an agent older than owners has none, and stays visible to
every authorized controller until it is removed.
"""

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Owner:
    """A controller as this runner knows it, once its key proved itself."""

    fingerprint: str  # SHA256:... of its public key: what owns jobs
    label: str = ""  # the key's comment in authorized_keys (the name it paired with), for people


class Owned(Protocol):
    owner: str


def owns(owner: Owner | None, record: Owned) -> bool:
    """Whether `owner` may see the job of `record` (None: the runner itself, which sees all)."""
    return owner is None or not record.owner or record.owner == owner.fingerprint
