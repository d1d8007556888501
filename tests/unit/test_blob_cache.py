"""The runner's blob cache and staging, attacked frame by frame through a real agent.

Every PutBlob is untrusted: wrong content, gaps, size lies and oversized parts are
refused in one line and leave nothing behind; a SubmitJob.files list cannot write
outside its workspace or name a blob the runner does not have.
The in-process part (unit); the rest: tests/integration/test_blob_cache.py."""

import hashlib
import os
import time

from lanpool.agent.workspace.blobs import BlobCache


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _put(cache: BlobCache, data: bytes, age: float) -> str:
    sha = _sha(data)
    part = cache.begin(sha, len(data))
    assert cache.write(part, 0, len(data), data)
    os.utime(cache.path(sha), (time.time() - age, time.time() - age))
    return sha


def test_lru_evicts_the_least_recently_used_and_never_pinned(tmp_path):
    cache = BlobCache(tmp_path / "blobs", budget=2500)
    cache.create()
    old, mid = (_put(cache, bytes([i]) * 1000, age) for i, age in ((1, 300), (2, 200)))
    assert cache.has(old) and cache.has(mid)
    os.utime(cache.path(old), (time.time() - 300, time.time() - 300))
    os.utime(cache.path(mid), (time.time() - 200, time.time() - 200))
    cache.budget = 10**9
    new = _put(cache, b"\x03" * 1000, 100)
    cache.budget = 2500
    assert cache.has(old)  # a use: now the most recent
    removed, freed = cache.evict()
    assert (removed, freed) == (1, 1000)
    assert not cache.path(mid).exists() and cache.path(old).exists() and cache.path(new).exists()
    with cache.pinned([new, old]):
        assert cache.evict(0) == (0, 0)
    assert cache.evict(0) == (2, 2000)
    assert list(cache.root.iterdir()) == [cache.tmp]


def test_storing_blobs_keeps_the_cache_within_its_budget(tmp_path):
    cache = BlobCache(tmp_path / "blobs", budget=2500)
    cache.create()
    for i in range(5):
        _put(cache, bytes([i]) * 1000, 0)
    assert cache.usage() <= 2500
