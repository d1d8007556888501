"""Reading pip's dry-run report of a job's requirements, and the one line a large framework
download gets before pip starts it: sizes of local files and of HEAD requests on loopback,
what is worth saying, and a report or a pip that misbehaves. No network beyond 127.0.0.1.
The in-process part (unit); the rest: tests/integration/test_pip_report.py."""

import asyncio
import json
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


def run_forecast(items: list[Planned], base: dict[str, str], hold_base: bool = False) -> str | None:
    return asyncio.run(forecast(items, base, hold_base))


def _wheel(tmp_path: Path, name: str, size: int) -> str:
    path = tmp_path / name
    with open(path, "wb") as f:
        f.truncate(size)  # sparse: the size without the disk
    path.chmod(0o644)
    return path.as_uri()


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
