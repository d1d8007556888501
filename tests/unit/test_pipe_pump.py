"""A process job's pipes (agent/executors/pipe_pump.py, line_cutter.py): every byte delivered once as whole
lines, in few large reads, with a runaway line cut and its memory bounded, through real pipes and a real agent.
The in-process part (unit); the rest: tests/integration/test_pipe_pump.py."""

import asyncio
import os
from pathlib import Path

from lanpool.agent.executors.line_cutter import MAX_LINE, whole_lines
from lanpool.agent.executors.pipe_pump import PIPE_BYTES, capacity, open_pipe, pump


def _pumped(chunks: list[bytes]) -> list[tuple[str, bytes]]:
    """What pump() delivers for `chunks` written to a pipe (before it starts, then the write end closed)."""
    got: list[tuple[str, bytes]] = []
    r, w = open_pipe()

    async def main() -> None:
        task = asyncio.create_task(pump(r, "out", lambda stream, data, cut=False: got.append((stream, data))))
        for chunk in chunks:
            view = memoryview(chunk)
            while view:  # the pipe may fill: write as it drains
                try:
                    view = view[os.write(w, view) :]
                except BlockingIOError:
                    await asyncio.sleep(0.001)
        os.close(w)
        await asyncio.wait_for(task, 30)

    os.set_blocking(w, False)
    asyncio.run(main())
    return got


def test_the_pipe_is_made_large_where_linux_allows_it():
    r, w = open_pipe()
    try:
        allowed = int(Path("/proc/sys/fs/pipe-max-size").read_text())  # root may go past it
        expected = PIPE_BYTES if os.geteuid() == 0 or allowed >= PIPE_BYTES else 64 * 1024
        assert capacity(r) == expected
    finally:
        os.close(r)
        os.close(w)


def test_what_the_pipe_holds_is_read_and_delivered_in_one_piece():
    lines = b"".join(b"%09d %s\n" % (i, b"x" * 89) for i in range(5000))  # 500 KB of whole lines
    got = _pumped([lines[i : i + 8192] for i in range(0, len(lines), 8192)])  # as Python's stdout writes them
    assert b"".join(d for _, d in got) == lines
    assert all(d.endswith(b"\n") for _, d in got)
    assert len(got) <= 4  # not one per 8 KiB write (61): the pipe held them all when the pump looked


def test_a_partial_last_line_gets_its_newline_and_stderr_keeps_its_stream():
    got = _pumped([b"one\ntw", b"o\nthree"])
    assert b"".join(d for _, d in got) == b"one\ntwo\nthree\n"
    assert {s for s, _ in got} == {"out"}


def test_a_runaway_line_is_cut_and_held_memory_stays_bounded():
    """Hostile: 10 MB without a newline, then a normal line."""
    got = _pumped([b"a" * 10_000_000, b"\nafter\n"])
    pieces = [d for _, d in got]
    assert max(len(p) for p in pieces) <= MAX_LINE + 1
    assert b"".join(pieces).replace(b"\n", b"") == b"a" * 10_000_000 + b"after"
    assert pieces[-1].endswith(b"after\n")


def test_whole_lines_matches_a_plain_split_for_any_read_boundaries():
    data = b"".join(b"L%d:" % i + b"y" * (i * 37 % 300) + b"\n" for i in range(2000)) + b"z" * 70_000 + b"\nend\n"
    for step in (1, 7, 4096, 65_536, 300_000):
        out: list[tuple[bytes, bool]] = []
        partial = b""
        for i in range(0, len(data), step):
            partial = whole_lines(
                partial, data[i : i + step], lambda d, cut, out=out: out.append((d, cut)), max_line=1000
            )
        assert partial == b""
        joined = b"".join(d + b"\n" if cut else d for d, cut in out)
        # The 70,000-byte line comes in cut slices of 1000; everything else exactly as written.
        assert joined.replace(b"\n", b"") == data.replace(b"\n", b"")
        assert all(len(d) <= 1000 for d, cut in out if cut)
        assert [d for d, cut in out if not cut][0].startswith(b"L0:")
