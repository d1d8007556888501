"""protocol/runtime/event_loop.py: uvloop where installed, asyncio's loop when asked for or missing.\nThe PTY shells and port forwards on both loops: tests/integration/test_job_shell.py, tests/integration/test_port_forward.py.
The in-process part (unit); the rest: tests/integration/test_event_loop.py."""

import asyncio
import builtins
import sys

import pytest

from lanpool.protocol.runtime import event_loop


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_uvloop_by_default_and_asyncio_when_asked(monkeypatch):
    pytest.importorskip("uvloop")
    monkeypatch.delenv(event_loop.ENV, raising=False)
    assert event_loop.run(_loop_module()).startswith("uvloop")
    monkeypatch.setenv(event_loop.ENV, "asyncio")
    assert event_loop.run(_loop_module()).startswith("asyncio")


def test_asyncio_when_uvloop_is_missing(monkeypatch, caplog):
    real_import = builtins.__import__

    def no_uvloop(name, *args, **kw):
        if name == "uvloop":
            raise ImportError("no uvloop here")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_uvloop)
    monkeypatch.delitem(sys.modules, "uvloop", raising=False)
    monkeypatch.setenv(event_loop.ENV, "uvloop")
    assert event_loop.run(_loop_module()).startswith("asyncio")
    assert "uvloop is not installed" in caplog.text


def test_a_loop_not_preferred_is_asyncio_unless_asked(monkeypatch):
    pytest.importorskip("uvloop")
    monkeypatch.delenv(event_loop.ENV, raising=False)
    assert event_loop.run(_loop_module(), prefer_uvloop=False).startswith("asyncio")
    monkeypatch.setenv(event_loop.ENV, "uvloop")
    assert event_loop.run(_loop_module(), prefer_uvloop=False).startswith("uvloop")
