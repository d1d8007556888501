"""The short path of `run`: the attach channel opened beside the submit, and the
command line of `run`/`plan` parsed by their parser alone, the same as by the whole one.
The part with real agents and the CLI (integration); the rest: tests/unit/test_dispatch_path.py."""

import asyncio

import pytest

from lanpool.app.errors import RunnerError
from lanpool.protocol import SubmitJob
from tests.runner_jobs import job_log, open_session, runner, wait_state  # noqa: F401  (runner: a fixture)


def test_the_attach_takes_the_channel_opened_beside_the_submit(runner):  # noqa: F811
    async def go():
        async with await open_session(runner) as s:
            s.open_channel_soon()
            s.open_channel_soon()  # once: a second call keeps the first channel
            spare = s._spare
            await s.submit(SubmitJob("spare1", "r", "w", ["echo via-the-spare"]))
            assert spare is not None and s._spare is spare
            await wait_state(s, "spare1", {"DONE"})  # its line is in the log (a sandbox takes a moment to start)
            assert s._spare is spare  # a status does not take it
            assert "via-the-spare" in await job_log(s, "spare1")
            assert s._spare is None  # taken by that attach
            assert "via-the-spare" in await job_log(s, "spare1")  # the next opens its own

    asyncio.run(go())


def test_an_unused_spare_channel_goes_with_the_session(runner):  # noqa: F811
    async def go():
        s = await open_session(runner)
        s.open_channel_soon()
        await asyncio.sleep(0)
        s.close()  # before it opened, or after: no error, nothing left running
        await s.conn.wait_closed()
        await asyncio.sleep(0.05)
        return s._spare

    assert asyncio.run(go()) is None


def test_a_spare_that_could_not_open_says_so_at_the_attach(runner):  # noqa: F811
    """Attack: a spare whose connection died is not taken as a channel: the attach fails as
    a fresh open would, with the runner named."""

    async def go():
        s = await open_session(runner)
        try:
            s.conn.close()
            await s.conn.wait_closed()
            s.open_channel_soon()
            with pytest.raises(RunnerError, match="refused the lanpool channel"):
                await job_log(s, "nope")
        finally:
            s.close()

    asyncio.run(go())
