"""What jobs leave behind: their logs (stored as the chunks they arrive in) and the list of their artifacts."""

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from lanpool.app.store.log_batch import LogBatch
from lanpool.app.store.rows import ARTIFACTS_REFUSED, Table
from lanpool.app.store.transactions import atomic

if TYPE_CHECKING:
    from lanpool.app.store.metric_summaries import StoredSummary


class OutputRows(Table):
    def add_log_chunks(self, chunks: Iterable[tuple[Any, ...]]) -> None:
        """Store (job_id, node, seq, n_lines, stream, data[, at]) rows; a chunk seen twice is kept once.
        `at`: when the agent received the chunk's first line (0 or absent: not known, stored NULL)."""
        rows = [(*r[:6], (r[6] or None) if len(r) > 6 else None) for r in chunks]
        insert = "INSERT OR IGNORE INTO log_chunks (job_id, node, seq, n_lines, stream, data, at) VALUES (?, ?, ?, ?, ?, ?, ?)"
        with atomic(self.conn):
            self.conn.executemany(insert, (r for r in rows if r[4] != "met"))
            # Metrics one by one: only a chunk stored now (not one that came twice) joins the
            # job's summaries (app/store/metric_summaries.py), in this same transaction.
            new = [(r[0], r[1], r[2], r[5]) for r in rows if r[4] == "met" and self.conn.execute(insert, r).rowcount]
            if new:
                from lanpool.app.store.metric_summaries import fold_chunks  # (not on a verb that stores no metric)

                fold_chunks(self.conn, new)

    def metric_summaries(self, job_ids: Iterable[str]) -> "dict[str, dict[str, StoredSummary]]":
        """job id -> metric name -> the summary kept as its points arrived (app/store/metric_summaries.py)."""
        from lanpool.app.store.metric_summaries import read_summaries

        return read_summaries(self.conn, job_ids)

    def log_batch(self) -> LogBatch:
        """A follower's rows, stored a transaction every 0.25 s rather than one per batch
        (app/store/log_batch.py); its owner flushes it before recording a status and when done."""
        return LogBatch(self.add_log_chunks)

    def log_end(self, job_id: str, node: int = 0) -> int:
        """The seq after the last stored line: where a re-attach resumes."""
        # Lines are numbered without overlap, so the newest chunk ends the log: one seek
        # down the primary key, where MAX(seq + n_lines) read the whole log (120 ms at 500k lines).
        row = self.conn.execute(
            "SELECT seq + n_lines FROM log_chunks WHERE job_id = ? AND node = ? ORDER BY seq DESC LIMIT 1",
            (job_id, node),
        ).fetchone()
        return row[0] if row else 0

    def one_log_end(self, job_id: str, nodes: int) -> int:
        """Where the one log of a job run whole by a Slurm runner ends: its lines are spread over
        its `nodes` rows with that log's numbers (app/store/slurm_nodes.py), so the newest of any."""
        return max(self.log_end(job_id, k) for k in range(max(1, nodes)))

    def log_line_count(self, job_id: str) -> int:
        count: int = self.conn.execute(
            "SELECT COALESCE(SUM(n_lines), 0) FROM log_chunks WHERE job_id = ?", (job_id,)
        ).fetchone()[0]
        return count

    def log_chunks(self, job_id: str, from_seq: int = 0) -> Iterator[tuple[int, int, str, bytes]]:
        """(node, seq, stream, data) in order, from the chunk holding `from_seq`."""
        yield from self.conn.execute(
            "SELECT node, seq, stream, data FROM log_chunks WHERE job_id = ? AND seq + n_lines > ? ORDER BY node, seq",
            (job_id, from_seq),
        )

    def node_tail(
        self,
        job_id: str,
        node: int,
        before_seq: int | None,
        max_lines: int,
        streams: tuple[str, ...] = ("out", "err", "sys"),
    ) -> list[tuple[int, int, str, bytes, float | None]]:
        """The newest chunks of one node's log (before `before_seq`), holding at least
        `max_lines` lines, oldest first: (seq, n_lines, stream, data, at). Walks the primary
        key backwards, so the tail of a million-line log costs as much as a short one."""
        marks = ",".join("?" * len(streams))
        sql = (
            f"SELECT seq, n_lines, stream, data, at FROM log_chunks WHERE job_id = ? AND node = ? AND seq < ? "
            f"AND stream IN ({marks}) ORDER BY seq DESC"
        )
        out, lines = [], 0
        for row in self.conn.execute(sql, (job_id, node, before_seq if before_seq is not None else 1 << 62, *streams)):
            out.append(row)
            lines += row[1]
            if lines >= max_lines:
                break
        out.reverse()
        return out

    def timed_chunks(
        self, job_id: str, node: int, from_seq: int = 0, streams: tuple[str, ...] = ("out", "err", "sys")
    ) -> Iterator[tuple[int, str, bytes, float | None]]:
        """(seq, stream, data, at) of one node's chunks holding lines from `from_seq` on, in order."""
        marks = ",".join("?" * len(streams))
        yield from self.conn.execute(
            f"SELECT seq, stream, data, at FROM log_chunks WHERE job_id = ? AND node = ? AND seq + n_lines > ? "
            f"AND stream IN ({marks}) ORDER BY seq",
            (job_id, node, from_seq, *streams),
        )

    def stream_since(self, job_id: str, stream: str, after: dict[int, int]) -> list[tuple[int, int, int, bytes]]:
        """(node, seq, n_lines, data) of one stream's chunks newer than `after` (node -> seq)."""
        rows = []
        for node in self.log_nodes(job_id):
            # The stream index (migration 5), or SQLite takes the primary key and reads the job's
            # whole log (its chunks hold the bytes) to find a few metrics lines: 15-50 ms a call.
            rows += [
                (node, *r)
                for r in self.conn.execute(
                    "SELECT seq, n_lines, data FROM log_chunks INDEXED BY log_chunks_stream "
                    "WHERE job_id = ? AND node = ? AND seq > ? AND stream = ? "
                    "ORDER BY seq",
                    (job_id, node, after.get(node, -1), stream),
                )
            ]
        return rows

    def log_nodes(self, job_id: str) -> list[int]:
        """Nodes with log lines; one index seek per node, not a scan of the log."""
        nodes: list[int] = []
        after = -1
        while True:
            row = self.conn.execute(
                "SELECT MIN(node) FROM log_chunks WHERE job_id = ? AND node > ?", (job_id, after)
            ).fetchone()
            if row[0] is None:
                return nodes
            nodes.append(after := row[0])

    def set_artifacts(self, job_id: str, files: list[tuple[str, int]]) -> None:
        with atomic(self.conn):
            self.conn.execute("DELETE FROM artifacts WHERE job_id = ?", (job_id,))
            self.conn.executemany(
                "INSERT INTO artifacts (job_id, path, size) VALUES (?, ?, ?)", [(job_id, p, s) for p, s in files]
            )
            self.conn.execute("UPDATE jobs SET artifacts_pulled = 1 WHERE id = ?", (job_id,))

    def refuse_artifacts(self, job_id: str) -> None:
        """The job's artifacts came back and were refused (app/transfer/files.py): none
        are listed, and `artifacts_pulled` says so, so nothing asks for them again. The
        reason is recorded with the job's status."""
        with atomic(self.conn):
            self.conn.execute("DELETE FROM artifacts WHERE job_id = ?", (job_id,))
            self.conn.execute("UPDATE jobs SET artifacts_pulled = ? WHERE id = ?", (ARTIFACTS_REFUSED, job_id))

    def artifacts(self, job_id: str) -> list[tuple[str, int]]:
        return self.conn.execute(
            "SELECT path, size FROM artifacts WHERE job_id = ? ORDER BY path", (job_id,)
        ).fetchall()
