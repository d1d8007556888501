"""What job code can reach on a runner, attacked from inside real jobs: a process job runs as
the agent's user, so its workspace's `../../../blobs` is the runner's blob cache. Whatever it
writes there is never staged into a later job (each file is hashed as it is staged): the next
run of the unchanged project gets its own bytes, sent again. Real agent, real CLI."""

import pytest

pytestmark = pytest.mark.timeout(240)

# Rewrites the cached blob of hello.sh at the same size: staging once checked only sizes.
POISON = """\
import hashlib
data = open("hello.sh", "rb").read()
blob = "../../../blobs/" + hashlib.sha256(data).hexdigest()
open(blob, "wb").write(b"echo POISONED".ljust(len(data) - 1, b"!") + b"\\n")
print("rewrote", blob[-64:][:12])
"""
WORKFLOWS = """
workflows:
  - name: show
    commands: [sh hello.sh]
  - name: poison
    commands: [python3 poison.py]
"""


def test_a_job_that_rewrites_the_blob_cache_poisons_no_later_job(agent, cli, make_project):
    project = make_project(WORKFLOWS, files={"hello.sh": "echo the-original-bytes\n", "poison.py": POISON})
    first = cli("headless", "run", "show", "--runner", agent.address, cwd=project, check=True)
    assert "the-original-bytes" in first.stdout
    poison = cli("headless", "run", "poison", "--runner", agent.address, cwd=project, check=True)
    assert "rewrote" in poison.stdout  # the cache was writable to it: the attack happened
    again = cli("headless", "run", "show", "--runner", agent.address, cwd=project)
    assert again.returncode == 0, again.stderr
    assert "the-original-bytes" in again.stdout and "POISONED" not in again.stdout
    assert "damaged here, removed: sending it again" in again.stderr, again.stderr
