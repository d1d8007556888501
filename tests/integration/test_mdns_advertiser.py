"""The agent's mDNS announcement (agent/ssh/mdns.py) with real zeroconf on 127.0.0.1.

A job submitted in the agent's first second (its SSH port already open, zeroconf still
probing the service name) used to crash the agent: the TXT update registered the service
early, and the registration then raised ServiceNameAlreadyRegistered."""

import asyncio
import secrets
import time

from lanpool.agent.ssh.mdns import Advertiser
from lanpool.app.runners.discovery import Advert, discover
from tests.harness import start_agent

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGw1XfOY0Lh6dOdgPvvqCDLhsm0HWTyU6sD4Zb3lXqTc"


def _props(name: str, running: int) -> dict[str, str]:
    return {"name": name, "v": "0", "pv": "1", "hk": HOST_KEY, "running": str(running)}


async def _heard(name: str, within_s: float = 30.0) -> Advert:
    """The advert of `name`, browsing again until it is heard: on a loaded machine one 2 s
    browse may end before the answer comes (what the tests check is its content)."""
    deadline = time.monotonic() + within_s
    while True:
        heard = [a for a in await discover(["127.0.0.1"], 2.0) if a.name == name]
        if heard:
            assert len(heard) == 1, heard
            return heard[0]
        assert time.monotonic() < deadline, f"{name} never heard on loopback mDNS"


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
            advert = await _heard(name)
        finally:
            await advertiser.close()
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
            advert = await _heard(name)
        finally:
            await advertiser.close()
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
