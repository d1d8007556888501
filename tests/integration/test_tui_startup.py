"""The TUI's start-up: what its first frame imports, what loads after it, and the
pinned host keys read as text (without the SSH stack) as strictly as asyncssh reads them.
The part with real agents and the CLI (integration); the rest: tests/unit/test_tui_startup.py."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("textual")


from lanpool.app.store import Store  # noqa: E402
from tests import harness  # noqa: E402
from tests.unit.test_tui_startup import _ed25519_text

# Packages the first frame must not wait for: the SSH stack (asyncssh, cryptography), mDNS
# (zeroconf, ifaddr) and the workflows' yaml load after it; textual, rich, msgpack, sqlite are its own.
LATER = {"asyncssh", "cryptography", "zeroconf", "ifaddr", "yaml"}


# Runs the real app on a store with a pinned runner; reports the third-party packages loaded when
# the first frame is drawn and once the app has settled, and what `r` (Run) then finds.
PROBE = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    from lanpool.app.tui import load_app

    def third():
        tops = {m.split(".")[0] for m in sys.modules}
        return sorted(t for t in tops if t not in sys.stdlib_module_names and not t.startswith("_"))

    async def main():
        tui = load_app()(Path(sys.argv[1]), discover=False, probe_every_s=3.0)
        seen = {}
        display = tui._display
        def first_frame(screen, update):
            seen.setdefault("first_frame", third())
            display(screen, update)
        tui._display = first_frame
        async with tui.run_test(size=(120, 30), notifications=True) as pilot:
            await pilot.pause(float(sys.argv[2]))
            seen["project_before_r"] = tui.project is not None
            await pilot.press("r")
            await pilot.pause(0.3)
            seen["dialog"] = type(tui.screen).__name__
            seen["settled"] = third()
            seen["runners"] = [str(c) for c in tui.query_one("#runners-table").get_row("gpu1")]
        print(json.dumps(seen))

    asyncio.run(main())
    """
)


def _home_with_a_pinned_runner(home: Path, key: str, port: int) -> None:
    home.mkdir(parents=True, exist_ok=True)
    store = Store(home / "lanpool.db")
    now = time.time()
    store.conn.execute(
        "INSERT INTO runners (name, host, port, host_key, source, added_at, last_seen, state, paired, "
        "props, conflict_key, last_ok, trusted, trusted_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        ("gpu1", "127.0.0.1", port, key, "manual", now, now, "OFFLINE", 1, "{}", None, now, 1, now),
    )
    store.conn.commit()
    store.close()


def _probe(tmp_path: Path, wait_s: float, port: int = 1) -> dict:
    """`port`: the pinned runner's (1: nothing listens, so no SSH stack is ever needed)."""
    home = tmp_path / "home"
    _home_with_a_pinned_runner(home, _ed25519_text(), port)
    project = harness.write_project(tmp_path / "project", "workflows:\n  - name: hello\n    commands: ['echo hi']\n")
    env = harness.lanpool_env(home)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(project), str(wait_s)],
        env=env,
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_the_first_frame_waits_for_no_ssh_mdns_or_yaml_and_r_still_finds_the_workflows(tmp_path):
    got = _probe(tmp_path, 0)  # r at once: the workflows load on demand if they are not yet
    assert LATER.isdisjoint(got["first_frame"]), f"the first frame waited for {LATER & set(got['first_frame'])}"
    assert "textual" in got["first_frame"]  # the probe sees imports at all
    assert got["dialog"] == "RunDialog"
    assert got["runners"][0] == "gpu1" and "OFFLINE" in got["runners"]  # its pinned key read as valid


def test_what_the_first_frame_left_out_loads_after_it(tmp_path):
    """The attack on the budget above: the feeds (asyncssh) and the workflows still load, unasked.
    The runner's port takes the TCP connection (and says nothing): a refused one needs no SSH
    stack at all (app/runners/reach.py), so the feeds would never import it."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        got = _probe(tmp_path, 1.5, listener.getsockname()[1])
    assert got["project_before_r"] is True
    assert {"asyncssh", "yaml"} <= set(got["settled"])


@pytest.mark.parametrize(("given", "expected"), [(None, 120), ("30", 30)])
def test_frames_come_at_up_to_120_a_second_unless_the_user_says(given, expected):
    """A key waits for Textual's next frame slot: 1/120 s apart (its default, 60, made a key that
    came after one of the log's frames wait up to 17 ms); a user's own TEXTUAL_FPS is kept."""
    env = {k: v for k, v in os.environ.items() if k != "TEXTUAL_FPS"}
    if given is not None:
        env["TEXTUAL_FPS"] = given
    code = "from lanpool.app import tui; tui.load_app(); from textual import constants, screen; print(constants.MAX_FPS, round(1 / screen.UPDATE_PERIOD))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(expected)] * 2
