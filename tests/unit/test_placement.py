"""Each job of a DAG placed where it fits, on two real runners (one with a fake GPU at its
edge, LANPOOL_FAKE_GPUS), its dependencies' artifacts moving through the controller; the
job that can never fit named before anything runs; a declared artifact a job did not
produce warned about in its log and `status`, and never reused from the cache.
The in-process part (unit); the rest: tests/integration/test_placement.py."""

from lanpool.app.jobs.end import missing_outputs


def test_missing_outputs_match_files_at_or_under_each_path():
    files = ["out.txt", "ckpt/last.pt", "node-1/ckpt/x"]
    assert missing_outputs(["out.txt", "./ckpt/", "ckpt/last.pt", "."], files) == []
    absent = ["checkpoint", "ck", "out.txt/x", "logs"]
    assert missing_outputs(absent, files) == absent
    assert missing_outputs(["x"], []) == ["x"]


def test_an_absolute_artifact_is_produced_when_its_tar_came_back():
    files = [".lanpool-abs/opt/conda/envs/x.tar", "out/a.txt"]
    assert missing_outputs(["/opt/conda/envs/x", "out"], files) == []
    assert missing_outputs(["/opt/conda/envs", "/opt/conda/envs/x/bin", "/root/.cache"], files) == [
        "/opt/conda/envs",
        "/opt/conda/envs/x/bin",
        "/root/.cache",
    ]
