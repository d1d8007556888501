"""A lanpool channel driven frame by frame, for tests that send what a real controller
never would (messages out of turn, forged keys) and read each reply as it comes."""

import asyncio

import asyncssh

from lanpool.protocol import FrameReader, decode_agent_message, encode_message


class RawChannel:
    def __init__(self, proc: asyncssh.SSHClientProcess) -> None:
        self.proc = proc
        self._reader = FrameReader()
        self._pending: list[bytes] = []

    def send(self, msg: object) -> None:
        self.proc.stdin.write(encode_message(msg))

    async def recv(self, timeout: float = 10):
        """The next message from the agent; fails the test if the channel closes first."""
        while not self._pending:
            data = await asyncio.wait_for(self.proc.stdout.read(65536), timeout)
            assert data, "the agent closed the channel"
            self._pending.extend(self._reader.feed(data))
        return decode_agent_message(self._pending.pop(0))
