"""Reading pip's dry-run report of a job's requirements, and the one line a large framework
download gets before pip starts it: sizes of local files and of HEAD requests on loopback,
what is worth saying, and a report or a pip that misbehaves. No network beyond 127.0.0.1.
The part with real agents and the CLI (integration); the rest: tests/unit/test_pip_report.py."""

import asyncio
import http.server
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lanpool.agent.python import pip_report
from lanpool.agent.python.pip_report import ReportError, size_of
from tests.unit.test_pip_report import _wheel, planned, run_forecast


class _Index(http.server.BaseHTTPRequestHandler):
    gets: list[str] = []

    def do_HEAD(self) -> None:
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/torch.whl")
        elif self.path == "/away":
            self.send_response(302)
            self.send_header("Location", "file:///etc/passwd")
        elif self.path == "/torch.whl":
            self.send_response(200)
            self.send_header("Content-Length", "5300000000")
        elif self.path == "/odd":
            self.send_response(200)
            self.send_header("Content-Length", "-1")
        elif self.path == "/slow":
            threading.Event().wait(pip_report.HEAD_TIMEOUT_S + 2)
            return
        else:
            self.send_response(404)
        self.end_headers()

    def do_GET(self) -> None:
        self.gets.append(self.path)  # a size must never cost the download itself
        self.send_response(500)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def index() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Index.gets = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_index_download_size_is_its_head_content_length(index: str):
    assert size_of(index + "/torch.whl#sha256=abc") == 5_300_000_000
    assert size_of(index + "/moved") == 5_300_000_000  # a redirect stays a HEAD
    for path in ("/away", "/odd", "/missing"):
        assert size_of(index + path) is None
    assert _Index.gets == []
    sizes = pip_report.sizes_of([index + "/torch.whl", index + "/missing", index + "/torch.whl"])
    assert sizes == [5_300_000_000, None, 5_300_000_000]


def test_a_slow_index_costs_a_bounded_wait(index: str, monkeypatch):
    monkeypatch.setattr(pip_report, "SIZES_DEADLINE_S", 1.0)
    assert pip_report.sizes_of([index + "/slow"] * 20) == [None] * 20


def test_a_second_torch_and_its_cuda_are_said_with_their_size(tmp_path: Path):
    items = [
        planned("torchvision", "0.20.1", _wheel(tmp_path, "tv.whl", 7_000_000), True, ("torch", "numpy")),
        planned("torch", "2.5.1", _wheel(tmp_path, "torch.whl", 900_000_000), requires=("nvidia-cudnn-cu12",)),
        planned("numpy", "2.1.0", _wheel(tmp_path, "numpy.whl", 16_000_000)),
    ]
    items += [planned(f"nvidia-lib{i}-cu12", "12.4", _wheel(tmp_path, f"n{i}.whl", 200_000_000)) for i in range(19)]
    items.append(planned("triton", "3.1.0", "https://0.0.0.0:0/triton.whl"))  # not answerable: unknown
    base = {"torch": "2.4.0", "torchvision": "0.19.0", "numpy": "1.26.4"}
    assert run_forecast(items, base) == (
        "would install torchvision 0.20.1, torch 2.5.1 and 20 CUDA wheels (4.7 GB, 1 size unknown) beside the base's "
        "torchvision 0.19.0 and torch 2.4.0 (`hold_base: false` lets them change; "
        "pin torchvision to a release for torch 2.4.0 to keep the base's)"
    )
    held = run_forecast(items, base, hold_base=True)
    assert held is not None and "hold_base" not in held


def test_a_dry_run_that_misbehaves_is_stopped(tmp_path: Path, monkeypatch):
    """pip's stdout is bounded and so is its time; either way it is killed, group and all."""
    monkeypatch.setattr(pip_report, "MAX_REPORT", 1000)
    flood = [sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 4096)"]
    with pytest.raises(ReportError, match="over"):
        asyncio.run(pip_report.dry_run(flood, str(tmp_path), dict(os.environ), 60))
    pid_file = tmp_path / "pid"
    hang = [
        sys.executable,
        "-c",
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)",
    ]
    with pytest.raises(TimeoutError):
        asyncio.run(pip_report.dry_run(hang, str(tmp_path), dict(os.environ), 2))
    assert not Path(f"/proc/{pid_file.read_text()}").exists()
    with pytest.raises(ReportError, match="exited 3"):
        asyncio.run(pip_report.dry_run([sys.executable, "-c", "raise SystemExit(3)"], str(tmp_path), {}, 60))
