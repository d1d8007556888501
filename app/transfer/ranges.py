"""A large artifact file pulled over several connections, one byte range each.

One stream is limited by the controller's single event loop (most of it in asyncssh's
receive path: decrypt, per-packet copies), so a file of at least PARALLEL_MIN_BYTES is
cut into disjoint ranges, each pulled by a worker process of its own
(app/transfer/range_worker.py) on its own SSH connection: the controller's key, and
the runner's host key pinned to the one the controller's own connection verified
(never trust on first use). Each worker takes its range only, in order, through the
same checks as a whole file (app/transfer/pull.py Writer): a byte outside the range is
refused, so no two workers ever write the same bytes.

Resume state: ranges fill the staged file out of order, so its size no longer says
what arrived. Next to the staging dir, `<job>.part.ranges` (JSON: each range's file,
size, start, end) and `<job>.part.done` (one little-endian int64 per range: the offset
its bytes reach) say it; each worker writes only its own slot of the done file.
Those files are only a claim: before resuming, each range's claimed bytes must be on
disk in the staged file (within its size, no hole: SEEK_HOLE), else that range starts
over from its start (`distrust`): an edited or stale done file never leaves a gap of
zeros in a file the pull then calls whole. (A claim inside the last, partly written
block cannot be told apart; anything a whole block or more past what arrived can.)
"""

import asyncio
import itertools
import json
import logging
import os
import shutil
import stat
import struct
import sys
from collections.abc import Coroutine
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import lanpool
from lanpool.app.errors import ArtifactsRefused, LanpoolError, RunnerError, RunnerProtocolError
from lanpool.app.transfer.files import checked_path, make_dirs
from lanpool.protocol.message_base import Record, record
from lanpool.protocol.transfer_messages import ARTIFACT_RANGES

if TYPE_CHECKING:  # asyncssh only where a pull happens: `status` of stored runs must not load it
    from lanpool.app.runners.client import RunnerSession

log = logging.getLogger(__name__)

STREAMS_ENV = "LANPOOL_PULL_STREAMS"
# Below this a file goes in the node's one stream: a worker's start-up (~0.3 s of imports
# and a connection) costs more than it saves.
PARALLEL_MIN_BYTES = 64 * 2**20
RANGE_MIN_BYTES = 16 * 2**20  # no range smaller than this (a smaller file gets fewer workers)
SLOT = struct.Struct("<q")
_ERROR_TAIL = 300


def pull_streams() -> int:
    """Connections per large file: LANPOOL_PULL_STREAMS (1: one stream, as before), else
    min(4, cpu count) on machines with 4 or more cores, else 1: on 2 cores the workers and
    the runner compete for the same CPU (see README, figures)."""
    raw = os.environ.get(STREAMS_ENV, "").strip()
    if not raw:
        cpus = os.cpu_count() or 1
        return min(4, cpus) if cpus >= 4 else 1
    try:
        value = int(raw)
    except ValueError:
        raise LanpoolError(f"{STREAMS_ENV}={raw!r} is not a whole number (1 to 16)") from None
    if not 1 <= value <= 16:
        raise LanpoolError(f"{STREAMS_ENV}={raw!r} must be 1 to 16")
    return value


@record
class Parallel(Record):
    """What a pull needs to start range workers: how many, and the controller's key file."""

    streams: int
    key_path: Path


@record
class Range(Record):
    key: str  # the file's path in the job's artifact dir (node K's under node-K/)
    size: int  # the file's declared size
    start: int
    end: int


class RangeState:
    """The ranges of a job's pull and how far each is (see the module docstring)."""

    def __init__(self, store_dir: Path, job_id: str) -> None:
        self.layout = store_dir / f"{job_id}.part.ranges"
        self.done_path = store_dir / f"{job_id}.part.done"
        self.ranges: list[Range] = []
        self.done: list[int] = []

    def load(self, every: dict[str, int]) -> bool:
        """Read what a cut-off pull left; False when it does not fit the declared files
        (then the caller starts over). No state at all is a fit."""
        try:
            raw = json.loads(self.layout.read_text())
            ranges = [Range(str(r["key"]), int(r["size"]), int(r["start"]), int(r["end"])) for r in raw["ranges"]]
            blob = self.done_path.read_bytes()
        except FileNotFoundError:
            return not self.layout.exists() and not self.done_path.exists()
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if len(blob) != SLOT.size * len(ranges):
            return False
        done = [SLOT.unpack_from(blob, i * SLOT.size)[0] for i in range(len(ranges))]
        by_key: dict[str, list[Range]] = {}
        for r, at in zip(ranges, done, strict=True):
            if every.get(r.key) != r.size or not r.start <= at <= r.end:
                return False
            by_key.setdefault(r.key, []).append(r)
        for key, rs in by_key.items():  # each file's ranges tile it exactly: no overlap, no gap
            rs.sort(key=lambda r: r.start)
            if rs[0].start != 0 or rs[-1].end != every[key] or any(a.end != b.start for a, b in itertools.pairwise(rs)):
                return False
        self.ranges, self.done = ranges, done
        return True

    def keys(self) -> set[str]:
        return {r.key for r in self.ranges}

    def distrust(self, staging: Path) -> list[str]:
        """Send back to its start each range whose claimed bytes are not in the staged file
        (see the module docstring); returns their keys, and saves the state if any."""
        doubted: list[str] = []
        for i, (r, at) in enumerate(zip(self.ranges, self.done, strict=True)):
            if at > r.start and not _on_disk(staging, r.key, r.start, at):
                self.done[i] = r.start
                doubted.append(r.key)
        if doubted:
            log.warning("range resume state claims bytes not on disk for %s: those ranges start over", doubted)
            self.save()
        return doubted

    def have(self, key: str) -> int:
        """Bytes of `key` arrived so far."""
        return sum(at - r.start for r, at in zip(self.ranges, self.done, strict=True) if r.key == key)

    def plan(self, key: str, size: int, have: int, streams: int) -> None:
        """Cut what is missing of `key` (from byte `have`: a single stream's start) into ranges."""
        if have:
            self.ranges.append(Range(key, size, 0, have))
            self.done.append(have)
        left = size - have
        n = max(1, min(streams, left // RANGE_MIN_BYTES))
        step = -(-left // n)
        for start in range(have, size, step):
            self.ranges.append(Range(key, size, start, min(size, start + step)))
            self.done.append(start)

    def save(self) -> None:
        """Written by the pull's own process before any worker starts."""
        self.layout.write_text(json.dumps({"ranges": [asdict(r) for r in self.ranges]}))
        self.done_path.write_bytes(b"".join(SLOT.pack(at) for at in self.done))

    def remove(self) -> None:
        self.layout.unlink(missing_ok=True)
        self.done_path.unlink(missing_ok=True)


def _on_disk(staging: Path, key: str, start: int, end: int) -> bool:
    """Whether bytes [start, end) of the staged file were written: inside its size, and no
    hole in them (a file system that keeps no holes reports none: then the size alone)."""
    try:
        parts = checked_path(key)
        dir_fd = make_dirs(staging, parts[:-1], create=False)
    except (ArtifactsRefused, OSError):
        return False
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return False
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size < end:
            return False
        try:
            return os.lseek(fd, start, os.SEEK_HOLE) >= end
        except OSError:  # no SEEK_HOLE here: the size was all there was to check
            return True
    finally:
        os.close(fd)


def read_done(store_dir: Path, job_id: str) -> tuple[set[str], int]:
    """For pull_percent, from any process: the files pulled in ranges, and their bytes arrived."""
    state = RangeState(store_dir, job_id)
    try:
        raw = json.loads(state.layout.read_text())
        ranges = [(str(r["key"]), int(r["start"])) for r in raw["ranges"]]
        blob = state.done_path.read_bytes()
    except (OSError, ValueError, KeyError, TypeError):
        return set(), 0
    have = 0
    for i, (_key, start) in enumerate(ranges):
        if (i + 1) * SLOT.size <= len(blob):
            have += max(0, SLOT.unpack_from(blob, i * SLOT.size)[0] - start)
    return {k for k, _ in ranges}, have


def create_staged(staging: Path, key: str) -> None:
    """The staged file, made before the workers start (they open it, never through a link)."""
    parts = checked_path(key)
    dir_fd = make_dirs(staging, parts[:-1])
    try:
        os.close(os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd))
    except OSError as exc:
        raise ArtifactsRefused(f"artifact {key!r} cannot be written in staging: {exc.strerror}") from None
    finally:
        os.close(dir_fd)


async def pull_ranges(
    session: "RunnerSession",
    job_id: str,
    staging: Path,
    prefix: str,
    state: RangeState,
    parallel: Parallel,
    lock_fd: int,
) -> None:
    """Pull every unfinished range of the files under `prefix` (this node's), a worker each,
    all at once. ArtifactsRefused as soon as one worker refuses what the runner sent (the
    others are stopped); RunnerError when one lost its connection (the rest still finish)."""
    peer = session.conn.get_extra_info("peername")
    if not session.host_key or not peer:
        raise RunnerError(f"{session.where}: no pinned host key to open more connections with")
    todo = [
        (slot, r, at)
        for slot, (r, at) in enumerate(zip(state.ranges, state.done, strict=True))
        if r.key.startswith(prefix) and at < r.end
    ]
    specs = [
        {
            "host": peer[0],
            "port": peer[1],
            "host_key": session.host_key,
            "key_path": str(parallel.key_path),
            "job_id": job_id,
            "staging": str(staging),
            "prefix": prefix,
            "path": r.key[len(prefix) :],
            "size": r.size,
            "start": at,
            "end": r.end,
            "done_file": str(state.done_path),
            "slot": slot,
        }
        for slot, r, at in todo
    ]
    procs: list[asyncio.subprocess.Process] = []
    pending: set[asyncio.Future[tuple[str, str]]] = set()
    try:
        for spec in specs:
            procs.append(await _spawn(spec, lock_fd))
        pending = {asyncio.ensure_future(_result(p, json.dumps(s).encode())) for p, s in zip(procs, specs, strict=True)}
        lost: str | None = None
        while pending:
            finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for fut in finished:
                kind, message = fut.result()
                if kind == "refused":
                    raise ArtifactsRefused(message)
                if kind != "ok":
                    lost = lost or message
        if lost:
            raise RunnerError(lost)
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
        for fut in pending:
            fut.cancel()
        await asyncio.gather(*pending, *(p.wait() for p in procs), return_exceptions=True)


async def _spawn(spec: dict[str, object], lock_fd: int) -> asyncio.subprocess.Process:
    """A worker holding the job's pull lock too (`lock_fd`, see app/transfer/pull.py)."""
    env = dict(os.environ)  # the worker imports this very package, wherever it is installed
    root = str(Path(lanpool.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "lanpool.app.transfer.range_worker",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        pass_fds=(lock_fd,),
    )


async def _result(proc: asyncio.subprocess.Process, spec: bytes) -> tuple[str, str]:
    """("ok" | "refused" | "lost", one line) from the worker's one line of JSON."""
    out, err = await proc.communicate(spec)
    try:
        line = json.loads(out.decode().strip().splitlines()[-1])
        return str(line["kind"]), str(line["message"])
    except (ValueError, IndexError, KeyError, TypeError, UnicodeDecodeError):
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        return "lost", f"an artifact range worker failed: {tail[0][:_ERROR_TAIL]}"


def forget(staging: Path, state: RangeState, keys: set[str]) -> None:
    """Drop ranged files that cannot be continued (no pinned host key): they start over whole."""
    for key in keys:
        with_parts = staging.joinpath(*checked_path(key))
        if with_parts.is_file() and not with_parts.is_symlink():
            with_parts.unlink()
    kept = [(r, at) for r, at in zip(state.ranges, state.done, strict=True) if r.key not in keys]
    state.ranges, state.done = [r for r, _ in kept], [at for _, at in kept]
    state.save()


def reset(staging: Path, state: RangeState) -> None:
    """Start the whole pull over: the range state does not fit what is declared now."""
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    state.ranges, state.done = [], []
    state.remove()


def plan_node(
    staging: Path,
    state: RangeState,
    prefix: str,
    declared: dict[str, int],
    have: dict[str, int],
    session: "RunnerSession",
    parallel: Parallel | None,
) -> set[str]:
    """The files of this node to pull in ranges (their state saved): those a cut-off pull
    started in ranges, and those with at least PARALLEL_MIN_BYTES to come."""
    usable = parallel is not None and bool(session.host_key) and ARTIFACT_RANGES in session.hello.features
    started = {k for k in state.keys() if k.startswith(prefix) and k[len(prefix) :] in declared}
    if started and not usable:  # no pinned host key to open more connections with: start those over
        forget(staging, state, started)
        for key in started:
            have.pop(key, None)
        started = set()
    if not usable or parallel is None:
        return started
    from lanpool.app.runners.direct import direct_wanted  # ssl: not for `status`

    if direct_wanted(session.hello.features):  # one direct stream outruns several SSH ones: no new ranges
        return started
    for path, size in declared.items():
        key = prefix + path
        if key not in started and parallel.streams > 1 and size - have.get(key, 0) >= PARALLEL_MIN_BYTES:
            state.plan(key, size, have.get(key, 0), parallel.streams)
            started.add(key)
    if started:
        state.save()
        for key in started:
            create_staged(staging, key)
    return started


async def run_pulls(pulls: list[Coroutine[None, None, None]]) -> None:
    """Run the node's one stream and its range workers together; a refusal by any stops
    the others and is raised; else the first lost connection, once all have ended."""
    tasks = [asyncio.ensure_future(p) for p in pulls]
    try:
        for fut in asyncio.as_completed(tasks):
            try:
                await fut
            except (ArtifactsRefused, RunnerProtocolError):
                raise
            except RunnerError:
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def check_sizes(staging: Path, sizes: dict[str, int]) -> None:
    """Files pulled in ranges are whole: every range ended where it should, so each must
    be exactly its declared size (nothing wrote past a range)."""
    for key, size in sizes.items():
        st = os.stat(staging.joinpath(*checked_path(key)), follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            raise ArtifactsRefused(f"artifact {repr(key)} came to {st.st_size} bytes in ranges, {size} declared")
