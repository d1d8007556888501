"""The agent's mDNS announcement (agent/ssh/mdns.py) with real zeroconf on 127.0.0.1.

A job submitted in the agent's first second (its SSH port already open, zeroconf still
probing the service name) used to crash the agent: the TXT update registered the service
early, and the registration then raised ServiceNameAlreadyRegistered."""

import asyncio
import secrets

from lanpool.agent.ssh.mdns import Advertiser
from lanpool.app.runners.discovery import discover
from tests.harness import start_agent

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGw1XfOY0Lh6dOdgPvvqCDLhsm0HWTyU6sD4Zb3lXqTc"


def _props(name: str, running: int) -> dict[str, str]:
    return {"name": name, "v": "0", "pv": "1", "hk": HOST_KEY, "running": str(running)}


def test_an_update_while_the_name_is_probed_is_announced_once_registered():
    name = f"race-{secrets.token_hex(3)}"  # other suites on this machine announce on loopback too

    async def scenario() -> dict[str, str]:
        advertiser = Advertiser(name, 40001, ["127.0.0.1"])
        start = asyncio.create_task(advertiser.start(_props(name, 0)))
        await asyncio.sleep(0.05)  # zeroconf waits 150-250 ms before its first probe
        assert not start.done(), "registration ended before the update could race it"
        await advertiser.update(_props(name, 1))  # a job was submitted meanwhile
        try:
            await start  # raised ServiceNameAlreadyRegistered before the fix
            heard = await discover(["127.0.0.1"], 2.0)
        finally:
            await advertiser.close()
        [advert] = [a for a in heard if a.name == name]
        return advert.props

    props = asyncio.run(scenario())
    assert props["running"] == "1", props  # the update was not lost, only held back


def test_an_update_after_registration_is_announced_at_once():
    name = f"upd-{secrets.token_hex(3)}"

    async def scenario() -> dict[str, str]:
        advertiser = Advertiser(name, 40002, ["127.0.0.1"])
        await advertiser.start(_props(name, 0))
        try:
            await advertiser.update(_props(name, 2))
            heard = await discover(["127.0.0.1"], 2.0)
        finally:
            await advertiser.close()
        [advert] = [a for a in heard if a.name == name]
        return advert.props

    assert asyncio.run(scenario())["running"] == "2"


def test_an_agent_whose_announcement_fails_serves_on_and_says_why(tmp_path, controller_home, cli, make_project):
    # 192.0.2.1 (TEST-NET-1) is on no interface here: zeroconf cannot bind to it.
    agent = start_agent(tmp_path / "a", controller_home, extra_args=["--mdns-interface", "192.0.2.1"])
    try:
        assert agent.proc.poll() is None, "the agent must not exit because mDNS failed"
        project = make_project("workflows:\n  - name: a\n    commands: [echo served-anyway]\n")
        res = cli("headless", "run", "a", "--runner", agent.address, cwd=project)
        assert res.returncode == 0 and "served-anyway" in res.stdout, res.stderr
        log = agent.log_path.read_text()
        assert "mDNS announcement failed" in log and "reach this runner by address" in log
    finally:
        agent.stop()
