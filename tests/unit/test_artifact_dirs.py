"""Declared artifact directories exist (empty) before a job's commands run, as dstack made them
(agent/workspace/staging.py make_artifact_dirs): made without following a link, never outside
the workspace, and never in the way of a file the job writes.
The in-process part (unit); the rest: tests/integration/test_artifact_dirs.py."""

import os

from lanpool.agent.workspace.staging import make_artifact_dirs


def test_each_declared_directory_is_made_and_a_files_parent(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    make_artifact_dirs(ws, ["output", "checkpoints/", "runs/exp1", "logs/metrics.csv", "model.pt"])
    assert sorted(str(p.relative_to(ws)) for p in ws.rglob("*")) == [
        "checkpoints",
        "logs",
        "output",
        "runs",
        "runs/exp1",
    ]
    assert not (ws / "model.pt").exists()  # a file the job writes: nothing in its way


def test_a_path_that_is_a_file_or_a_link_out_is_left_alone(tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (ws / "output").write_text("the project's own file\n")
    os.symlink(outside, ws / "escape")
    make_artifact_dirs(ws, ["output", "escape/made", "../up", "/abs/dir", "", "."])
    assert (ws / "output").read_text() == "the project's own file\n"
    assert list(outside.iterdir()) == [] and not (tmp_path / "up").exists()
