"""A job's declared port through the controller's forward (app/shell/ports.py, what
`app headless ports` and `run` open) and the agent's (agent/shell/ports.py): bytes intact
both ways on several connections at once, a declared port where nothing listens, the
forward cut when the job ends, an undeclared port refused (a pairing connection's refusal: tests/integration/test_job_shell.py). A real
agent on loopback, on both event loops."""

import asyncio
import hashlib
import os

from lanpool.app.shell.ports import forward_local
from lanpool.protocol import SubmitJob
from lanpool.protocol.runtime import event_loop
from tests.integration.test_job_shell import _connect, _free_port, loop_name  # noqa: F401 (a fixture)
from tests.runner_jobs import open_session
from tests.system.test_docker_executor import _stop, wait_for_line

# A job's server: echoes every byte back (so the test checks both directions), several
# connections at once. It runs inside the job: a forward reaches only a port that a process of
# the job listens on (agent/shell/listeners.py).
ECHO = """
import asyncio, sys
async def echo(reader, writer):
    while data := await reader.read(1 << 20):
        writer.write(data)
        await writer.drain()
    writer.close()
async def main():
    server = await asyncio.start_server(echo, "127.0.0.1", int(sys.argv[1]))
    print("ready", flush=True)
    await server.serve_forever()
asyncio.run(main())
"""


def _echo_job(job_id: str, port: int, declared: list[int]) -> SubmitJob:
    return SubmitJob(
        job_id=job_id,
        run_name="r",
        workflow="w",
        commands=[f"cat > echo.py <<'EOF'\n{ECHO}\nEOF", f"python3 echo.py {port} &", "sleep 60"],
        ports=declared,
    )


async def _round_trip(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def send() -> None:
        for i in range(0, len(payload), 100_000):  # odd-sized writes: packets never line up with them
            writer.write(payload[i : i + 100_000])
            await writer.drain()
        writer.write_eof()

    sender = asyncio.create_task(send())
    got = bytearray()
    while data := await asyncio.wait_for(reader.read(1 << 20), 30):
        got += data
    await sender
    writer.close()
    return bytes(got)


def test_a_forward_carries_bytes_both_ways_and_is_cut_with_its_job(loop_name, agent):  # noqa: F811
    # Both loops, both ends: under uvloop the local side's first bytes (and an EOF) come before
    # its channel is open, and were lost until app/shell/ports.py kept them.
    async def check() -> None:
        port = _free_port()
        idle = _free_port()  # declared, but nothing listens there
        async with await open_session(agent) as session:
            # Its third declared port is the agent's own SSH server's: something else listens there.
            await session.submit(_echo_job("fwd", port, [port, idle, agent.port]))
        await asyncio.to_thread(wait_for_line, agent, "fwd", "ready")
        async with _connect(agent) as conn:
            forward = await forward_local(conn, port)
            payloads = [os.urandom(n) for n in (1, 3 << 20, (8 << 20) + 7)]
            results = await asyncio.gather(*(_round_trip(forward.get_port(), p) for p in payloads))
            for sent, got in zip(payloads, results, strict=True):
                assert hashlib.sha256(got).digest() == hashlib.sha256(sent).digest()

            # Nothing listens on a declared port: the local connection is closed, the forward lives on.
            nobody = await forward_local(conn, idle)
            reader, writer = await asyncio.open_connection("127.0.0.1", nobody.get_port())
            assert await asyncio.wait_for(reader.read(), 15) == b""
            writer.close()
            assert await _round_trip(forward.get_port(), b"still here") == b"still here"

            # A declared port that no process of the job listens on (the agent's own SSH server
            # holds it): refused by the agent, so the local connection only closes.
            refused = await forward_local(conn, agent.port)
            reader, writer = await asyncio.open_connection("127.0.0.1", refused.get_port())
            assert await asyncio.wait_for(reader.read(), 15) == b""
            writer.close()
            # An undeclared port: refused too.
            undeclared = await forward_local(conn, _free_port())
            reader, writer = await asyncio.open_connection("127.0.0.1", undeclared.get_port())
            assert await asyncio.wait_for(reader.read(), 15) == b""
            writer.close()

            # Held open across the job's end: the agent cuts it.
            reader, writer = await asyncio.open_connection("127.0.0.1", forward.get_port())
            writer.write(b"x")
            assert await asyncio.wait_for(reader.readexactly(1), 15) == b"x"
            await _stop(agent, "fwd", abort=True, grace_s=0)
            assert await asyncio.wait_for(reader.read(), 20) == b""
            writer.close()
            for f in (forward, nobody, refused, undeclared):
                f.close()

    event_loop.run(check())
    log = agent.log_path.read_text()
    assert f"event loop: {loop_name}" in log
    assert "nothing answers on its port" in log and "refused port forwarding (direct-tcpip)" in log
    assert f"job fwd declared port {agent.port}, but none of its processes listens there: refused" in log
