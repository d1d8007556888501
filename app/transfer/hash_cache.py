"""File hashes kept between runs, so a new `run` process does not read an unchanged
project again (500 MB of code and data is ~0.3 s of sha256 per run otherwise).

A file's hash is trusted while its (device, inode, size, mtime, ctime) are the
same as when it was read, as git's index does. A file modified within the last
few seconds is not remembered: its mtime may not have moved yet for a write
still to come in the same clock tick (git's "racy" case). The cache is only a
cache: any problem with its file means hashing again, never an error.
"""

import logging
import os
import sqlite3
import time
from pathlib import Path

log = logging.getLogger(__name__)

_RACY_S = 3.0  # younger files are hashed each time
_MAX_ROWS = 1_000_000  # past this the table is emptied: a bound, not an LRU

StatKey = tuple[int, int, int, int, int]  # device, inode, size, mtime_ns, ctime_ns


def stat_key(st: os.stat_result) -> StatKey:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class HashCache:
    """Hashes by stat key, in memory and (when `path` is given) in a small SQLite file."""

    def __init__(self, path: Path | None = None) -> None:
        self._memory: dict[StatKey, str] = {}
        self._db: sqlite3.Connection | None = None
        self._new: list[tuple[int, int, int, int, int, str]] = []
        if path is not None:
            try:
                self._db = sqlite3.connect(path, timeout=2, isolation_level=None)
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS hashes (dev INTEGER, ino INTEGER, size INTEGER, mtime_ns INTEGER,"
                    " ctime_ns INTEGER, sha256 TEXT, PRIMARY KEY (dev, ino))"
                )
            except sqlite3.Error as exc:
                log.info("file hash cache %s unusable (%s): hashing every file", path, exc)
                self._db = None

    def get(self, key: StatKey) -> str | None:
        known = self._memory.get(key)
        if known is not None or self._db is None:
            return known
        try:
            row = self._db.execute(
                "SELECT sha256 FROM hashes WHERE dev=? AND ino=? AND size=? AND mtime_ns=? AND ctime_ns=?", key
            ).fetchone()
        except sqlite3.Error:
            return None
        if row is None:
            return None
        self._memory[key] = row[0]
        return str(row[0])

    def put(self, key: StatKey, sha256: str) -> None:
        if len(self._memory) >= _MAX_ROWS:
            self._memory.clear()
        self._memory[key] = sha256
        if self._db is not None and time.time() - key[3] / 1e9 > _RACY_S:
            self._new.append((*key, sha256))

    def save(self) -> None:
        """Write the hashes learnt since the last save (one transaction)."""
        if self._db is None or not self._new:
            return
        rows, self._new = self._new, []
        try:
            with self._db:
                self._db.execute("BEGIN")
                (count,) = self._db.execute("SELECT count(*) FROM hashes").fetchone()
                if count + len(rows) > _MAX_ROWS:
                    self._db.execute("DELETE FROM hashes")
                self._db.executemany("INSERT OR REPLACE INTO hashes VALUES (?, ?, ?, ?, ?, ?)", rows)
        except sqlite3.Error as exc:
            log.info("file hash cache not saved: %s", exc)
