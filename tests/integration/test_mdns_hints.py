"""mDNS adverts are hints, never authority: forged adverts made here with python-zeroconf
(on 127.0.0.1 only) against a real agent the user added, checked through the real CLI,
the TUI's LiveFeeds and, when root, across network namespaces.

Each forgery: same name/other key, same key/other address, other name/same address,
invalid keys and oversized TXT records. None may change a pinned record or crash anything,
and a conflict lasts only while the forger is heard.
The part with real agents and the CLI (integration); the rest: tests/system/test_mdns_hints.py."""

import asyncio
import json
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from contextlib import asynccontextmanager
from pathlib import Path

import asyncssh
import pytest
from zeroconf import IPVersion
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from tests.harness import start_agent

SERVICE_TYPE = "_lanpool._tcp.local."


ONE_JOB = "workflows:\n  - name: a\n    commands: [echo ran-a]\n"


def _new_key() -> str:
    return asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


@asynccontextmanager
async def forged(props: dict, port: int, address: str = "127.0.0.1"):
    """Announce a `_lanpool._tcp` service with these TXT properties while inside the block,
    then say goodbye. Only on 127.0.0.1 (or the address given): never every interface."""
    zc = AsyncZeroconf(interfaces=[address], ip_version=IPVersion.V4Only)
    label = f"forged-{secrets.token_hex(4)}"
    info = AsyncServiceInfo(
        SERVICE_TYPE,
        f"{label}.{SERVICE_TYPE}",
        addresses=[socket.inet_aton(address)],
        port=port,
        properties=props,
        server=f"{label}.local.",
    )
    await zc.async_register_service(info, allow_name_change=True)
    try:
        yield info
    finally:
        await (await zc.async_unregister_service(info))
        await zc.async_close()


def _runners(cli, wait: float = 2) -> dict[str, dict]:
    res = cli("headless", "runners", "--json", "--wait", str(wait))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    return {r["name"]: r for r in json.loads(res.stdout)}


def _wait(cli, name: str, pred, what: str, timeout: float = 25) -> dict:
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = _runners(cli).get(name)
        if last is not None and pred(last):
            return last
    raise AssertionError(f"{name} never {what}: last seen {last}")


def _row(home: Path, name: str) -> dict | None:
    db = sqlite3.connect(home / "lanpool.db")
    db.row_factory = sqlite3.Row
    try:
        row = db.execute("SELECT * FROM runners WHERE name = ?", (name,)).fetchone()
    finally:
        db.close()
    return dict(row) if row else None


@pytest.fixture
def added(tmp_path, controller_home, cli):
    """A real agent with a name of its own (others may announce on loopback too), added by the user."""
    name = f"real-{secrets.token_hex(3)}"
    a = start_agent(tmp_path / "real", controller_home, name=name)
    cli("headless", "runners", "add", a.address, check=True)
    a.name = name
    yield a
    a.stop()


def test_same_name_other_key_is_a_conflict_only_while_heard(added, controller_home, cli, make_project):
    project = make_project(ONE_JOB)
    pinned = _row(controller_home, added.name)["host_key"]
    mallory = _new_key()

    async def scenario() -> None:
        async with forged({"name": added.name, "hk": mallory, "gpus": "8", "gpu_name": "H100"}, added.port):
            row = await asyncio.to_thread(_wait, cli, added.name, lambda r: r["state"] == "CONFLICT", "CONFLICT")
            assert row["address"] == added.address
            res = await asyncio.to_thread(cli, "headless", "run", "a", cwd=project)
            assert res.returncode == 2 and "conflict" in res.stderr, res.stderr
            assert _row(controller_home, added.name)["host_key"] == pinned

    asyncio.run(scenario())
    # The forger said goodbye: the conflict is over, with no user action, and `run` (which
    # listens again while a conflict is on record) uses the pinned runner. A browse that heard
    # nobody (a loaded machine answers late) ends no claim (app/runners/adverts.py), so on a busy
    # machine a `run` may still see it: within seconds, one does not.
    deadline = time.monotonic() + 30
    while (res := cli("headless", "run", "a", cwd=project)).returncode != 0 and time.monotonic() < deadline:
        assert "conflict" in res.stderr, res.stderr  # only the conflict not yet cleared, nothing else
        time.sleep(1)
    assert res.returncode == 0 and res.stdout == "ran-a\n", res.stderr
    assert _runners(cli)[added.name]["state"] == "LIVE"
    assert _row(controller_home, added.name)["host_key"] == pinned


def test_a_forger_killed_without_goodbye_leaves_no_conflict(added, controller_home, cli):
    script = textwrap.dedent(f"""
        import asyncio, socket, sys
        from zeroconf import IPVersion
        from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

        async def main():
            zc = AsyncZeroconf(interfaces=["127.0.0.1"], ip_version=IPVersion.V4Only)
            info = AsyncServiceInfo("{SERVICE_TYPE}", "killed-{secrets.token_hex(3)}.{SERVICE_TYPE}",
                                    addresses=[socket.inet_aton("127.0.0.1")], port={added.port},
                                    properties={{"name": "{added.name}", "hk": "{_new_key()}"}})
            await zc.async_register_service(info, allow_name_change=True)
            print("up", flush=True)
            await asyncio.sleep(600)

        asyncio.run(main())
    """)
    forger = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert forger.stdout.readline().strip() == "up"
        _wait(cli, added.name, lambda r: r["state"] == "CONFLICT", "CONFLICT")
    finally:
        forger.send_signal(signal.SIGKILL)  # no goodbye packets: it "stops answering"
        forger.wait()
    _wait(cli, added.name, lambda r: r["state"] == "LIVE", "LIVE again after the forger died", timeout=60)


def test_known_key_at_another_address_changes_nothing_unless_the_key_answers_there(
    added, tmp_path, controller_home, cli
):
    other = start_agent(tmp_path / "other", controller_home, name=f"other-{secrets.token_hex(3)}")
    pinned = _row(controller_home, added.name)

    async def scenario() -> None:
        # The real key text, pointing at a server that holds another key; then at nothing at all.
        for port in (other.port, 1):
            async with forged({"name": added.name, "hk": pinned["host_key"], "gpus": "8"}, port):
                for _ in range(3):
                    await asyncio.to_thread(_runners, cli)
                row = _row(controller_home, added.name)
                assert (row["host"], row["port"], row["host_key"]) == (
                    pinned["host"],
                    pinned["port"],
                    pinned["host_key"],
                )
                assert json.loads(row["props"] or "{}").get("gpus") != "8"

    try:
        asyncio.run(scenario())
        assert _runners(cli)[added.name]["state"] == "LIVE"
    finally:
        other.stop()
    # The happy path: the same agent (same host key) restarted on another port is followed,
    # because its pinned key answers at the new address.
    added.stop()
    moved = start_agent(added.data_dir, controller_home, name=added.name, authorize=False)
    try:
        assert moved.port != added.port
        row = _wait(cli, added.name, lambda r: r["port"] == moved.port and r["state"] == "LIVE", "followed")
        assert row["trusted"] is True and _row(controller_home, added.name)["host_key"] == pinned["host_key"]
    finally:
        moved.stop()


def test_other_name_at_a_known_address_keeps_the_known_runner(added, controller_home, cli, make_project):
    project = make_project(ONE_JOB)
    pinned = _row(controller_home, added.name)
    intruders = {f"intruder-{secrets.token_hex(3)}": _new_key(), f"copycat-{secrets.token_hex(3)}": pinned["host_key"]}

    async def scenario() -> None:
        async with (
            forged({"name": list(intruders)[0], "hk": list(intruders.values())[0]}, added.port),
            forged({"name": list(intruders)[1], "hk": list(intruders.values())[1]}, added.port),
        ):
            found = await asyncio.to_thread(_wait, cli, list(intruders)[1], lambda r: True, "listed")
            assert found["trusted"] is False and found["state"] in ("UNPAIRED", "CONFLICT")
            listing = await asyncio.to_thread(_runners, cli)
            assert all(not listing[n]["trusted"] for n in intruders if n in listing)
            row = _row(controller_home, added.name)
            assert row is not None and row["host_key"] == pinned["host_key"] and row["trusted"] == 1
            assert listing[added.name]["state"] == "LIVE"
            res = await asyncio.to_thread(cli, "headless", "run", "a", cwd=project)
            assert res.returncode == 0 and f"on runner {added.name}" in res.stderr, res.stderr

    asyncio.run(scenario())


BAD_KEYS = {
    "garbage": "not a key at all",
    "wrong-type": "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQDx",
    # An ECDSA key's blob under the ed25519 name.
    "type-mismatch": "ssh-ed25519 "
    + asyncssh.generate_private_key("ecdsa-sha2-nistp256").export_public_key().decode().split()[1],
    "huge": "ssh-ed25519 " + "A" * 240,
    "private": "-----BEGIN OPENSSH PRIVATE KEY-----",
}


def test_invalid_keys_and_oversized_records_are_ignored(added, controller_home, cli, make_project):
    project = make_project(ONE_JOB)
    pinned = _row(controller_home, added.name)["host_key"]
    tag = secrets.token_hex(3)
    bloated = {"name": f"bloated-{tag}", "hk": _new_key(), **{f"p{i:02d}": "x" * 100 for i in range(40)}}

    async def scenario() -> None:
        async with forged(bloated, 1):
            blocks = [forged({"name": f"bad-{kind}-{tag}", "hk": key}, 2) for kind, key in BAD_KEYS.items()]
            blocks += [forged({"name": added.name, "hk": key}, added.port) for key in BAD_KEYS.values()]
            blocks.append(forged({"name": f"bad name\n{tag}", "hk": _new_key()}, 3))
            entered = [await b.__aenter__() for b in blocks]
            try:
                await asyncio.to_thread(_wait, cli, f"bloated-{tag}", lambda r: True, "listed")
                for _ in range(2):  # every later call too, not only the first
                    res = await asyncio.to_thread(cli, "headless", "runners", "--wait", "2")
                    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
                    assert "is not an ed25519 public key" in res.stderr  # the log line saying why
                listing = await asyncio.to_thread(_runners, cli)
                assert not [n for n in listing if tag in n and not n.startswith("bloated")]
                assert listing[added.name]["state"] == "LIVE"  # an invalid claim is no conflict
                res = await asyncio.to_thread(cli, "headless", "run", "a", cwd=project)
                assert res.returncode == 0 and res.stdout == "ran-a\n", res.stderr
            finally:
                for b in reversed(blocks[: len(entered)]):
                    await b.__aexit__(None, None, None)

    asyncio.run(scenario())
    props = json.loads(_row(controller_home, f"bloated-{tag}")["props"])
    assert len(props) <= 32 and all(len(k) <= 32 and len(v) <= 256 for k, v in props.items())
    assert _row(controller_home, added.name)["host_key"] == pinned


def test_live_feeds_end_a_conflict_when_the_forger_says_goodbye(added, controller_home):
    """The TUI's path: a long-running browser, goodbye packets instead of fresh browses."""
    from lanpool.app.controller import Controller
    from lanpool.app.tui.live import LiveFeeds

    async def scenario() -> None:
        ctl = Controller()
        errors: list[str] = []
        feeds = LiveFeeds(ctl, lambda: None, lambda *a: None, lambda _j: None, errors.append, interfaces=["127.0.0.1"])

        async def state_becomes(state: str, timeout: float = 20) -> None:
            deadline = time.time() + timeout
            while time.time() < deadline:
                if ctl.store.runner(added.name)["state"] == state:
                    return
                await asyncio.sleep(0.2)
            raise AssertionError(f"{added.name} never {state}: {ctl.store.runner(added.name)}")

        await feeds.start(discover=True, probe_every_s=0.5)
        try:
            await state_becomes("LIVE")
            async with forged({"name": added.name, "hk": _new_key()}, added.port):
                await state_becomes("CONFLICT")
                await asyncio.sleep(2)  # probes go on meanwhile: the conflict holds while heard
                assert ctl.store.runner(added.name)["state"] == "CONFLICT"
            await state_becomes("LIVE")
            assert errors == []
        finally:
            await feeds.close()
            ctl.close()

    asyncio.run(scenario())
