"""Where detached gangs' members stand in a runner's queue (agent.gang.hub explains the gangs).

Every runner puts gang members in the gangs' global order (the controller's clock at
submit, then the gang id), so all runners agree on which gang goes first; and lets only
one of them into the plan (agent.jobs.queue) at a time, none while a gang reservation is
held: a runner holds at most one gang reservation. A member backing off after a release
stays in the plan's list only so that the plan wakes the queue when its delay is over.
"""

from lanpool.agent.jobs.job import Job


def gang_line(queued: list[Job], held: str, now: float) -> list[Job]:
    """The queue as the plan sees it: gang members in the gangs' global order (the same on every
    runner), and only one of them in line, none while a gang reservation is held."""
    members = [j for j in queued if j.record.gang_id]
    if not members:
        return queued
    ordered = iter(sorted(members, key=lambda j: (j.record.gang_order, j.record.gang_id)))
    queued = [next(ordered) if j.record.gang_id else j for j in queued]
    due = [j for j in queued if j.record.gang_id and j.record.not_before <= now]
    first = "" if held or not due else due[0].record.job_id
    line = []
    for job in queued:
        backing_off = job.record.not_before > now and not held  # in line for the plan's wake-up only
        if job.record.gang_id and job.record.job_id != first and not backing_off:
            if job.record.job_id != held:
                job.position, job.reason = 0, "waiting for the gang ahead of it on this runner"
            continue
        line.append(job)
    return line
