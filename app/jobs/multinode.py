"""What a gang of N > 1 nodes adds to a job (app/jobs/remote.py): the wiring for
torch.distributed / Lightning, and `[node K]` tags on its log lines.

Env on every node: MASTER_ADDR (node 0's address as this controller reaches
it), MASTER_PORT (a free port picked by node 0's agent), NODE_RANK, and the
LANPOOL_* names that docs/multi-node.md lists. LOCAL_RANK, WORLD_SIZE and TORCHELASTIC_RUN_ID are
never set: Lightning hangs on them or ignores them.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the workflow loader (yaml) is not for `status`/`logs`, which tag lines only
    from lanpool.app.workflows.resolve import ResolvedJob


def node_env(job: "ResolvedJob", node: int, addresses: list[str]) -> dict[str, str]:
    env = {
        "MASTER_ADDR": addresses[0],
        "NODE_RANK": str(node),
        "LANPOOL_NODE_RANK": str(node),
        "LANPOOL_NUM_NODES": str(len(addresses)),
        "LANPOOL_NODES_IPS": ",".join(addresses),
        "LANPOOL_GPUS_PER_NODE": str(job.resources.get("gpu", 0)),
        "LANPOOL_MASTER_ADDR": addresses[0],
        "LANPOOL_NODE_ADDR": addresses[node],
    }
    if len(set(addresses)) < len(addresses):
        # Several nodes share a machine: one thread each, or their threads oversubscribe the cores and training crawls.
        env["OMP_NUM_THREADS"] = "1"
    return {**env, **{k: v for k, v in job.env.items()}}


def prefix_node(node: int, data: bytes) -> bytes:
    tag = f"[node {node}] ".encode()
    return b"".join(tag + line for line in data.splitlines(keepends=True))
