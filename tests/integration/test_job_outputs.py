"""Files a job leaves in its workspace are untrusted: the metrics file, artifacts, and the
tars the agent unpacks. A link to a host file or a FIFO must do nothing: no data shipped,
the agent responsive. Real agents (process executor; Docker too when an engine answers).
The part with real agents and the CLI (integration); the rest: tests/unit/test_job_outputs.py, tests/system/test_job_outputs.py."""

import asyncio
import json
import time

import asyncssh

from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key
from lanpool.protocol import FrameReader, Hello, decode_agent_message
from tests.harness import start_agent
from tests.unit.test_job_outputs import _host_file


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
