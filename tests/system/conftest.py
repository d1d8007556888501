"""The system tier runs on a few xdist workers (scripts/test) in the machine's own network
namespace: its tests need Docker's bridge and the Slurm cluster's, which a worker in a namespace of
its own cannot reach. So the workers share the private daemons and loopback mDNS, and this file
says what may not run side by side (--dist loadgroup sends a group to one worker):

- the Slurm files share one two-node cluster and its queue;
- the gang files start runners with the same names (r0, r1);
- the lab files bring scripts/lab's network namespaces (lp-h1, lp-h2: 10.77.0.x, port 7422) up and
  down, so one's `lab down` would cut the other's runner off (seen in CI);
- any other file is a group of its own (its module fixtures stay one).
The longest groups start first (tests/conftest.py LONGEST_FIRST). Agents started without a name
get the worker's id in theirs (tests/harness.py `default_runner_name`): two `test-runner` adverts on
one loopback would be a name conflict."""

import pytest

# Files that share a daemon's state or runner names: one group each, run on one worker.
SHARED = {
    "test_slurm_controller": "slurm",
    "test_slurm_executor": "slurm",
    "test_slurm_recovery": "slurm",
    "test_runner_gang": "gang",
    "test_runner_gang_restart": "gang",
    "test_pool": "lab",
    "test_mdns_hints": "lab",
}


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name == "system":
            item.add_marker(pytest.mark.xdist_group(SHARED.get(item.path.stem, item.path.stem)))
