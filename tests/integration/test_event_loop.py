"""protocol/runtime/event_loop.py: uvloop where installed, asyncio's loop when asked for or missing.\nThe PTY shells and port forwards on both loops: tests/integration/test_job_shell.py, tests/integration/test_port_forward.py.
The part with real agents and the CLI (integration); the rest: tests/unit/test_event_loop.py."""

import pytest

from lanpool.protocol.runtime import event_loop


def test_the_agent_runs_on_asyncio_unless_told(tmp_path, controller_home, monkeypatch):
    """`agent serve` stays on asyncio's loop by default (its job-output path measured slower on
    uvloop: protocol/runtime/event_loop.py); LANPOOL_EVENT_LOOP=uvloop puts it there (its PTY shells and
    port forwards work on both loops: tests/integration/test_job_shell.py, tests/integration/test_port_forward.py)."""
    pytest.importorskip("uvloop")
    from tests.harness import start_agent

    for choice, expected in (("", "asyncio"), ("uvloop", "uvloop")):
        monkeypatch.setenv(event_loop.ENV, choice)
        agent = start_agent(tmp_path / f"agent-{expected}", controller_home)
        agent.stop()
        assert f"event loop: {expected}" in agent.log_path.read_text()
