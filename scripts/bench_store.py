"""The log store alone, for scripts/bench: a flood's chunks through Store + LogBatch in one
process, with no SSH, no agent and no job sharing the CPU.

End to end, a flood's rate is set by three processes sharing the machine's cores (the job,
the agent, the controller's SSH decoding); this figure is the part SQLite and the follower's
batching take, so a change to the table or the commit cadence shows here even on a busy
machine. Chunks are as the agent sends them (~300 lines of 100 bytes), added a few at a time
as SSH batches bring them, and the time runs to the store's close (its WAL checkpoint).

    python scripts/bench_store.py [--lines N] [--repeat K]   (this checkout's app)
"""

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHUNK_LINES = 300  # what an agent's chunk of a fast job holds (scripts/bench: ~3,300 chunks per 1M lines)
BATCH_CHUNKS = 2  # chunks per SSH batch the follower adds at once


def store_alone(n: int, line_bytes: int = 100) -> dict:
    """Store `n` lines of `line_bytes` bytes as a follower does; wall and CPU seconds to the close."""
    from lanpool.app.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="lanpool-bench-store-"))
    try:
        path = tmp / "lanpool.db"
        store = Store(path)
        store.create_run("bench", "flood", str(tmp))
        store.create_job("job", "bench", "flood", {"name": "r", "host": "127.0.0.1", "port": 1}, {})
        line = b"0123456789" + b"x" * (line_bytes - 11) + b"\n"
        data = line * CHUNK_LINES  # the same bytes each chunk: SQLite's work does not depend on them
        rows = [("job", 0, seq, CHUNK_LINES, "out", data, 1.0) for seq in range(0, n, CHUNK_LINES)]
        t0, c0 = time.perf_counter(), time.process_time()
        batch = store.log_batch()
        for i in range(0, len(rows), BATCH_CHUNKS):
            batch.add(rows[i : i + BATCH_CHUNKS])
        batch.flush()
        store.close()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        again = Store(path)
        try:
            stored = again.log_line_count("job")
        finally:
            again.close()
        lines = len(rows) * CHUNK_LINES
        return {
            "lines": lines,
            "stored_lines": stored,
            "wall_s": wall,
            "cpu_s": cpu,
            "lines_per_s": lines / wall,
            "commits": batch.commits,
            "db_mib": path.stat().st_size / 2**20,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def store_alone_runs(n: int, repeat: int) -> dict:
    runs = [store_alone(n) for _ in range(repeat)]
    walls = sorted(r["wall_s"] for r in runs)
    return {
        "lines": runs[0]["lines"],
        "wall_s_median": statistics.median(walls),
        "lines_per_s_median": runs[0]["lines"] / statistics.median(walls),
        "cpu_s_median": statistics.median(r["cpu_s"] for r in runs),
        "lost_max": max(r["lines"] - r["stored_lines"] for r in runs),
        "runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(store_alone_runs(args.lines, args.repeat), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
