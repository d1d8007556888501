"""Staging a workspace out of the runner's blob cache: the hash check (each file's bytes
hashed as they are copied, agent/workspace/staging.py copy_hashing) against the copy in the
kernel without it (copy_fd, what staging did before), alternating in the same run so the
machine's load weighs on both alike. The blobs are in the page cache (a second run of the
same project), the case where the check costs most. Figures go to
docs/bench/bench-staging.json (scripts/bench-report).
    scripts/bench-staging [--mib N] [--files K] [--rounds R]"""

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lanpool.agent.workspace.blobs import BlobCache  # noqa: E402
from lanpool.agent.workspace.staging import build_workspace, copy_fd  # noqa: E402
from lanpool.protocol import FileEntry  # noqa: E402


def _blobs(cache: BlobCache, mib: int, files: int) -> list[FileEntry]:
    size = mib * 2**20 // files
    entries = []
    for k in range(files):
        data = os.urandom(size)
        sha = hashlib.sha256(data).hexdigest()
        part = cache.begin(sha, len(data))
        assert cache.write(part, 0, len(data), data)
        entries.append(FileEntry(f"data/{k}.bin", sha, len(data)))
    return entries


def _timed(root: Path, cache: BlobCache, entries: list[FileEntry]) -> float:
    workspace = root / "ws"
    workspace.mkdir()
    t0 = time.perf_counter()
    build_workspace(cache, entries, workspace)
    os.sync()
    took = time.perf_counter() - t0
    shutil.rmtree(workspace)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(prog="scripts/bench-staging", allow_abbrev=False)
    parser.add_argument("--mib", type=int, default=1024, help="size of the workspace (default 1024 MiB)")
    parser.add_argument("--files", type=int, default=64, help="files it holds (default 64)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each (default 5)")
    args = parser.parse_args()
    import lanpool.agent.workspace.staging as staging

    checked, kernel = [], []
    with tempfile.TemporaryDirectory(prefix="lanpool-bench-staging-") as tmp:
        root = Path(tmp)
        cache = BlobCache(root / "blobs", budget=4 * args.mib * 2**20)
        cache.create()
        entries = _blobs(cache, args.mib, args.files)
        _timed(root, cache, entries)  # warm: the blobs in the page cache, as for a project run again
        real = staging.copy_hashing
        for _ in range(args.rounds):
            staging.copy_hashing = real
            checked.append(_timed(root, cache, entries))

            # The baseline checks nothing: it answers with the blob's own name (its sha256).
            def baseline(src: int, dst: int) -> str:
                copy_fd(src, dst, os.fstat(src).st_size)
                return os.path.basename(os.readlink(f"/proc/self/fd/{src}"))

            staging.copy_hashing = baseline
            kernel.append(_timed(root, cache, entries))
        staging.copy_hashing = real
    gib = args.mib / 1024
    med = sorted(checked)[len(checked) // 2], sorted(kernel)[len(kernel) // 2]
    per_gib = (round(med[0] / gib, 3), round(med[1] / gib, 3))
    print(f"staging {args.mib} MiB in {args.files} files, median of {args.rounds} (alternating):")
    print(f"  hashed as copied: {med[0]:.3f} s ({per_gib[0]:.3f} s/GiB)")
    print(f"  kernel copy, unchecked (before): {med[1]:.3f} s ({per_gib[1]:.3f} s/GiB)  ratio {med[0] / med[1]:.2f}x")
    from bench_results import record, row

    record(
        "bench-staging", [row("staging, s per GiB, hashed as copied vs unchecked", per_gib[0], per_gib[1], unit="s")]
    )


if __name__ == "__main__":
    main()
