"""Reading pip's dry-run report of a job's requirements, and the one line a large framework
download gets before pip starts it: sizes of local files and of HEAD requests on loopback,
what is worth saying, and a report or a pip that misbehaves. No network beyond 127.0.0.1."""

import asyncio
import http.server
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lanpool.agent.python import pip_report
from lanpool.agent.python.pip_report import Planned, ReportError, forecast, read_report, size_of


def planned(name: str, version: str, url: str = "", requested: bool = False, requires: tuple[str, ...] = ()):
    return Planned(name, version, url, requested, requires)


def test_only_a_pip_with_report_is_asked():
    assert pip_report.supports_report("22.2") and pip_report.supports_report("23.2.1")
    assert pip_report.supports_report("24.0") and pip_report.supports_report("100.1")
    assert not pip_report.supports_report("22.1.2") and not pip_report.supports_report("9.0.3")
    assert not pip_report.supports_report("") and not pip_report.supports_report("dev")


def test_the_report_is_read_checked_and_bounded():
    report = {
        "version": "1",
        "install": [
            {
                "metadata": {"name": "Lanpool_Vision", "version": "9.0", "requires_dist": ["torch>2 ; extra == 'x'"]},
                "download_info": {"url": "file:///w/lanpool_vision-9.0-py3-none-any.whl"},
                "requested": True,
            },
            {"metadata": {"name": "torch", "version": "2.5.1"}, "download_info": {"url": 7}},
            {"metadata": {"name": "a" * 101, "version": "1"}},
            {"metadata": {"name": "torch\x1b[2J", "version": "1"}},
            {"metadata": {"name": "torch", "version": "1; rm -rf /"}},
            {"metadata": {"name": "-torch", "version": "1"}},
            {"metadata": {"name": "jax", "version": 1}},
            "torch",
        ],
    }
    got = read_report(json.dumps(report).encode())
    assert got == [
        planned("lanpool-vision", "9.0", "file:///w/lanpool_vision-9.0-py3-none-any.whl", True, ("torch",)),
        planned("torch", "2.5.1"),
    ]
    for bad in (b"", b"null", b"{}", b'{"install": {}}', b"\xff\xfe", b"[" * 200_000):
        with pytest.raises(ReportError):
            read_report(bad)
    with pytest.raises(ReportError):
        read_report(b" " * (pip_report.MAX_REPORT + 1))


def test_a_file_size_is_read_only_for_a_plain_file_anyone_may_read(tmp_path: Path):
    wheel = tmp_path / "torch 2.whl"
    wheel.write_bytes(bytes(12345))
    wheel.chmod(0o644)
    assert size_of(wheel.as_uri()) == 12345  # percent-encoded, as pip writes it
    wheel.chmod(0o600)  # as the agent's keys are: a forged report learns nothing of them
    assert size_of(wheel.as_uri()) is None
    assert size_of((tmp_path / "gone.whl").as_uri()) is None
    assert size_of(tmp_path.as_uri()) is None  # a directory (a local project)
    for url in ("", "ftp://127.0.0.1/x.whl", "data:,x", "http://", "git+https://127.0.0.1/x", "file://\0/x"):
        assert size_of(url) is None


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


def run_forecast(items: list[Planned], base: dict[str, str], hold_base: bool = False) -> str | None:
    return asyncio.run(forecast(items, base, hold_base))


def _wheel(tmp_path: Path, name: str, size: int) -> str:
    path = tmp_path / name
    with open(path, "wb") as f:
        f.truncate(size)  # sparse: the size without the disk
    path.chmod(0o644)
    return path.as_uri()


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


def test_only_a_large_or_a_second_framework_is_worth_a_line(tmp_path: Path):
    assert run_forecast([planned("numpy", "2.1.0", _wheel(tmp_path, "np.whl", 900_000_000))], {}) is None
    small_tf = planned("tensorflow", "2.17.0", _wheel(tmp_path, "tf-small.whl", 5_000_000))
    assert run_forecast([small_tf], {"torch": "2.4.0"}) is None
    big_tf = planned("tensorflow", "2.17.0", _wheel(tmp_path, "tf.whl", 600_000_000), requested=True)
    assert run_forecast([big_tf], {"torch": "2.4.0"}) == "would install tensorflow 2.17.0 (600.0 MB)"
    lightning = planned("lightning", "2.5.0", _wheel(tmp_path, "l.whl", 800_000))
    assert run_forecast([lightning], {}) is None  # small, and no copy in the base
    assert run_forecast([lightning], {"lightning": "2.4.0"}) == (
        "would install lightning 2.5.0 (800.0 kB) beside the base's lightning 2.4.0 "
        "(`hold_base: false` lets them change; pin lightning==2.4.0 to keep the base's)"
    )
    unknown = planned("torch", "2.5.1", "file:///nonexistent/torch.whl", requested=True)
    assert run_forecast([unknown], {"torch": "2.4.0"}, hold_base=True) == (
        "would install torch 2.5.1 (size unknown) beside the base's torch 2.4.0 (pin torch==2.4.0 to keep the base's)"
    )
    assert run_forecast([unknown], {}) is None  # no size, no copy: nothing worth saying


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
