"""Ending a helper command (pip, venv) that the agent reads from: killed with its group, then
reaped without a hang."""

import asyncio
import contextlib
import os
import signal

_DRAIN_S = 10.0


async def kill_and_reap(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL `proc`'s process group (it was started with start_new_session), read its stdout to
    the end, then wait for it. The read is needed: a pipe whose reading asyncio paused (its buffer
    full: the helper wrote on after the reader stopped) never sees its EOF, and wait() waits for
    that too (found in CI under load: a 300 s hang). Bounded: the writers are dead, the pipe holds
    64 KiB; one that left the group and holds the pipe is given _DRAIN_S."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.stdout is not None:
        with contextlib.suppress(TimeoutError, ValueError, OSError):
            async with asyncio.timeout(_DRAIN_S):
                while await proc.stdout.read(1 << 16):
                    pass
    await proc.wait()
