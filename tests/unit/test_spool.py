"""The job log spool: sequence numbers, resumable reads, and crash repair."""

from pathlib import Path

import pytest

from lanpool.agent.workspace.spool import LogSpool

# (stream, lines) appended in this order; seqs count lines across streams.
RECORDS = [
    ("out", b"step 1\nstep 2\nstep 3\n"),
    ("err", b"warning: slow\n"),
    ("sys", b"[lanpool] job started\n"),
    ("out", b"step 4\nstep 5\n"),
    ("err", b"Traceback\n  File x\nError: boom\n"),
    ("out", b"done\n"),
]


def _expected_lines() -> list[tuple[int, str, bytes]]:
    """(seq, stream, line) for every line of RECORDS."""
    out = []
    seq = 0
    for stream, data in RECORDS:
        for line in data.splitlines(keepends=True):
            out.append((seq, stream, line))
            seq += 1
    return out


EXPECTED = _expected_lines()


def _lines(records) -> list[tuple[int, str, bytes]]:
    """Flatten spool records into (seq, stream, line), checking each record's seq."""
    out = []
    for rec in records:
        assert rec.data.endswith(b"\n")
        assert rec.n_lines == rec.data.count(b"\n")  # read takes it from the headers: they must agree
        for i, line in enumerate(rec.data.splitlines(keepends=True)):
            out.append((rec.seq + i, rec.stream, line))
    return out


@pytest.fixture
def spool(tmp_path: Path):
    s = LogSpool(tmp_path / "log.spool")
    for stream, data in RECORDS:
        s.append(stream, data)
    yield s
    s.close()


def test_append_returns_the_first_seq_and_counts_lines(tmp_path: Path):
    s = LogSpool(tmp_path / "log.spool")
    assert s.next_seq == 0
    firsts = [s.append(stream, data) for stream, data in RECORDS]
    assert firsts == [0, 3, 4, 5, 7, 10]
    assert s.next_seq == len(EXPECTED) == 11
    s.close()


@pytest.mark.parametrize("from_seq", range(len(EXPECTED)))
def test_read_from_every_seq(spool, from_seq):
    got = _lines(spool.read(from_seq))
    assert got == EXPECTED[from_seq:]


@pytest.mark.parametrize("from_seq", range(6))
def test_merged_records_count_their_lines_from_any_seq(tmp_path: Path, from_seq):
    s = LogSpool(tmp_path / "log.spool")
    s.append("out", b"a\nb\n")
    s.append("out", b"c\n")  # same stream, within MERGE_S: one record comes back
    s.append("out", b"d\ne\nf\n")
    (rec,) = s.read(from_seq)
    assert (rec.seq, rec.n_lines) == (from_seq, 6 - from_seq)
    assert rec.data == b"a\nb\nc\nd\ne\nf\n"[2 * from_seq :]
    s.close()


def test_read_cuts_the_first_record_at_from_seq(spool):
    first = spool.read(1)[0]
    assert first.seq == 1 and first.stream == "out" and first.data == b"step 2\nstep 3\n"
    assert first.n_lines == 2


def test_read_at_or_past_the_end_is_empty(spool):
    assert spool.read(spool.next_seq) == []
    assert spool.read(spool.next_seq + 100) == []


def test_read_of_an_empty_spool_is_empty(tmp_path: Path):
    s = LogSpool(tmp_path / "empty.spool")
    assert s.read(0) == []
    s.close()


def test_max_bytes_limits_the_batch(spool):
    batch = spool.read(0, max_bytes=1)
    assert len(batch) == 1  # at least one record, so a reader always makes progress
    assert _lines(batch) == EXPECTED[:3]
    # about max_bytes: stops at the first record that reaches the limit
    limit = len(RECORDS[0][1]) + 1
    batch = spool.read(0, max_bytes=limit)
    assert [r.seq for r in batch] == [0, 3]
    # reading in batches from where the last one ended covers everything once
    seen = []
    seq = 0
    while True:
        batch = spool.read(seq, max_bytes=20)
        if not batch:
            break
        assert sum(len(r.data) for r in batch[:-1]) < 20
        seen += _lines(batch)
        seq = seen[-1][0] + 1
    assert seen == EXPECTED


def test_reopening_rebuilds_the_index(spool):
    path = spool.path
    spool.close()
    for writable in (True, False):
        again = LogSpool(path, writable=writable)
        assert again.next_seq == len(EXPECTED)
        assert again.size == path.stat().st_size
        for seq in range(len(EXPECTED)):
            assert _lines(again.read(seq)) == EXPECTED[seq:]
        again.close()


def test_appends_after_reopening_continue_the_numbering(spool):
    path = spool.path
    spool.close()
    again = LogSpool(path)
    assert again.append("out", b"more\n") == len(EXPECTED)
    assert _lines(again.read(len(EXPECTED) - 1)) == [EXPECTED[-1], (len(EXPECTED), "out", b"more\n")]
    again.close()


@pytest.mark.parametrize("cut", [1, 5, 10, 17])
def test_torn_last_record_is_dropped_and_appends_continue(spool, cut):
    path = spool.path
    spool.close()
    size = path.stat().st_size
    last_len = len(RECORDS[-1][1]) + 25  # header (8 + 4 + 1 + 4 + 8 bytes) + data
    with open(path, "r+b") as fh:
        fh.truncate(size - cut)
    again = LogSpool(path, writable=True)
    assert path.stat().st_size == size - last_len  # torn bytes removed
    assert again.next_seq == len(EXPECTED) - 1
    assert _lines(again.read(0)) == EXPECTED[:-1]
    assert again.append("sys", b"resumed\nafter crash\n") == len(EXPECTED) - 1
    again.close()
    third = LogSpool(path, writable=False)
    assert _lines(third.read(0)) == EXPECTED[:-1] + [
        (len(EXPECTED) - 1, "sys", b"resumed\n"),
        (len(EXPECTED), "sys", b"after crash\n"),
    ]
    third.close()


def test_read_only_open_does_not_modify_the_file(spool):
    path = spool.path
    spool.close()
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size - 3)
    before = path.read_bytes()
    ro = LogSpool(path, writable=False)
    assert ro.next_seq == len(EXPECTED) - 1
    assert _lines(ro.read(0)) == EXPECTED[:-1]
    ro.close()
    assert path.read_bytes() == before


def test_read_only_open_of_a_missing_file_creates_nothing(tmp_path: Path):
    path = tmp_path / "nope.spool"
    ro = LogSpool(path, writable=False)
    assert ro.next_seq == 0 and ro.read(0) == []
    ro.close()
    assert not path.exists()


def test_append_without_a_newline_is_a_no_op(spool):
    size = spool.path.stat().st_size
    assert spool.append("out", b"") == len(EXPECTED)
    assert spool.append("out", b"no newline") == len(EXPECTED)
    assert spool.next_seq == len(EXPECTED)
    assert spool.path.stat().st_size == size
    assert _lines(spool.read(0)) == EXPECTED


def test_unknown_stream_is_refused(tmp_path: Path):
    s = LogSpool(tmp_path / "log.spool")
    with pytest.raises(KeyError):
        s.append("stdout", b"x\n")
    assert s.next_seq == 0
    s.close()


def test_a_reader_in_another_thread_sees_every_line_once_while_records_are_appended(tmp_path: Path):
    """A reader in a thread of its own while the agent's loop appends (LogSpool.read says why it
    is safe): each read ends on a whole record, seqs are contiguous, none is lost."""
    import sys
    import threading

    spool = LogSpool(tmp_path / "log.spool")
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: between append's steps too
    total = 20_000
    got: list[bytes] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        cursor = 0
        try:
            while cursor < total:
                records = spool.read(cursor, 4096)
                for rec in records:
                    assert rec.seq == cursor, (rec.seq, cursor)
                    got.extend(rec.data.splitlines())
                    cursor = rec.seq + rec.n_lines
                if not records and done.is_set() and cursor >= spool.next_seq:
                    break
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    for i in range(0, total, 2):
        spool.append("out" if i % 3 else "err", b"line %d\nline %d\n" % (i, i + 1))
    done.set()
    thread.join(60)
    sys.setswitchinterval(interval)
    spool.close()
    assert not errors, errors[0]
    assert got == [b"line %d" % i for i in range(total)]


def test_a_read_only_spool_is_indexed_on_first_use_once(spool, monkeypatch):
    """An agent starting opens every ended job's spool: none is read until a controller asks."""
    calls = []
    load = LogSpool._load_index
    monkeypatch.setattr(LogSpool, "_load_index", lambda self, repair: calls.append(repair) or load(self, repair))
    ro = LogSpool(spool.path, writable=False)
    assert calls == []
    assert ro.next_seq == len(EXPECTED)
    assert _lines(ro.read(0)) == EXPECTED
    assert ro.size == spool.size
    assert calls == [False]
    with pytest.raises(AttributeError):
        ro.no_such_attribute  # noqa: B018


def test_first_use_from_two_threads_indexes_once(spool, monkeypatch):
    import threading

    calls = []
    load = LogSpool._load_index

    def slow_load(self, repair):
        calls.append(repair)
        threading.Event().wait(0.2)  # the other thread arrives meanwhile
        load(self, repair)

    monkeypatch.setattr(LogSpool, "_load_index", slow_load)
    ro = LogSpool(spool.path, writable=False)
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(_lines(ro.read(0)))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert calls == [False]
    assert got == [EXPECTED, EXPECTED]


def test_indexing_a_big_spool_reads_its_headers_not_its_lines(tmp_path: Path):
    """Memory: a 64 MiB spool is indexed without holding it (it was read whole before)."""
    import tracemalloc

    path = tmp_path / "big.spool"
    w = LogSpool(path)
    block = b"x" * 99 + b"\n"
    for _ in range(256):
        w.append("out", block * 2621)  # ~256 KiB a record
    w.close()
    tracemalloc.start()
    try:
        ro = LogSpool(path, writable=False)
        assert ro.next_seq == 256 * 2621
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert path.stat().st_size > 60 * 1024 * 1024
    assert peak < 1024 * 1024
