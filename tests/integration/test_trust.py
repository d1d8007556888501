"""Trust is the controller's own record: a runner gets jobs only after the user paired it,
added it by address, or named its address with --runner. Real agents on loopback, real
mDNS on 127.0.0.1, the real CLI; each happy path next to the attack it must refuse.
The part with real agents and the CLI (integration); the rest: tests/unit/test_trust.py."""

import secrets
import sqlite3

import pytest

from tests.harness import runners_seen, start_agent, wait_discovered

ONE_JOB = "workflows:\n  - name: a\n    commands: [echo ran-a]\n"


GPU_JOB = "workflows:\n  - name: g\n    resources: {gpu: 1}\n    commands: [echo ran-g]\n"


def _jobs_on(agent) -> list:
    jobs = agent.data_dir / "jobs"
    return list(jobs.iterdir()) if jobs.exists() else []


def _one_line(res, code: int, *needles: str) -> str:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_mdns_runner_that_accepts_our_key_gets_no_job_until_added(tmp_path, controller_home, cli, make_project):
    # It accepts this controller's key and announces "8 x GPU": neither makes it ours.
    name = f"trust-{secrets.token_hex(3)}"
    a = start_agent(tmp_path / "a", controller_home, name=name, extra_env={"LANPOOL_FAKE_GPUS": "0,1,2,3,4,5,6,7"})
    try:
        project = make_project(GPU_JOB)
        seen = wait_discovered(cli, name, timeout=20)
        assert seen["state"] == "UNPAIRED" and seen["trusted"] is False and seen["gpus"] == 8

        res = cli("headless", "run", "g", cwd=project)
        assert res.returncode == 2 and "unpaired" in res.stderr and "runners add" in res.stderr, res.stderr
        pinned = cli("headless", "run", "g", "--runner", name, cwd=project)
        _one_line(pinned, 2, f"runner {name} is not paired with this controller")
        assert runners_seen(cli)[name]["state"] == "UNPAIRED"  # checked again: still not ours
        assert _jobs_on(a) == [], "an untrusted runner must never receive a job"

        added = cli("headless", "runners", "add", a.address)
        assert added.returncode == 0 and f"added runner {name}" in added.stderr, added.stderr
        row = runners_seen(cli)[name]
        assert (row["state"], row["trusted"], row["source"]) == ("LIVE", True, "mdns")
        res = cli("headless", "run", "g", cwd=project)
        assert res.returncode == 0 and res.stdout == "ran-g\n", res.stderr
    finally:
        a.stop()


def test_runner_named_by_address_is_trusted_and_pinned(tmp_path, controller_home, cli, make_project):
    project = make_project(ONE_JOB)
    a = start_agent(tmp_path / "a", controller_home, name="pinned-a")
    port = a.port
    try:
        res = cli("headless", "run", "a", "--runner", a.address, cwd=project)
        assert res.returncode == 0 and res.stdout == "ran-a\n", res.stderr
        assert runners_seen(cli)["pinned-a"]["trusted"] is True  # the user's act lasts, like known_hosts
        assert cli("headless", "run", "a", cwd=project).returncode == 0
    finally:
        a.stop()
    # Another machine (another host key, same name) at the trusted address: refused.
    impostor = start_agent(tmp_path / "impostor", controller_home, name="pinned-a", port=port)
    try:
        for args in (("--runner", f"127.0.0.1:{port}"), ("--runner", "pinned-a"), ()):
            res = cli("headless", "run", "a", *args, cwd=project)
            assert res.returncode in (2, 3) and "Traceback" not in res.stderr, res.stderr
            assert "host key" in res.stderr or "conflict" in res.stderr, res.stderr
        assert _jobs_on(impostor) == []
        res = cli("headless", "runners", "add", f"127.0.0.1:{port}")
        _one_line(res, 3, "presented a different host key")
    finally:
        impostor.stop()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (("headless", "runners", "add", "h:70000"), "the port must be a number from 1 to 65535"),
        (("headless", "runners", "add", "h:abc"), "the port must be a number from 1 to 65535"),
        (("headless", "runners", "add", "h:0"), "the port must be a number from 1 to 65535"),
        (("headless", "runners", "add", ":7422"), "use HOST or HOST:PORT"),
        (("headless", "runners", "add", "[::1"), "[IPV6]:PORT"),
        (("headless", "runners", "pair", "h:99999", "ABCD-EFGH"), "the port must be a number from 1 to 65535"),
    ],
)
def test_bad_addresses_are_one_line(cli, argv, needle):
    _one_line(cli(*argv), 2, "bad runner address", needle)


@pytest.mark.parametrize("spec", ["127.0.0.1:99999", "h:abc", "h:" + "9" * 5000])
def test_bad_runner_option_is_one_line(cli, make_project, spec):
    project = make_project(ONE_JOB)
    _one_line(cli("headless", "run", "a", "--runner", spec, cwd=project), 2, "the port must be a number")


def _damage_key(home, name: str, key: str) -> None:
    db = sqlite3.connect(home / "lanpool.db")
    try:
        db.execute("UPDATE runners SET host_key = ? WHERE name = ?", (key, name))
        db.commit()
    finally:
        db.close()


@pytest.mark.parametrize(
    "bad_key",
    ["ssh-ed25519 not-base64!!", "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQC", "", "x" * 100_000],
    ids=["not-base64", "cut-rsa", "empty", "100k-chars"],  # a 100k-character id floods every report
)
def test_malformed_stored_key_is_one_line_and_others_keep_working(
    tmp_path, controller_home, cli, make_project, bad_key
):
    project = make_project(ONE_JOB)
    good = start_agent(tmp_path / "good", controller_home, name="good-runner")
    broken = start_agent(tmp_path / "broken", controller_home, name="broken-runner")
    try:
        cli("headless", "runners", "add", good.address, check=True)
        cli("headless", "runners", "add", broken.address, check=True)
        _damage_key(controller_home, "broken-runner", bad_key)
        hint = "runner broken-runner has an unreadable pinned key: `app headless runners remove broken-runner`"

        listing = cli("headless", "runners", "--wait", "0")
        assert listing.returncode == 0 and "Traceback" not in listing.stderr
        assert listing.stderr.strip().splitlines() == [f"app: {hint}, then add or pair it again"]
        states = {n: r["state"] for n, r in runners_seen(cli).items()}
        assert states == {"good-runner": "LIVE", "broken-runner": "UNPAIRED"}

        res = cli("headless", "run", "a", cwd=project)  # placed on the good one, the broken one named once
        assert res.returncode == 0 and res.stdout == "ran-a\n", res.stderr
        assert res.stderr.count(hint) == 1 and "Traceback" not in res.stderr
        _one_line(cli("headless", "run", "a", "--runner", "broken-runner", cwd=project), 1, hint)
        _one_line(cli("headless", "run", "a", "--runner", broken.address, cwd=project), 1, hint)
        _one_line(cli("headless", "runners", "add", broken.address), 1, hint)
        assert _jobs_on(broken) == []

        cli("headless", "runners", "remove", "broken-runner", check=True)  # what the line says to do
        cli("headless", "runners", "add", broken.address, check=True)
        assert runners_seen(cli)["broken-runner"]["state"] == "LIVE"
    finally:
        good.stop()
        broken.stop()
