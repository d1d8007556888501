"""agent/python/helper_proc.py: a helper that wrote on after the agent stopped reading it is
killed and reaped without a hang (found in CI under load: pip_report's dry run waited 300 s on
a pipe whose reading asyncio had paused)."""

import asyncio

from lanpool.agent.python.helper_proc import kill_and_reap


def test_a_helper_that_filled_its_pipe_is_killed_and_reaped():
    async def scenario() -> int | None:
        proc = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            "head -c 4194304 /dev/zero; sleep 600",
            stdout=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        assert proc.stdout is not None
        await proc.stdout.read(1024)  # then nothing more: the reader's buffer fills, asyncio pauses the pipe
        await asyncio.sleep(1)
        async with asyncio.timeout(30):  # without the read to the end, wait() never returns
            await kill_and_reap(proc)
        return proc.returncode

    assert asyncio.run(scenario()) == -9
