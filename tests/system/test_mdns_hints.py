"""mDNS adverts are hints, never authority: forged adverts made here with python-zeroconf
(on 127.0.0.1 only) against a real agent the user added, checked through the real CLI,
the TUI's LiveFeeds and, when root, across network namespaces.

Each forgery: same name/other key, same key/other address, other name/same address,
invalid keys and oversized TXT records. None may change a pinned record or crash anything,
and a conflict lasts only while the forger is heard.
The part with Docker, Slurm or namespaces (system); the rest: tests/integration/test_mdns_hints.py."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.harness import APP_MODULE, REPO, lanpool_env, spawn_agent
from tests.integration.test_mdns_hints import ONE_JOB, SERVICE_TYPE, _new_key, _row


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="network namespaces need root and iproute2")
def test_hostile_peers_across_network_namespaces(tmp_path, controller_home, make_project):
    """lp-h1: a real agent that accepts this controller's key; lp-h3: a forger claiming its
    name; lp-h2: the controller. Nothing is trusted until the user adds the runner."""
    lab = REPO / "scripts" / "lab"
    subprocess.run([lab, "up", "3"], check=True)
    env = {**lanpool_env(controller_home), "LANPOOL_MDNS_INTERFACES": "10.77.0.2"}
    project = make_project(ONE_JOB)

    def app(*args: str, ns: str = "lp-h2") -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "lanpool.app.cli.main", *args],
            env=env,
            capture_output=True,
            text=True,
            cwd=project,
            timeout=120,
        )

    key = app("headless", "key").stdout.strip()
    data = tmp_path / "lab-agent"
    subprocess.run(
        [sys.executable, "-m", "lanpool.app.cli.main", "agent", "authorize", key, "--data-dir", str(data)],
        env=env,
        check=True,
        capture_output=True,
    )
    # The agent runs inside the lab host lp-h1, on its own address.
    agent = spawn_agent(
        data, env, name="lab-gpu", host="10.77.0.1", port=7422, app=("ip", "netns", "exec", "lp-h1", *APP_MODULE)
    )
    forger = None
    try:

        def listing() -> dict:
            res = app("headless", "runners", "--json", "--wait", "2")
            assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
            return {r["name"]: r for r in json.loads(res.stdout)}

        def wait(pred, what: str) -> dict:
            deadline = time.time() + 45
            while time.time() < deadline:
                seen = listing()
                if pred(seen):
                    return seen
            raise AssertionError(f"never {what}: {seen}")

        seen = wait(lambda s: "lab-gpu" in s, "discovered")["lab-gpu"]
        assert seen["state"] == "UNPAIRED" and seen["address"] == "10.77.0.1:7422"
        res = app("headless", "run", "a")
        assert res.returncode == 2 and "unpaired" in res.stderr, res.stderr
        assert not (data / "jobs").exists() or not any((data / "jobs").iterdir())

        assert app("headless", "runners", "add", "10.77.0.1:7422").returncode == 0
        pinned = _row(controller_home, "lab-gpu")["host_key"]
        forge = textwrap.dedent(f"""
            import asyncio, socket
            from zeroconf import IPVersion
            from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

            async def main():
                zc = AsyncZeroconf(interfaces=["10.77.0.3"], ip_version=IPVersion.V4Only)
                for n, (name, hk, port) in enumerate([("lab-gpu", "{_new_key()}", 7422),
                                                      ("lab-gpu", "{pinned}", 7422),
                                                      ("evil", "{_new_key()}", 7422),
                                                      ("junk", "garbage", 7422)]):
                    await zc.async_register_service(AsyncServiceInfo(
                        "{SERVICE_TYPE}", f"f{{n}}.{SERVICE_TYPE}", addresses=[socket.inet_aton("10.77.0.3")],
                        port=port, properties={{"name": name, "hk": hk, "gpus": "8"}}), allow_name_change=True)
                print("up", flush=True)
                await asyncio.sleep(600)

            asyncio.run(main())
        """)
        forger = subprocess.Popen(
            ["ip", "netns", "exec", "lp-h3", sys.executable, "-c", forge], env=env, stdout=subprocess.PIPE, text=True
        )
        assert forger.stdout.readline().strip() == "up"
        seen = wait(lambda s: s.get("lab-gpu", {}).get("state") == "CONFLICT" and "evil" in s, "in conflict")
        assert seen["lab-gpu"]["address"] == "10.77.0.1:7422" and "junk" not in seen
        assert seen["evil"]["trusted"] is False
        row = _row(controller_home, "lab-gpu")
        assert (row["host"], row["port"], row["host_key"], row["trusted"]) == ("10.77.0.1", 7422, pinned, 1)
        forger.send_signal(signal.SIGKILL)
        forger.wait()
        wait(lambda s: s["lab-gpu"]["state"] == "LIVE", "LIVE after the forger left")
        res = app("headless", "run", "a")
        assert res.returncode == 0 and res.stdout == "ran-a\n", res.stderr
    finally:
        if forger is not None and forger.poll() is None:
            forger.kill()
            forger.wait()
        agent.stop()
        subprocess.run([lab, "down"], check=True)
