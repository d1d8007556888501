"""Transactions on the store's connection.

The connection is opened in autocommit mode (isolation_level=None), where
`with conn:` starts no transaction: each statement would commit on its own, so
a failure half-way leaves half the writes behind. `atomic` starts one.
"""

import contextlib
import sqlite3
from collections.abc import Iterator


@contextlib.contextmanager
def atomic(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any error; joins a transaction already open.

    IMMEDIATE takes the write lock up front, so a read-then-write block cannot
    fail with SQLITE_BUSY half-way when another process wrote in between.
    """
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    if conn.in_transaction:
        conn.execute("COMMIT")
