"""Code goes up by content: through the real CLI and a real agent, files, modes and
links arrive; a second run after a one-file edit sends one blob; a reused
dependency's artifacts arrive; a file changing under the upload fails it.
The part with real agents and the CLI (integration); the rest: tests/unit/test_uploads.py."""

import asyncio
import os
from pathlib import Path

from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key
from lanpool.app.runners.client import RunnerSession
from lanpool.app.transfer.snapshot import build_manifest
from lanpool.app.transfer.uploads import upload, workspace_files

WORKFLOWS = """
workflows:
  - name: show
    commands:
      - stat -c '%a %n' tool.sh data/x.txt
      - echo "link -> $(readlink link)"
      - cat link
  - name: make
    commands:
      - mkdir -p out && echo made-by-make > out/thing.txt
    artifacts: [out]
  - name: use
    depends-on: [make]
    commands:
      - cat out/thing.txt
"""


def _project(make_project) -> Path:
    root = make_project(WORKFLOWS, files={"tool.sh": "#!/bin/sh\necho tool\n", "data/x.txt": "x-content\n"})
    os.chmod(root / "tool.sh", 0o755)
    os.symlink("data/x.txt", root / "link")
    return root


def _run_name(stderr: str) -> str:
    first = next(line for line in stderr.splitlines() if line.startswith("run "))
    return first.split()[1].rstrip(":")


def _blob_count(agent) -> int:
    return sum(1 for n in os.listdir(agent.data_dir / "blobs") if len(n) == 64)


def test_files_modes_and_links_arrive(agent, cli, make_project):
    root = _project(make_project)
    res = cli("headless", "run", "show", "--runner", agent.address, cwd=root)
    assert res.returncode == 0, res.stderr
    logs = cli("headless", "logs", _run_name(res.stderr)).stdout
    assert "755 tool.sh" in logs and "644 data/x.txt" in logs
    assert "link -> data/x.txt" in logs and "x-content" in logs


def test_second_run_after_one_edit_sends_one_blob(agent, cli, make_project):
    root = _project(make_project)
    assert cli("headless", "run", "show", "--runner", agent.address, cwd=root).returncode == 0
    before = _blob_count(agent)
    assert before >= 2
    (root / "data" / "x.txt").write_text("edited\n")
    res = cli("headless", "run", "show", "--runner", agent.address, cwd=root)
    assert res.returncode == 0, res.stderr
    assert _blob_count(agent) == before + 1

    async def count_sent() -> tuple[int, int]:
        key = load_or_create_client_key(ControllerHome.default().key)
        async with await RunnerSession.open(agent.host, agent.port, key, None) as session:
            files = workspace_files(build_manifest(root), ControllerHome.default(), None, [])  # type: ignore[arg-type]
            unchanged = await upload(session, files, print)
            (root / "tool.sh").write_text("#!/bin/sh\necho changed\n")
            files = workspace_files(build_manifest(root), ControllerHome.default(), None, [])  # type: ignore[arg-type]
            return unchanged, await upload(session, files, print)

    assert asyncio.run(count_sent()) == (0, 1)


def test_reused_dependency_artifacts_arrive(agent, cli, make_project):
    root = _project(make_project)
    res = cli("headless", "run", "use", "--runner", agent.address, cwd=root)
    assert res.returncode == 0, res.stderr
    assert "made-by-make" in cli("headless", "logs", _run_name(res.stderr)).stdout
    # Again: `make` is reused from the controller's store, its artifact sent by content.
    res = cli("headless", "run", "use", "--runner", agent.address, cwd=root)
    assert res.returncode == 0 and "reusing job" in res.stderr, res.stderr
    assert "made-by-make" in cli("headless", "logs", _run_name(res.stderr)).stdout
