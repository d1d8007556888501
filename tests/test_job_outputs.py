"""Files a job leaves in its workspace are untrusted: the metrics file, artifacts, and the
tars the agent unpacks. A link to a host file or a FIFO must do nothing: no data shipped,
the agent responsive. Real agents (process executor; Docker too when an engine answers)."""

import asyncio
import json
import os
import tarfile
import threading
import time
from pathlib import Path

import asyncssh
import pytest

from lanpool.agent.workspace.artifacts import ArtifactChanged, list_artifacts, read_parts
from lanpool.agent.workspace.files import NotARegularFile, open_regular
from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key
from lanpool.protocol import FrameReader, Hello, decode_agent_message
from tests.docker_harness import remove_agent_containers
from tests.harness import start_agent, start_docker_agent

STOLEN = '{"step": 1, "name": "stolen", "value": 1}\n'


def _host_file(tmp_path: Path) -> Path:
    """A file outside every workspace, that a job would like to read: metric-shaped, so a leak shows."""
    path = tmp_path / "host-secret.jsonl"
    path.write_text(STOLEN)
    return path


# -- open_regular, the one way the agent opens a job's file ------------------------------------


def test_open_regular_refuses_links_fifos_and_dirs(tmp_path):
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    (ws / "d" / "f").write_text("ok")
    os.symlink(_host_file(tmp_path), ws / "d" / "link")
    os.mkfifo(ws / "d" / "fifo")
    os.symlink(tmp_path, ws / "up")
    fd = open_regular(ws, "d/f")
    try:
        assert os.read(fd, 10) == b"ok"
    finally:
        os.close(fd)
    for rel in ("d/link", "d/fifo", "up/host-secret.jsonl", "d", "../host-secret.jsonl", "/etc/hostname"):
        with pytest.raises(NotARegularFile):
            open_regular(ws, rel)
    with pytest.raises(FileNotFoundError):
        open_regular(ws, "d/missing")


# -- a real agent: the metrics file -----------------------------------------------------------


async def _hello(agent, timeout: float) -> Hello:
    key = load_or_create_client_key(ControllerHome.default().key)
    async with asyncssh.connect(
        agent.host,
        agent.port,
        username="x",
        client_keys=[key],
        known_hosts=None,
        agent_path=None,
        config=[],
        connect_timeout=timeout,
    ) as conn:
        proc = await conn.create_process(subsystem="lanpool", encoding=None)
        reader = FrameReader()
        while True:
            data = await asyncio.wait_for(proc.stdout.read(65536), timeout)
            assert data, "the agent closed the channel"
            bodies = reader.feed(data)
            if bodies:
                return decode_agent_message(bodies[0])


def _responsive(agent, within: float = 5.0) -> None:
    start = time.monotonic()
    hello = asyncio.run(asyncio.wait_for(_hello(agent, within), within))
    assert isinstance(hello, Hello)
    assert time.monotonic() - start < within


def _run_while_checking(cli, project, agent, workflow: str, seconds: float):
    """Run `workflow`, and while it runs check the agent greets other controllers."""
    proc = cli.popen(
        "headless", "run", workflow, "--runner", agent.address, cwd=project, stdout=-1, stderr=-1, text=True
    )
    try:
        deadline = time.monotonic() + seconds
        checks = 0
        while time.monotonic() < deadline or checks < 2:
            _responsive(agent)
            checks += 1
            time.sleep(0.7)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


def _metrics(cli, err: str) -> list:
    run = err.split()[1].rstrip(":")
    return json.loads(cli("headless", "metrics", run, "--json", check=True).stdout)


_FIFO_JOB = """
workflows:
  - name: fifo
    commands:
      - rm -f "$LANPOOL_METRICS_FILE" && mkfifo "$LANPOOL_METRICS_FILE"
      - sleep 4
      - echo done
"""


def test_a_metrics_fifo_does_not_freeze_the_agent(agent, cli, make_project):
    project = make_project(_FIFO_JOB)
    code, out, err = _run_while_checking(cli, project, agent, "fifo", 3)
    assert code == 0, err
    assert out == "done\n"
    assert _metrics(cli, err) == []
    assert agent.proc.poll() is None


def test_a_metrics_link_to_a_host_file_ships_nothing(agent, cli, make_project, tmp_path, controller_home):
    secret = _host_file(tmp_path)
    host_key_body = (agent.data_dir / "host_key").read_text().splitlines()[1]
    project = make_project(f"""
        workflows:
          - name: link
            commands:
              - rm -f "$LANPOOL_METRICS_FILE" && ln -s {secret} "$LANPOOL_METRICS_FILE"
              - sleep 1.5
              - rm "$LANPOOL_METRICS_FILE" && ln -s "$PWD/../../../host_key" "$LANPOOL_METRICS_FILE"
              - sleep 1.5
              - echo done
          - name: linkdir
            commands:
              - mkdir {tmp_path}/hostdir && cp {secret} {tmp_path}/hostdir/metrics.jsonl
              - rm -rf .lanpool && ln -s {tmp_path}/hostdir .lanpool
              - sleep 1.5
              - echo done
        """)
    for workflow in ("link", "linkdir"):
        code, out, err = _run_while_checking(cli, project, agent, workflow, 2)
        assert code == 0, err
        assert out == "done\n"
        assert _metrics(cli, err) == []  # the stolen point never arrived
    stored = ControllerHome.default().db.read_bytes()
    assert b"stolen" not in stored and host_key_body.encode() not in stored


def test_metrics_still_flow_from_a_regular_file(agent, cli, make_project):
    emit = (
        'echo \'{"step": 1, "name": "loss", "value": 0.5}\' >> "$LANPOOL_METRICS_FILE"\n'
        "sleep 1\n"
        'printf \'{"step": 2, "name": "loss", "value": 0.25}\' >> "$LANPOOL_METRICS_FILE"\n'
    )
    project = make_project("workflows:\n  - name: ok\n    commands: [sh emit.sh]\n", files={"emit.sh": emit})
    res = cli("headless", "run", "ok", "--runner", agent.address, cwd=project)
    assert res.returncode == 0, res.stderr
    assert [(p["step"], p["value"]) for p in _metrics(cli, res.stderr)] == [(1, 0.5), (2, 0.25)]


# -- a real agent: artifacts ---------------------------------------------------------------------


def test_artifact_fifos_and_links_to_host_files_are_skipped(agent, cli, make_project, tmp_path):
    secret = _host_file(tmp_path)
    project = make_project(f"""
        workflows:
          - name: outs
            commands:
              - mkdir -p out && echo ok > out/ok.txt && mkfifo out/fifo
              - ln -s "$PWD/../../../host_key" out/host_key && ln -s {secret} out/secret
            artifacts: [out]
        """)
    res = cli("headless", "run", "outs", "--runner", agent.address, cwd=project, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "'out/host_key' is a link that leaves the workspace" in res.stderr
    listing = cli("headless", "artifacts", "list", res.stderr.split()[1].rstrip(":"), check=True).stdout
    assert listing.split() == ["out/ok.txt"]
    _responsive(agent)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    (ws / "out").mkdir(parents=True)
    (ws / "out" / "a.txt").write_text("A")
    (ws / "out" / "b.txt").write_text("B")
    return ws


def _swap_after_resolve(monkeypatch, victim: Path, swap) -> None:
    """Make `victim` change (by `swap`) right after the packer resolved its path: the window
    between the check and the read that a racing job would use."""
    real_resolve = Path.resolve

    def resolve(self, strict=False):
        result = real_resolve(self, strict)
        if self == victim and not getattr(resolve, "done", False):
            resolve.done = True
            swap(victim)
        return result

    monkeypatch.setattr(Path, "resolve", resolve)


def _pack_in_thread(ws: Path, paths: list[str]):
    """List, then read each file as GetArtifacts does, in a thread (a FIFO must not hang it)."""
    result: dict = {}

    def work() -> None:
        files, warnings = list_artifacts(ws, paths)
        members = {}
        for f in files:
            try:
                members[f.path] = (tarfile.REGTYPE, b"".join(d for _at, d in read_parts(ws, f.path, 0, f.size, 4096)))
            except ArtifactChanged:
                pass
        result["out"] = ((files, warnings), members)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "listing or reading hangs on a FIFO"
    return result["out"]


def test_a_file_swapped_for_a_link_after_the_check_is_not_followed(workspace, tmp_path, monkeypatch):
    secret = _host_file(tmp_path)

    def to_link(path: Path) -> None:
        path.unlink()
        os.symlink(secret, path)

    _swap_after_resolve(monkeypatch, workspace / "out" / "a.txt", to_link)
    (files, _warnings), members = _pack_in_thread(workspace, ["out"])
    assert [f.path for f in files] == ["out/b.txt"]
    assert members == {"out/b.txt": (tarfile.REGTYPE, b"B")}  # no link member, no secret


def test_a_file_swapped_for_a_fifo_after_the_check_is_not_waited_on(workspace, monkeypatch):
    def to_fifo(path: Path) -> None:
        path.unlink()
        os.mkfifo(path)

    _swap_after_resolve(monkeypatch, workspace / "out" / "a.txt", to_fifo)
    (files, _warnings), members = _pack_in_thread(workspace, ["out"])
    assert [f.path for f in files] == ["out/b.txt"]
    assert set(members) == {"out/b.txt"}


def test_a_file_that_changed_after_it_was_listed_is_sent_at_its_listed_size_or_refused(workspace):
    big = workspace / "out" / "big.bin"
    big.write_bytes(b"x" * 100_000)
    files, _warnings = list_artifacts(workspace, ["out"])
    assert {f.path: f.size for f in files}["out/big.bin"] == 100_000
    big.write_bytes(b"y" * 200_000)  # grew: what was listed goes, no more
    assert b"".join(d for _at, d in read_parts(workspace, "out/big.bin", 0, 100_000, 4096)) == b"y" * 100_000
    os.truncate(big, 10)  # shrank: refused where it ends, not padded
    with pytest.raises(ArtifactChanged, match="shrank"):
        list(read_parts(workspace, "out/big.bin", 0, 100_000, 4096))
    assert [at for at, _d in read_parts(workspace, "out/big.bin", 4, 10, 4)] == [4, 8]  # from an offset


# The workspace a job starts from (staged from blobs): tests/test_blob_cache.py.


# -- Docker: a container job, and an agent restart while it runs ---------------------------------


def test_container_metrics_fifo_and_link_do_nothing_also_after_a_restart(
    tmp_path, controller_home, cli, make_project, docker_client, busybox_image
):
    data_dir = tmp_path / "agent"
    agent = start_docker_agent(data_dir, controller_home, "--executor", "docker")
    try:
        host_key = (data_dir / "host_key").resolve()
        project = make_project(f"""
            workflows:
              - name: c
                image: {busybox_image}
                commands:
                  - ln -s {host_key} /workspace/.lanpool/metrics.jsonl
                  - sleep 2
                  - rm /workspace/.lanpool/metrics.jsonl && mkfifo /workspace/.lanpool/metrics.jsonl
                  - sleep 6
                  - echo done
            """)
        proc = cli.popen(
            "headless", "run", "c", "--runner", agent.address, cwd=project, stdout=-1, stderr=-1, text=True
        )
        try:
            time.sleep(4)  # the link was read (or not), the FIFO is in place
            _responsive(agent)
            agent.stop()  # the container keeps running; the next agent re-adopts it and tails its metrics
            agent = start_agent(
                data_dir,
                controller_home,
                authorize=False,
                grace=2.0,
                name="docker-runner",
                port=agent.port,
                extra_args=("--executor", "docker"),
            )
            for _ in range(3):
                _responsive(agent)
                time.sleep(0.5)
            out, err = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert "done" in out, err
        stored = ControllerHome.default().db.read_bytes()
        assert host_key.read_text().splitlines()[1].encode() not in stored
    finally:
        agent.stop()
        remove_agent_containers(docker_client, data_dir)


def test_agent_restart_with_a_process_jobs_fifo_comes_back(tmp_path, controller_home, cli, make_project):
    data_dir = tmp_path / "agent"
    agent = start_agent(data_dir, controller_home)
    project = make_project(_FIFO_JOB.replace("sleep 4", "sleep 30"))
    proc = cli.popen(
        "headless", "run", "fifo", "--runner", agent.address, "--detach", cwd=project, stdout=-1, stderr=-1, text=True
    )
    try:
        proc.communicate(timeout=60)
        time.sleep(1)
        _responsive(agent)
        agent.stop()
        agent = start_agent(data_dir, controller_home, authorize=False)
        _responsive(agent)
    finally:
        if proc.poll() is None:
            proc.kill()
        agent.stop()
