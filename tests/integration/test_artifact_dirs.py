"""Declared artifact directories exist (empty) before a job's commands run, as dstack made them
(agent/workspace/staging.py make_artifact_dirs): made without following a link, never outside
the workspace, and never in the way of a file the job writes.
The part with real agents and the CLI (integration); the rest: tests/unit/test_artifact_dirs.py."""

import json


def test_dstacks_own_example_writes_into_its_artifact_dir(agent, cli, make_project):
    project = make_project(
        """
        workflows:
          - name: hello
            commands:
              - echo "Hello world" > output/hello.txt
            artifacts: [output]
        """
    )
    res = cli("headless", "run", "hello", "--runner", agent.address, "--json", cwd=project, timeout=120)
    assert res.returncode == 0, (res.stdout, res.stderr)
    [job] = json.loads(cli("headless", "status", "--json", check=True).stdout)[0]["jobs"]
    assert job["status"] == "DONE" and [a["path"] for a in job["artifacts"]] == ["output/hello.txt"], job
