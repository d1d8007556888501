"""Absolute artifacts of container jobs on a real agent and a real Docker engine: copied out of
the ended container as one checked tar (`.lanpool-abs/opt/envx.tar`), put back at the same
path into a dependent job's container before it starts; refused for a process job."""

import asyncio
import json
import shutil
import tarfile

import pytest

from lanpool.app.errors import RunnerError
from lanpool.app.transfer.uploads import WorkspaceFiles, upload
from lanpool.protocol import FileEntry, JobState, SubmitJob
from tests.runner_jobs import open_session
from tests.system.test_docker_executor import _lines, run


def _stage_and_submit(agent, req: SubmitJob, tar_path, rel: str):
    """Submit `req` with the tar staged at `rel` in its workspace, as a controller stages a
    dependency's artifact (app/transfer/uploads.py)."""
    from lanpool.app.transfer.snapshot import content_hash

    digest, st = content_hash(tar_path)

    async def go():
        session = await open_session(agent)
        async with session:
            files = WorkspaceFiles()
            files.add(FileEntry(rel, digest, st.st_size, 0o644), tar_path)
            await upload(session, files, lambda _line: None)
            req.files.extend(files.entries)
            return await session.submit(req)

    return asyncio.run(go())


def test_an_absolute_artifact_is_copied_out_and_put_back_for_a_dependent(docker_agent, busybox_image, tmp_path):
    commands = [
        "mkdir -p /opt/envx/bin /opt/envx/lib",
        "printf 'echo tool ran' > /opt/envx/bin/tool && chmod 755 /opt/envx/bin/tool",
        "ln -s tool /opt/envx/bin/link",
        "ln /opt/envx/bin/tool /opt/envx/lib/hard",
        "ln -s /etc /opt/envx/etc",  # leads out: left out
        "mkdir -p out && echo x > out/a.txt",
    ]
    chunks, final = run(docker_agent, "setup1", commands, busybox_image, artifacts=["/opt/envx", "out", "/opt/none"])
    assert final.state == JobState.DONE, _lines(chunks, "sys")
    sys_lines = _lines(chunks, "sys")
    assert "lanpool: artifact '/opt/envx': left out 'opt/envx/etc': a symlink leading out" in sys_lines
    assert "lanpool: artifact '/opt/none' was not produced by the job" in sys_lines
    listed = {a.path for a in final.artifacts}
    assert listed == {".lanpool-abs/opt/envx.tar", "out/a.txt"}
    kept = docker_agent.data_dir / "jobs" / "setup1" / "workspace" / ".lanpool-abs" / "opt" / "envx.tar"
    with tarfile.open(kept) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["opt/envx/bin/tool"].mode == 0o755
    assert members["opt/envx/bin/link"].issym() and members["opt/envx/bin/link"].linkname == "tool"
    assert "opt/envx/etc" not in members

    # The dependent: the tar staged where the controller puts a dependency's artifacts.
    dep_tar = tmp_path / "envx.tar"
    shutil.copyfile(kept, dep_tar)
    req = SubmitJob(
        job_id="train1",
        run_name="run-train1",
        workflow="train",
        commands=["/opt/envx/bin/tool", "sh /opt/envx/bin/link", "test -f /opt/envx/lib/hard", "stat -c %u /opt/envx"],
        image=busybox_image,
    )
    _stage_and_submit(docker_agent, req, dep_tar, ".lanpool-abs/opt/envx.tar")
    from tests.system.test_docker_executor import follow

    chunks, final = follow(docker_agent, "train1")
    assert final.state == JobState.DONE, _lines(chunks, "sys") + _lines(chunks, "err")
    assert _lines(chunks, "out")[:2] == ["tool ran", "tool ran"]
    assert "lanpool: artifact '/opt/envx' put into the container" in _lines(chunks, "sys")


def test_a_staged_tar_that_climbs_fails_the_dependent_in_one_line(docker_agent, busybox_image, tmp_path):
    import io

    bad = tmp_path / "bad.tar"
    with tarfile.open(bad, "w") as tar:
        info = tarfile.TarInfo("opt/envx/a")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"a"))
        evil = tarfile.TarInfo("etc/evil")  # outside the artifact: left out, said
        evil.size = 4
        tar.addfile(evil, io.BytesIO(b"evil"))
    req = SubmitJob(
        job_id="dep2",
        run_name="run-dep2",
        workflow="w",
        commands=["cat /opt/envx/a; test ! -e /etc/evil"],
        image=busybox_image,
    )
    _stage_and_submit(docker_agent, req, bad, ".lanpool-abs/opt/envx.tar")
    from tests.system.test_docker_executor import follow

    chunks, final = follow(docker_agent, "dep2")
    assert final.state == JobState.DONE
    assert "lanpool: artifact '/opt/envx': left out 'etc/evil': outside the artifact" in _lines(chunks, "sys")

    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(b"not a tar" * 1000)
    req = SubmitJob(job_id="dep3", run_name="run-dep3", workflow="w", commands=["true"], image=busybox_image)
    _stage_and_submit(docker_agent, req, garbage, ".lanpool-abs/opt/envx.tar")
    chunks, final = follow(docker_agent, "dep3")
    assert final.state == JobState.FAILED
    assert final.error.startswith("the artifact '/opt/envx' staged for this job was refused: not a tar")


def test_a_process_runner_refuses_an_absolute_artifact_in_one_line(agent):
    req = SubmitJob(job_id="p1", run_name="r", workflow="w", commands=["true"], artifacts=["/opt/conda/envs/x"])

    async def go():
        session = await open_session(agent)
        async with session:
            return await session.submit(req)

    with pytest.raises(RunnerError, match="outside the workspace and this runner would run the job as a process"):
        asyncio.run(go())


SETUP_AND_TRAIN = """
workflows:
  - name: setup
    image: IMAGE
    pull: never
    commands:
      - mkdir -p /opt/envx/bin
      - printf '#!/bin/sh\\necho tool ran in $PWD\\n' > /opt/envx/bin/tool && chmod 755 /opt/envx/bin/tool
    artifacts: [/opt/envx]
  - name: train
    image: IMAGE
    pull: never
    depends-on: [setup]
    commands:
      - /opt/envx/bin/tool
"""


def test_a_dependency_built_at_an_absolute_path_is_there_for_its_dependent_through_the_cli(
    docker_agent, busybox_image, cli, make_project, tmp_path
):
    """dstack 2022's conda recipe as its users ran it: `setup` builds /opt/envx, `train` depends on
    it and runs what it built; the controller stores and stages the artifact like any other, and
    `artifacts download` brings it as the one tar."""
    project = make_project(SETUP_AND_TRAIN.replace("IMAGE", busybox_image))
    runner = ("--runner", docker_agent.address)
    res = cli("headless", "run", "train", *runner, "--json", cwd=project, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "tool ran in /workspace" in res.stdout
    jobs = {j["workflow"]: j["job_id"] for j in json.loads(res.stdout.strip().splitlines()[-1])["jobs"]}
    again = cli("headless", "run", "train", *runner, cwd=project, timeout=300)  # setup reused: staged from the store
    assert again.returncode == 0 and "tool ran in /workspace" in again.stdout, again.stdout + again.stderr
    assert "reus" in again.stdout + again.stderr
    listed = cli("headless", "artifacts", "list", jobs["setup"], "--json", check=True)
    assert ".lanpool-abs/opt/envx.tar" in listed.stdout
