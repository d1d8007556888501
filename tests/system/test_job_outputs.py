"""Files a job leaves in its workspace are untrusted: the metrics file, artifacts, and the
tars the agent unpacks. A link to a host file or a FIFO must do nothing: no data shipped,
the agent responsive. Real agents (process executor; Docker too when an engine answers).
The part with Docker, Slurm or namespaces (system); the rest: tests/unit/test_job_outputs.py, tests/integration/test_job_outputs.py."""

import time

from lanpool.app.home import ControllerHome
from tests.docker_harness import remove_agent_containers
from tests.harness import start_agent, start_docker_agent
from tests.integration.test_job_outputs import _responsive


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
