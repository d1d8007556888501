"""Start-up stays cheap: what each headless verb imports, and no child process at import.

Most of a short `app headless` command's time is Python importing modules, so each
verb has a budget: the heavy packages it may load (names, not times: times vary
with the machine's load, a module set does not). A verb that starts importing
a new package, or many more of lanpool's modules, fails here, and so does an
import that starts a child process (ctypes.util.find_library runs ldconfig and
gcc: app/startup/library_lookup.py answers asyncssh's and ifaddr's lookups without).
The part with real agents and the CLI (integration); the rest: tests/unit/test_import_budget.py."""

import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from lanpool.protocol import JobState

REPO = Path(__file__).resolve().parents[2]


# What a verb may load beyond the standard library. The Controller builds what talks to runners
# (asyncssh, cryptography) and reads workflows (yaml) on first use, so the verbs
# that read the store start without them; `run` loads the workflow loader when it starts.
_LIGHT = {"cython_runtime", "msgpack", "platformdirs"}


_ALL = _LIGHT | {"asyncssh", "cryptography", "ifaddr", "typing_extensions", "yaml"}


# verb -> (third-party packages it may import, most modules of app/ and protocol/ it may import).
# The counts are today's plus ~10%: a verb that starts importing a new package, or a big slice of
# lanpool it does not need, fails here; a deliberate change updates the number.
BUDGET: dict[str, tuple[set[str], int]] = {
    "run": (_ALL, 55),  # 50 with app/cli/run_options.py (run and sweep share it)
    "status": (_LIGHT, 36),
    "logs": (_LIGHT, 36),
    "runners": (_LIGHT, 32),
    "key": (_LIGHT, 32),
    "usage": (_LIGHT, 38),  # 34: the store, one query, a table
}


# Imports a verb's handler module and builds the Controller as `app headless VERB` does, then
# reports what is loaded and whether anything spawned a process.
PROBE = textwrap.dedent(
    """
    import json, sys
    spawned = []
    sys.addaudithook(lambda e, a: spawned.append(str(a[0])) if e in SPAWN else None)
    from lanpool.app.cli.headless import handler_of
    from lanpool.app.controller import Controller
    handler_of(sys.argv[1])
    Controller().close()
    tops = {m.split(".")[0] for m in sys.modules}
    third = sorted(t for t in tops if t not in sys.stdlib_module_names and not t.startswith("_") and t != "lanpool")
    ours = sum(1 for m, mod in list(sys.modules.items()) if m.startswith(OURS) and not hasattr(mod, "__path__"))
    print(json.dumps({"third_party": third, "ours": ours, "spawned": spawned}))
    """
)


# lanpool's own modules counted against a budget: the controller's and the wire's, files only
# (a sub-package's __init__ is a folder's docstring, not a slice of lanpool to load).
OURS = ("lanpool.app", "lanpool.protocol")


SPAWN = ("subprocess.Popen", "os.posix_spawn", "os.fork", "os.exec", "os.system")


def _probe(code: str, *args: str, home: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), LANPOOL_HOME=str(home))
    prelude = f"SPAWN = {SPAWN!r}\nOURS = {OURS!r}\n"
    out = subprocess.run(
        [sys.executable, "-c", prelude + code, *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("verb", sorted(BUDGET))
def test_a_verb_imports_no_more_than_its_budget(verb, tmp_path):
    allowed, most_ours = BUDGET[verb]
    _stored_job(tmp_path, 1)  # a store already made: its first migration loads sqlite_utils (and numpy) once
    got = _probe(PROBE, verb, home=tmp_path)
    over = set(got["third_party"]) - allowed
    assert not over, f"`app headless {verb}` now imports {sorted(over)}: import them where they are used"
    assert got["ours"] <= most_ours, f"`app headless {verb}` imports {got['ours']} lanpool modules (budget {most_ours})"
    assert got["spawned"] == []


# Runs the verb itself (`app headless ARGS...`, stdout to /dev/null) and reports the packages
# loaded by the end: what the probe above cannot see (what the handler imports while it runs).
RUN_VERB = textwrap.dedent(
    """
    import json, os, sys
    from lanpool.app.cli.headless import main
    sys.stdout.flush()
    kept = os.dup(1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    rc = main(sys.argv[1:])
    sys.stdout.flush()
    os.dup2(kept, 1)
    tops = {m.split(".")[0] for m in sys.modules}
    ours = sum(1 for m, mod in list(sys.modules.items()) if m.startswith(OURS) and not hasattr(mod, "__path__"))
    print(json.dumps({"rc": rc, "third_party": sorted(t for t in tops if t not in sys.stdlib_module_names and t != "lanpool"), "ours": ours}))
    """
)


SSH_STACK = {"asyncssh", "cryptography", "yaml"}


# Lanpool's modules loaded by the end of the verb (today's plus ~10%): `status` and `logs` of stored
# jobs no longer build the artifact stack (50 modules before, 41 now).
RUNNING_BUDGET = {"status": 41, "logs": 41, "runners": 39, "usage": 40}


@pytest.mark.parametrize(
    "args", [["status"], ["status", "--json"], ["logs", "quick-fox-1"], ["runners", "--wait", "0"], ["usage", "--json"]]
)
def test_reading_the_store_does_not_need_the_ssh_stack(args, tmp_path):
    """The start-up target: `status` and `logs` of stored runs (no runner to ask), and
    `runners` with none known, never import asyncssh, cryptography or yaml."""
    _stored_job(tmp_path, 1)
    got = _probe(RUN_VERB, *args, home=tmp_path)
    assert got["rc"] == 0
    assert not SSH_STACK & set(got["third_party"]), f"`app headless {' '.join(args)}` imports the SSH stack"
    assert got["ours"] <= RUNNING_BUDGET[args[0]], (
        f"`app headless {' '.join(args)}` loads {got['ours']} lanpool modules"
    )


def _running_job_on(home: Path, port: int) -> None:
    """A stored run whose second job is RUNNING on a trusted runner at 127.0.0.1:`port`."""
    import asyncssh

    from lanpool.app.store import Store

    _stored_job(home, 1)
    key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    store = Store(home / "lanpool.db")
    try:
        store.upsert_runner("r", "127.0.0.1", port, key, trusted=True)
        store.create_job("j2", "quick-fox-1", "echo", {"name": "r", "host": "127.0.0.1", "port": port}, {})
        store.set_job_status("j2", JobState.RUNNING)
    finally:
        store.close()


def test_a_status_that_asks_a_runner_does_load_it(tmp_path):
    """The attack on the test above: a job still running on a runner is refreshed by asking
    it (here something accepts the connection, then hangs up), which needs asyncssh: the
    probe sees the import."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        _running_job_on(tmp_path, server.getsockname()[1])
        stop = threading.Event()

        def hang_up() -> None:
            server.settimeout(0.2)
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    server.accept()[0].close()

        thread = threading.Thread(target=hang_up, daemon=True)
        thread.start()
        try:
            got = _probe(RUN_VERB, "status", home=tmp_path)
        finally:
            stop.set()
            thread.join(5)
    assert "asyncssh" in got["third_party"]


def test_a_status_whose_runner_is_off_does_not_load_the_ssh_stack(tmp_path):
    """A runner where nothing listens is known to be unreachable from the TCP connect that
    comes before the SSH stack's import (app/runners/reach.py): `status` says it is offline
    without importing asyncssh, and the job is left as it was."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]  # a port nothing listens on, once closed
    _running_job_on(tmp_path, port)
    got = _probe(RUN_VERB, "status", home=tmp_path)
    assert got["rc"] == 0
    assert not SSH_STACK & set(got["third_party"])
    from lanpool.app.store import Store

    store = Store(tmp_path / "lanpool.db")
    try:
        assert store.job("j2").status == "RUNNING" and store.runner("r")["state"] == "OFFLINE"
    finally:
        store.close()
    out = _app(tmp_path, "headless", "status", "--no-refresh")
    assert b"RUNNING (runner offline)" in out.stdout


def test_the_budget_can_fail(tmp_path):
    """The probe sees what a verb loads (the checks above are not vacuous)."""
    _stored_job(tmp_path, 1)
    got = _probe(PROBE, "run", home=tmp_path)
    assert got["ours"] > 20  # `run`'s handler imports the workflow loader (yaml only when a file is new to it)
    got = _probe("import lanpool.app.runs.loop\n" + PROBE, "run", home=tmp_path)  # what `run` loads once it starts
    assert {"asyncssh", "cryptography"} <= set(got["third_party"])


def test_importing_the_ssh_client_spawns_no_process(tmp_path):
    code = textwrap.dedent(
        """
        import json, sys
        spawned = []
        sys.addaudithook(lambda e, a: spawned.append(str(a[0])) if e in SPAWN else None)
        import lanpool.app.runners.client, lanpool.app.runners.adverts, asyncssh
        from asyncssh.crypto import pq, umac
        print(json.dumps({"spawned": spawned, "nettle": umac._nettle_lib}))
        """
    )
    got = _probe(code, home=tmp_path)
    assert got["spawned"] == []


def test_the_ssh_client_leaves_x509_out_and_still_signs(tmp_path):
    """asyncssh's X.509 support (cryptography.x509, ~25 ms) is not imported behind `app`
    (app/__init__.py); its ed25519 keys still sign and verify, and plain asyncssh, the
    counterpart, does import it (so the test sees the difference it claims)."""
    code = textwrap.dedent(
        """
        import json, sys
        FIRST
        import asyncssh
        key = asyncssh.generate_private_key("ssh-ed25519")
        ok = key.convert_to_public().verify(b"x", key.sign(b"x", b"ssh-ed25519"))
        print(json.dumps({"x509": "cryptography.x509" in sys.modules, "signed": ok}))
        """
    )
    behind_app = _probe(code.replace("FIRST", "import lanpool.app.runners.client"), home=tmp_path)
    plain = _probe(code.replace("FIRST", "pass"), home=tmp_path)
    assert behind_app == {"x509": False, "signed": True}
    assert plain == {"x509": True, "signed": True}


def test_ifaddr_is_left_out_of_asyncssh_config_only(tmp_path):
    """asyncssh's config files alone want ifaddr (~5 ms with `platform`): not loaded behind `app`
    for the SSH client, and still there for whoever else imports it (zeroconf's discovery, the
    agent's adverts); plain asyncssh loads it (the difference the test claims)."""
    code = textwrap.dedent(
        """
        import json, sys
        FIRST
        import asyncssh, asyncssh.config
        before = "ifaddr" in sys.modules
        import ifaddr
        print(json.dumps({"by_asyncssh": before, "config_has_it": asyncssh.config._ifaddr_available,
                          "later": bool(ifaddr.get_adapters())}))
        """
    )
    behind_app = _probe(code.replace("FIRST", "import lanpool.app.runners.client"), home=tmp_path)
    plain = _probe(code.replace("FIRST", "pass"), home=tmp_path)
    assert behind_app == {"by_asyncssh": False, "config_has_it": False, "later": True}
    assert plain == {"by_asyncssh": True, "config_has_it": True, "later": True}


def test_without_the_hook_asyncssh_spawns_lookups(tmp_path):
    """The attack on the test above: plain `import asyncssh` (no app first) does spawn here."""
    code = textwrap.dedent(
        """
        import json, sys
        spawned = []
        sys.addaudithook(lambda e, a: spawned.append(str(a[0])) if e in SPAWN else None)
        import asyncssh
        print(json.dumps({"spawned": spawned}))
        """
    )
    if not sys.platform.startswith("linux"):
        pytest.skip("the ldconfig/gcc lookup is Linux's")
    assert _probe(code, home=tmp_path)["spawned"], "asyncssh no longer probes with ldconfig: the hook can go"


def _stored_job(home: Path, lines: int) -> None:
    """A finished, synced job whose log is `lines` lines, written with the store's own API."""
    from lanpool.app.store import Store
    from lanpool.protocol import JobState

    home.mkdir(parents=True, exist_ok=True)
    store = Store(home / "lanpool.db")
    try:
        store.create_run("quick-fox-1", "echo", "/proj")
        store.create_job("j1", "quick-fox-1", "echo", {"name": "r", "host": "127.0.0.1", "port": 1}, {})
        data = b"".join(b"%010d%s\n" % (i, b"x" * 89) for i in range(lines))
        store.add_log_chunks([("j1", 0, 0, lines, "out", data)])
        store.set_job_status("j1", JobState.DONE, exit_code=0, finished_at=1.0, synced=1)
    finally:
        store.close()


def _app(home: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO), LANPOOL_HOME=str(home))
    env.pop("PYTHONUNBUFFERED", None)  # block-buffered stdout, as in a pipe anywhere: the flush must be ours
    return subprocess.run(
        [sys.executable, "-m", "lanpool.app.cli.main", *args], env=env, capture_output=True, timeout=60
    )


def test_a_fast_exit_flushes_all_output_and_keeps_the_exit_code(tmp_path):
    _stored_job(tmp_path / "home", 50_000)  # 5 MB: far more than any stdio buffer
    out = _app(tmp_path / "home", "headless", "logs", "quick-fox-1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 50_000 and lines[-1].startswith(b"0000049999")
    status = _app(tmp_path / "home", "headless", "status", "--json", "--no-refresh")
    assert json.loads(status.stdout)[0]["run"] == "quick-fox-1"
    bad = _app(tmp_path / "home", "headless", "logs", "no-such-run")
    assert bad.returncode not in (0, 1) and b"Traceback" not in bad.stderr and bad.stderr.startswith(b"app: error:")


def test_a_fast_exit_leaves_the_store_committed(tmp_path):
    """`runners remove` writes SQLite and exits: the row is gone for the next process."""
    home = tmp_path / "home"
    _stored_job(home, 1)
    from lanpool.app.store import Store

    store = Store(home / "lanpool.db")
    try:
        store.upsert_runner("gone", "127.0.0.1", 1, "ssh-ed25519 AAAA", trusted=True)
    finally:
        store.close()
    out = _app(home, "headless", "runners", "remove", "gone")
    assert out.returncode == 0, out.stderr
    store = Store(home / "lanpool.db")
    try:
        assert "gone" not in [r["name"] for r in store.runners()]
    finally:
        store.close()


def test_the_tcp_connect_before_the_ssh_stack_says_what_failed():
    """app/runners/reach.py: a listener gives a connected socket (the session runs over it);
    a port where nothing listens is one RunnerError worded as before ("Connection refused")."""
    import asyncio

    from lanpool.app.errors import RunnerError
    from lanpool.app.runners.reach import open_socket

    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        sock = asyncio.run(open_socket("127.0.0.1", port, 5))
        try:
            assert sock.getpeername() == ("127.0.0.1", port)
        finally:
            sock.close()
    with pytest.raises(RunnerError, match=r"cannot reach runner 127\.0\.0\.1:\d+: Connection refused; is"):
        asyncio.run(open_socket("127.0.0.1", port, 5))


def test_a_paused_import_freezes_once_and_leaves_the_gc_as_it_was(tmp_path):
    """app/startup/import_paused.py: the first import runs with the GC off and freezes what it made; a
    second call (a long-running TUI probing again) freezes nothing more, and the GC's on/off
    state is what it was before, also when the import fails."""
    (tmp_path / "lp_big_mod.py").write_text("TABLE = [[i] for i in range(20000)]\n")
    (tmp_path / "lp_bad_mod.py").write_text("raise ValueError('broken on purpose')\n")
    code = textwrap.dedent(
        f"""
        import gc, json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from lanpool.app.startup.import_paused import import_paused
        seen = []
        gc.callbacks.append(lambda phase, info: seen.append(info["generation"]) if phase == "start" else None)
        before = gc.get_freeze_count()
        mod = import_paused("lp_big_mod")
        during = len(seen)
        first = gc.get_freeze_count()
        again = import_paused("lp_big_mod") is mod
        second = gc.get_freeze_count()
        gc.disable()
        try:
            import_paused("lp_bad_mod")
        except ValueError:
            pass
        off_after_failure = not gc.isenabled()
        print(json.dumps({{"collections": during, "froze": first > before, "same": again,
                           "froze_again": second != first, "off_kept": off_after_failure}}))
        """
    )
    got = _probe(code, home=tmp_path)
    assert got == {"collections": 0, "froze": True, "same": True, "froze_again": False, "off_kept": True}
