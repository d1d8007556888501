"""Removing old runs from this controller: their rows (jobs, events, nodes, logs, artifact
lists) and their artifact files, with the space that frees. `app headless rm`/`prune`
and the TUI call it through the Controller (`ctl.retention`).

What is never removed:
- a run with a job that has not ended (queued, submitted, running): stop it first;
- while some run is still placing inputs (a job of it has not ended and its requested
  workflow's job is not yet on a runner), any run with a DONE job: that run may yet place
  a DONE job's artifacts as a reused (cached) or `WORKFLOW:TAG` input of its next job.
  Only DONE jobs are ever reused or tagged inputs; a run that has placed its last job
  needs nothing more, and a later plan simply runs again what is gone.

What an interrupted pull left (the staging dir `JOB.part`, its total `JOB.part.json`, the
range resume files `JOB.part.ranges`/`JOB.part.done`, its lock) goes with its job, and
prune also takes such leftovers of jobs no longer in the store (a pull cut off while its
run was removed, an `rm` whose files failed half-way): "orphans", counted in the space
freed. A job whose artifacts another process is pulling right now (its pull lock is held)
is never touched: `rm` refuses it, prune keeps its run (or the orphan) and says why.

Artifact files are removed without following links: a link in the store (even the job's
directory itself) is unlinked, and nothing it points at is touched or counted.
"""

import contextlib
import fcntl
import glob
import logging
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lanpool.app.errors import LanpoolError, UsageError
from lanpool.app.home import ControllerHome
from lanpool.app.store import JobRow, RunRow, Store
from lanpool.protocol import JobState

log = logging.getLogger(__name__)

_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DEFAULT_PRUNE_AGE = "7d"


def parse_age(text: str) -> float:
    """An age like `12h`, `7d`, `2w` (a whole number and a unit: s, m, h, d, w) as seconds."""
    match = re.fullmatch(r"(\d{1,9})([smhdw])", text.strip())
    if not match:
        raise UsageError(f"expects an age like 12h, 7d or 2w, not {text[:40]!r}")
    return int(match[1]) * _AGE_UNITS[match[2]]


@dataclass
class Removal:
    """What a removal took away (or, with dry_run, would)."""

    dry_run: bool
    runs: list[str] = field(default_factory=list)  # runs removed whole
    jobs: list[str] = field(default_factory=list)  # every job removed (those of `runs` included)
    files: int = 0  # artifact files
    artifact_bytes: int = 0  # disk space the artifact files free (a file linked elsewhere too frees none)
    log_bytes: int = 0  # log text removed from the database (its file keeps its size: SQLite reuses the pages)
    kept: list[tuple[str, str]] = field(default_factory=list)  # (run, why) that prune left in place
    orphans: list[str] = field(default_factory=list)  # store entries of jobs no longer in the store (prune)

    @property
    def freed(self) -> int:
        return self.artifact_bytes + self.log_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "runs": self.runs,
            "jobs": self.jobs,
            "files": self.files,
            "artifact_bytes": self.artifact_bytes,
            "log_bytes": self.log_bytes,
            "freed_bytes": self.freed,
            "kept": [{"run": run, "why": why} for run, why in self.kept],
            "orphans": self.orphans,
        }


class Retention:
    def __init__(self, store: Store, home: ControllerHome) -> None:
        self.store = store
        self.home = home

    def remove(self, refs: list[str], dry_run: bool = False) -> Removal:
        """Remove runs (a run name) and jobs (a job id or a unique prefix), all or nothing:
        any ref unknown or refused raises before anything is removed."""
        runs: dict[str, RunRow] = {}
        jobs: dict[str, JobRow] = {}
        for ref in refs:
            run = self.store.run(ref)
            if run is not None:
                runs[run.name] = run
                jobs.update((j.id, j) for j in self.store.jobs_of_run(run.name))
            else:
                jobs.update((j.id, j) for j in self.store.resolve_jobs(ref))  # NotFoundError names the ref
        for job in jobs.values():
            if not job.state.is_terminal():
                raise UsageError(
                    f"job {job.id} of run {job.run_name} is still {job.status}: stop it first "
                    f"(`app headless stop {job.run_name}`); nothing was removed"
                )
        pulled = next((j for j in jobs.values() if self._pulling(j.id)), None)
        if pulled is not None:
            raise UsageError(
                f"another lanpool process is pulling the artifacts of job {pulled.id} (run {pulled.run_name}): "
                "try again when it is done; nothing was removed"
            )
        placing = self._placing(exclude=set(runs) | {j.run_name for j in jobs.values()})
        done = next((j for j in jobs.values() if j.state is JobState.DONE), None)
        if placing and done is not None:
            raise UsageError(
                f"run {placing[0]} is in progress and may still use job {done.id}'s artifacts as an input: "
                f"remove run {done.run_name} once it ends; nothing was removed"
            )
        return self._remove(list(runs), list(jobs.values()), dry_run)

    def prune(
        self, older_than_s: float, keep_tagged: bool = False, dry_run: bool = False, now: float | None = None
    ) -> Removal:
        """Remove the runs created more than `older_than_s` ago whose jobs have all ended
        (and, with keep_tagged, that carry no tag); the others are listed as kept, with why."""
        cutoff = (time.time() if now is None else now) - older_than_s
        placing = self._placing()
        chosen: list[str] = []
        chosen_jobs: list[JobRow] = []
        kept: list[tuple[str, str]] = []
        for run in self.store.runs_created_before(cutoff):
            jobs = self.store.jobs_of_run(run.name)
            running = next((j for j in jobs if not j.state.is_terminal()), None)
            if running is not None:
                kept.append((run.name, f"job {running.id} is {running.status}"))
            elif (pulled := next((j for j in jobs if self._pulling(j.id)), None)) is not None:
                kept.append((run.name, f"the artifacts of job {pulled.id} are being pulled"))
            elif keep_tagged and run.tag:
                kept.append((run.name, f"tagged {run.tag!r}"))
            elif placing and any(j.state is JobState.DONE for j in jobs):
                kept.append((run.name, f"run {placing[0]} is in progress and may use its artifacts"))
            else:
                chosen.append(run.name)
                chosen_jobs += jobs
        removal = self._remove(chosen, chosen_jobs, dry_run, orphans=self._orphans())
        removal.kept = kept
        return removal

    def _orphans(self) -> list[Path]:
        """Entries of the artifact store whose job (the name up to its first dot) is no job in
        the store, and that no process is pulling now."""
        try:
            names = sorted(os.listdir(self.home.artifacts))
        except FileNotFoundError:
            return []
        by_job: dict[str, list[str]] = {}
        for name in names:
            by_job.setdefault(name.split(".", 1)[0], []).append(name)
        known = self.store.known_jobs([j for j in by_job if j])
        return [
            self.home.artifacts / name
            for job_id, entries in by_job.items()
            if job_id and job_id not in known and not self._pulling(job_id)
            for name in entries
        ]

    def _pulling(self, job_id: str) -> bool:
        """Whether a process holds the job's pull lock now (app/transfer/pull.py `_pull_lock`):
        its staging dir is in use, and goes only once that pull ends or dies."""
        path = self.home.artifacts / f"{job_id}.part.lock"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False  # none (or not a plain file: no pull's lock)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)  # releases the shared lock taken just to test
        return False

    def _placing(self, exclude: set[str] | None = None) -> list[str]:
        """Runs still placing inputs: a job not ended, and the requested workflow's job not yet on a runner."""
        exclude = exclude or set()
        found = []
        for run_name in sorted({j.run_name for j in self.store.unfinished_jobs()} - exclude):
            run = self.store.run(run_name)
            if run is None:
                continue
            placed = any(
                j.workflow == run.workflow and j.state is not JobState.QUEUED for j in self.store.jobs_of_run(run_name)
            )
            if not placed:
                found.append(run_name)
        return found

    def _remove(
        self, run_names: list[str], jobs: list[JobRow], dry_run: bool, orphans: list[Path] | None = None
    ) -> Removal:
        removal = Removal(dry_run=dry_run, runs=sorted(run_names), jobs=[j.id for j in jobs])
        job_ids = [j.id for j in jobs]
        removal.log_bytes = self.store.log_bytes(job_ids)
        removal.orphans = [p.name for p in orphans or []]
        places = [p for j in jobs for p in self._artifact_places(j.id)] + list(orphans or [])
        removal.files, removal.artifact_bytes = _measure(places)
        if dry_run:
            return removal
        # The rows first: if the disk then fails half-way, what is left is unlisted files,
        # never a run whose artifacts are half gone.
        emptied = self.store.delete_jobs(job_ids)
        self.store.delete_runs(run_names)  # runs with no job (every job reused) have no job to empty them
        removal.runs = sorted(set(run_names) | set(emptied))
        problems = []
        for place in places:
            try:
                _remove_place(place)
            except OSError as exc:
                problems.append(f"{place}: {exc.strerror or exc}")
        if problems:
            raise LanpoolError(
                f"removed {len(removal.jobs)} job(s) from the store, but not all their files: {problems[0]}"
                + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
            )
        log.info(
            "removed runs %s, jobs %s, orphans %s: %d bytes", removal.runs, removal.jobs, removal.orphans, removal.freed
        )
        return removal

    def _artifact_places(self, job_id: str) -> list[Path]:
        """The job's artifact dir and what an interrupted pull left beside it (JOB.*: staging
        dirs, partial archives). A job id is one plain name: anything else would point outside
        the artifact store, and is left alone."""
        if not job_id or job_id in (".", "..") or "/" in job_id or os.sep in job_id or "*" in job_id:
            return []
        place = self.home.job_artifacts(job_id)
        # Job ids are hex: no other job's name starts with "ID.".
        leftovers = sorted(self.home.artifacts.glob(f"{glob.escape(job_id)}.*"))
        return ([place] if os.path.lexists(place) else []) + leftovers


def _measure(places: list[Path]) -> tuple[int, int]:
    """(regular files, bytes their removal frees) under `places`, never following a link.

    A file with other hard links (a download linked from the store) frees its bytes only
    when all its links are among those removed."""
    files = 0
    inodes: dict[tuple[int, int], list[int]] = {}  # (dev, ino) -> [links seen, st_nlink, size]
    stack = list(places)
    while stack:
        path = stack.pop()
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            with os.scandir(path) as entries:
                stack.extend(Path(e.path) for e in entries)
        elif stat.S_ISREG(st.st_mode):
            files += 1
            seen = inodes.setdefault((st.st_dev, st.st_ino), [0, st.st_nlink, st.st_size])
            seen[0] += 1
    freed = sum(size for seen, nlink, size in inodes.values() if seen >= nlink)
    return files, freed


def _remove_place(place: Path) -> None:
    """Remove a job's artifact dir; a link (the dir itself, or anything in it) is unlinked, not followed."""
    if place.is_symlink() or not place.is_dir():
        place.unlink(missing_ok=True)
        return
    # rmtree unlinks the links it meets and, where the platform has the *at() calls
    # (Linux), refuses to follow a directory swapped for a link meanwhile.
    shutil.rmtree(place)
