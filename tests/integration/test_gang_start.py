"""A gang whose node 0 fails to start (pip refuses its requirements) fails the whole run:
neither node runs its commands, and the job is FAILED, not left waiting at the barrier."""

import json

from tests.harness import write_project

# pip refuses at once (no index, no such package), but only after its own start-up:
# a start that takes a moment and then fails.
FAILING_REQUIREMENTS = "--no-index\nlanpool-no-such-package-xyz\n"


def test_a_gang_whose_node0_fails_to_start_after_answering_fails_the_run(two_agents, cli, tmp_path):
    project = write_project(
        tmp_path / "project",
        """
workflows:
  - name: gang
    nodes: 2
    provider: python
    requirements: req.txt
    script: hello.py
""",
        {"req.txt": FAILING_REQUIREMENTS, "hello.py": "import os\nprint('rank', os.environ['NODE_RANK'], 'started')\n"},
    )
    res = cli("headless", "run", "gang", cwd=project, timeout=120)
    assert res.returncode != 0, res.stdout
    assert "started" not in res.stdout  # neither node ran its commands
    [latest] = json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout)
    [job] = latest["jobs"]
    assert job["status"] == "FAILED", job
