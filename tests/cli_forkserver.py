"""The `cli` fixture's processes, forked from one that has already imported the `app` CLI.

Each `cli(...)` call of the integration tier is a real `app` process (its own pid, argv, cwd,
environment, file descriptors, exit code), running the same `lanpool.app.cli.main.main()` as
`python -m lanpool.app.cli.main`; only the interpreter start and the imports are paid once per
worker instead of per call (~0.2 s of CPU each, thousands of calls a run). What this cannot be:
a test of the CLI's own start-up or import budget (tests/integration/test_import_budget.py,
tests/system/test_wheel.py start real interpreters), or a process a test signals while it runs
(`cli.popen`: a plain subprocess).

The server (`python -m tests.cli_forkserver SOCKET`) is single-threaded: it takes a request on a
SOCK_SEQPACKET unix socket (one message: argv, cwd, environment; with it the caller's stdin,
stdout and stderr descriptors), forks, answers the child's pid, and later its exit code. It ends
with the process that started it. Nothing here is imported by the product.
"""

import atexit
import gc
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

_PACK = struct.Struct("!q")
_MAX_REQUEST = 1 << 20
# What verbs import lazily: loaded once here so no call pays for them (none starts a thread).
_PRELOAD = (
    "lanpool.app.cli.main",
    "lanpool.app.cli.headless",
    "lanpool.app.controller",
    "lanpool.app.runners.client",
    "lanpool.app.runners.adverts",
    "lanpool.app.runners.discovery",
    "lanpool.app.workflows.entry",
    "lanpool.agent.cli",
    "lanpool.agent.daemon",
    "docker",
    "asyncssh",
    "msgpack",
    "yaml",
    "zeroconf",
)


def serve(path: str) -> None:
    import importlib

    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional part this machine lacks: its verbs import it (and fail) as usual
            pass
    from lanpool.app.cli import main as cli_main

    gc.collect()
    gc.freeze()  # what is imported stays shared with the children: no collection touches its pages
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(128)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    print("ready", flush=True)
    while os.getppid() == parent:
        for key, _ in sel.select(timeout=1.0):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                try:
                    msg, fds, _, _ = socket.recv_fds(conn, _MAX_REQUEST, 3)
                    request = json.loads(msg)
                except (OSError, ValueError):
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    _child(request, fds, cli_main.main)  # never returns
                for fd in fds:
                    os.close(fd)
                conn.sendall(_PACK.pack(pid))
                children[pid] = conn
            else:
                while True:
                    try:
                        if not os.read(wake_r, 4096):
                            break
                    except BlockingIOError:
                        break
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(_PACK.pack(os.waitstatus_to_exitcode(status)))
                except OSError:
                    pass  # the caller gave up (its timeout): nobody to tell
                conn.close()


def _child(request: dict, fds: list[int], main) -> None:
    """In the forked child: become the `app` process the request describes, run it, exit."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # as subprocess's close_fds: the server's sockets too
        if request.get("setsid"):
            os.setsid()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        result = main()  # a headless verb ends the process itself (lanpool.app.cli.main._exit_now)
        code = result if isinstance(result, int) else 0
        # The rest of an interpreter's exit (an agent's verb returns): its threads, then atexit.
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # as the interpreter would: the traceback on stderr, exit 1
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


class ForkedProcess:
    """What tests use of a subprocess.Popen, for a process the server forked: its pid, signals,
    poll/wait and returncode (the server says the exit status on the request's socket)."""

    def __init__(self, sock: socket.socket, pid: int, args: list[str]) -> None:
        self._sock, self.pid, self.args = sock, pid, args
        self.returncode: int | None = None

    def _take(self, reply: bytes) -> int:
        # The server gone first (it ends with its pytest worker): as a process killed.
        self.returncode = _PACK.unpack(reply)[0] if len(reply) == _PACK.size else -signal.SIGKILL
        self._sock.close()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            self._sock.setblocking(False)
            try:
                reply = self._sock.recv(_PACK.size)
            except BlockingIOError:
                return None
            finally:
                if self.returncode is None and self._sock.fileno() != -1:
                    self._sock.setblocking(True)
            self._take(reply)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._sock.settimeout(timeout)
            try:
                reply = self._sock.recv(_PACK.size)
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
            self._take(reply)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class CliForkServer:
    """The caller's side: `spawn` is subprocess.Popen for `app ARGS`, `run` is
    subprocess.run(capture_output=True, text=True) for it."""

    def __init__(self, directory: Path, env: dict[str, str], argv0: str) -> None:
        self.path = str(directory / "cli.sock")
        self.argv0 = argv0
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_forkserver", self.path],
            env=env,
            cwd=str(Path(__file__).resolve().parents[1]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.proc.kill()
            raise RuntimeError(f"the cli fork server did not start (said {line!r}, exit {self.proc.wait()})")

    def spawn(
        self,
        args: list[str],
        cwd: str | None,
        env: dict[str, str],
        fds: tuple[int, int, int],
        new_session: bool = False,
    ) -> ForkedProcess:
        """`app ARGS` with `fds` as its stdin, stdout and stderr (the caller keeps its own copies)."""
        argv = [self.argv0, *args]
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(self.path)
            request = {"argv": argv, "cwd": cwd or os.getcwd(), "env": env, "setsid": new_session}
            socket.send_fds(sock, [json.dumps(request).encode()], list(fds))
            pid = _PACK.unpack(sock.recv(_PACK.size))[0]
        except BaseException:
            sock.close()
            raise
        return ForkedProcess(sock, pid, argv)

    def run(self, args: list[str], cwd: str | None, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        stdin = os.open(os.devnull, os.O_RDONLY)
        try:
            proc = self.spawn(args, cwd, env, (stdin, out_w, err_w))
        finally:
            for fd in (stdin, out_w, err_w):
                os.close(fd)
        try:
            out, err = _read_both(out_r, err_r, time.monotonic() + timeout)
            if out is None:
                proc.kill()
                proc.wait(10)
                raise subprocess.TimeoutExpired(proc.args, timeout)
            code = proc.wait(max(10.0, timeout))
        finally:
            os.close(out_r)
            os.close(err_r)
        return subprocess.CompletedProcess(proc.args, code, out, err)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        Path(self.path).unlink(missing_ok=True)


def _read_both(out_r: int, err_r: int, deadline: float) -> tuple[str | None, str]:
    """Both pipes to their end (every writer closed: the process and what it left behind, as
    subprocess.run waits for), or (None, ...) at the deadline."""
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    sel = selectors.DefaultSelector()
    for fd in chunks:
        sel.register(fd, selectors.EVENT_READ)
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return None, ""
            for key, _ in sel.select(timeout=left):
                data = os.read(key.fd, 1 << 16)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
    finally:
        sel.close()

    def text(fd: int) -> str:  # as subprocess's text mode: universal newlines
        return b"".join(chunks[fd]).decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")

    return text(out_r), text(err_r)


if __name__ == "__main__":
    serve(sys.argv[1])
