"""The runner pool for real: mDNS on loopback (and across network namespaces when
root), pairing codes, liveness, host-key conflicts, GPU accounting and queueing.
The part with Docker, Slurm or namespaces (system); the rest: tests/integration/test_pool.py."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.harness import APP_MODULE, REPO, lanpool_env, spawn_agent


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="network namespaces need root and iproute2")
def test_discovery_across_network_namespaces(tmp_path, controller_home):
    lab = REPO / "scripts" / "lab"
    subprocess.run([lab, "up", "2"], check=True)
    env = {**lanpool_env(controller_home), "LANPOOL_MDNS_INTERFACES": "10.77.0.2"}
    # The agent runs inside the lab host lp-h1, on its own address.
    agent = spawn_agent(
        tmp_path / "lab-agent",
        env,
        name="lab-runner",
        host="10.77.0.1",
        port=7422,
        app=("ip", "netns", "exec", "lp-h1", *APP_MODULE),
    )
    try:
        deadline = time.time() + 20
        seen = {}
        while time.time() < deadline and "lab-runner" not in seen:
            out = subprocess.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    "lp-h2",
                    sys.executable,
                    "-m",
                    "lanpool.app.cli.main",
                    "headless",
                    "runners",
                    "--json",
                    "--wait",
                    "2",
                ],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            seen = {r["name"]: r for r in json.loads(out)}
        assert seen["lab-runner"]["address"] == "10.77.0.1:7422"
        assert seen["lab-runner"]["state"] == "UNPAIRED" and seen["lab-runner"]["source"] == "mdns"
    finally:
        agent.stop()
        subprocess.run([lab, "down"], check=True)
