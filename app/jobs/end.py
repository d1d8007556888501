"""A job's end, once every node ended: its artifacts pulled, then its final state recorded.

A gang of one's state is its node's, recorded as it came (a refusal of its
artifacts fails a DONE job); a bigger gang ends as one (DONE, the first node's
failure, or STOPPED/ABORTED when each unfinished node was stopped on request).
The job is synced (nothing more to ask its runners) only once its artifacts
are pulled: a pull left for later (`pull=False`) or cut off is resumed by the
next follow. A declared artifact that did not come back is a warning kept with
the job (shown by `status`, and the job is never reused from the cache).
"""

import time
from pathlib import PurePosixPath

from lanpool.app.runners.client import RunnerSession
from lanpool.app.store import ARTIFACTS_REFUSED, JobRow, Store
from lanpool.app.transfer.artifacts import Artifacts
from lanpool.protocol import JobState, JobStatus
from lanpool.protocol.transfer_messages import abs_artifact_name


async def finish_job(
    store: Store,
    artifacts: Artifacts,
    job_id: str,
    size: int,
    live: dict[int, RunnerSession],
    finals: dict[int, JobStatus | None],
    failure: str,
    pull: bool = True,
    wait: bool = True,
) -> JobRow:
    """Pull the artifacts of every node that ended (node K > 0's under node-K/), record the end.
    `wait`: for another process pulling them (else PullBusy)."""
    ended = [(k, s) for k, s in sorted(finals.items()) if s is not None]
    refused = await artifacts.pull(job_id, [(k, live[k], s) for k, s in ended], wait) if pull else ""
    if pull and not refused and ended:
        _note_missing(store, job_id)
    if size == 1:
        job = store.job(job_id)
        if refused:
            end = JobState.FAILED if job.state is JobState.DONE else job.state
            store.set_job_status(job_id, end, refused, error=job.error or refused)
        store.update_job(job_id, synced=int(pull))
        return store.job(job_id)
    failure = failure or refused  # what the job declared did not arrive
    codes = [s.exit_code for s in finals.values() if s is not None and s.exit_code]  # first to end first
    state = JobState.FAILED if failure else JobState.DONE
    unfinished = [s for s in finals.values() if s is None or s.state != JobState.DONE]
    stopped = [s for s in unfinished if s is not None and s.state in (JobState.STOPPED, JobState.ABORTED)]
    if failure and unfinished and len(stopped) == len(unfinished):
        # Every node that did not finish was stopped on request (`stop`), none failed.
        state = JobState.ABORTED if any(s.state == JobState.ABORTED for s in stopped) else JobState.STOPPED
    code = codes[0] if codes else (1 if failure else 0)
    fields = {"error": failure or None, "exit_code": code, "finished_at": time.time(), "synced": int(pull)}
    store.set_job_status(job_id, state, failure, **fields)
    return store.job(job_id)


def _note_missing(store: Store, job_id: str) -> None:
    """Warn about each artifact the job declared of which no file came back (the agent's
    log line says the same on the runner's side)."""
    job = store.job(job_id)
    if job.state is JobState.ABORTED or job.artifacts_pulled == ARTIFACTS_REFUSED:
        return
    for path in missing_outputs(job.artifact_paths, [p for p, _size in store.artifacts(job_id)]):
        store.add_warning(job_id, f"artifact {path!r} was not produced")


def missing_outputs(declared: list[str], files: list[str]) -> list[str]:
    """The declared artifact paths with no file at or under them among `files` (an absolute
    one, a container job's, comes back as its one tar: protocol abs_artifact_name)."""
    have = [PurePosixPath(f) for f in files]
    missing = []
    for path in declared:
        want = PurePosixPath(abs_artifact_name(path) if path.startswith("/") else path)
        if not any(f == want or want in f.parents for f in have):
            missing.append(path)
    return missing
