"""Whole lines out of arbitrary reads of a job's output, with a bound on a line's length:
the process executor's pipes (agent/executors/pipe_pump.py) and a container's stdio files
(agent/executors/docker_stdio.py) cut the same way."""

from collections.abc import Callable

MAX_LINE = 64 * 1024  # a longer line is cut, so one runaway line cannot hold memory

Deliver = Callable[[bytes, bool], None]  # (whole lines, or one slice of a cut line; cut)


def whole_lines(partial: bytes, data: bytes, deliver: Deliver, max_line: int = MAX_LINE) -> bytes:
    """Deliver the whole lines of `partial` + `data`; returns what is left without its newline.

    A line longer than `max_line` goes in slices of `max_line` bytes, each with cut=True (the
    caller adds the newline); the whole lines between cuts go as one piece. `data` is walked in
    slices of `max_line`: every line after a slice's first newline lies inside the slice, so
    only the line joining the held partial can be too long.
    """
    whole: list[bytes] = []  # consecutive whole lines: delivered as one piece
    for i in range(0, len(data), max_line):
        buf = partial + data[i : i + max_line]
        nl = buf.find(b"\n")
        while nl > max_line or (nl < 0 and len(buf) > max_line):
            if whole:
                deliver(b"".join(whole), False)
                whole = []
            deliver(buf[:max_line], True)
            buf = buf[max_line:]
            nl = buf.find(b"\n")
        end = buf.rfind(b"\n") + 1
        if end:
            whole.append(buf[:end])
        partial = buf[end:]
    if whole:
        deliver(b"".join(whole), False)
    return partial
