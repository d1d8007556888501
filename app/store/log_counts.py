"""Where a window of a log's newest lines starts, from the stored line counts alone.

The TUI's log view keeps the newest lines while it follows a job and drops the oldest;
paging back from there (g) needs the seq of the view's first line. Reading the window
again to learn it decoded ~20,000 lines on the event loop after a long follow; the
chunks' `n_lines` say it without reading their text.
"""

import sqlite3


def window_start(conn: sqlite3.Connection, job_id: str, node: int, n_lines: int, streams: tuple[str, ...]) -> int:
    """The seq of the first of the newest `n_lines` lines of one node's log in `streams`
    (0 when the log holds no more than that: its start). Numbered as the log view reads a
    window (app/views/overview.py: a chunk's lines are seq, seq + 1, ...). Walks the primary key
    backwards and stops there: a million-line log costs as much as a short one."""
    if n_lines <= 0:
        return 1 << 62  # an empty window starts after the newest line
    marks = ",".join("?" * len(streams))
    rows = conn.execute(
        f"SELECT seq, n_lines FROM log_chunks WHERE job_id = ? AND node = ? AND stream IN ({marks}) ORDER BY seq DESC",
        (job_id, node, *streams),
    )
    room = n_lines
    for seq, lines in rows:
        if lines >= room:
            return int(seq) + int(lines) - room
        room -= int(lines)
    return 0
