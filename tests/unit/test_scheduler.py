"""Placement over several simulated runners: best fit, sharing, queueing, rejection, pinning, gangs."""

from lanpool.app.runners.scheduler import Capacity, Need, place


def runner(name, gpus=0, gpus_free=None, cpus=8, cpus_free=None, mem=32000, mem_free=None, usable=True, why=""):
    return Capacity(
        name,
        usable,
        gpus,
        gpus if gpus_free is None else gpus_free,
        cpus,
        cpus if cpus_free is None else cpus_free,
        mem,
        mem if mem_free is None else mem_free,
        why,
    )


def test_best_fit_prefers_the_runner_with_least_room_left():
    pool = [runner("big", gpus=8), runner("small", gpus=2), runner("mid", gpus=4)]
    assert place(Need(gpu=2), pool).runners == ["small"]
    assert place(Need(gpu=3), pool).runners == ["mid"]
    assert place(Need(gpu=8), pool).runners == ["big"]


def test_jobs_share_a_runner_while_resources_allow():
    pool = [runner("a", gpus=4, gpus_free=2)]
    assert place(Need(gpu=1), pool).runners == ["a"]
    assert place(Need(gpu=2), pool).runners == ["a"]
    decision = place(Need(gpu=3), pool)
    assert decision.runners == [] and "waiting" in decision.queued and "a: 2/4 GPU free" in decision.queued


def test_cpu_and_memory_count_too():
    pool = [runner("a", cpus=4, cpus_free=1, mem=8000), runner("b", cpus=16, mem=64000, mem_free=1000)]
    assert place(Need(cpu=2), pool).runners == ["b"]
    assert place(Need(memory_mb=4000), pool).runners == ["a"]
    assert place(Need(cpu=2, memory_mb=4000), pool).queued


def test_what_can_never_fit_is_rejected_with_the_reason():
    pool = [runner("a", gpus=4), runner("b", gpus=2)]
    decision = place(Need(gpu=8), pool)
    assert decision.runners == [] and not decision.queued
    assert "needs 8 GPU" in decision.rejected and "largest runner (a) has 4 GPU" in decision.rejected


def test_offline_runners_make_jobs_wait_not_fail():
    pool = [runner("a", gpus=4, usable=False, why="offline")]
    decision = place(Need(gpu=1), pool)
    assert decision.queued and "a offline" in decision.queued and not decision.rejected


def test_no_runner_at_all_is_rejected():
    assert "no runner is known" in place(Need(), []).rejected


def test_pinning():
    pool = [runner("a", gpus=4), runner("b", gpus=1)]
    assert place(Need(gpu=1), pool, pinned="a").runners == ["a"]
    assert "no runner named 'zz'" in place(Need(), pool, pinned="zz").rejected
    assert place(Need(gpu=2), pool, pinned="b").rejected


def test_gang_placement_is_all_or_none():
    pool = [runner("a", gpus=1), runner("b", gpus=1, gpus_free=0), runner("c", gpus=1)]
    assert sorted(place(Need(gpu=1), pool, nodes=2).runners) == ["a", "c"]
    assert place(Need(gpu=1), pool, nodes=3).queued
    assert place(Need(gpu=1), pool, nodes=4).rejected


def test_unpaired_or_conflicting_runners_are_never_used():
    pool = [runner("a", gpus=4, usable=False, why="unpaired"), runner("b", gpus=4, usable=False, why="conflict")]
    decision = place(Need(gpu=1), pool)
    assert decision.rejected and "a unpaired" in decision.rejected and "b conflict" in decision.rejected


def test_with_runner_queues_a_job_goes_where_it_fits_ever_room_now_first_then_the_shortest_queue():
    full_a = Capacity("a", True, 1, 0, 8, 8, 1000, 1000, queued=3)
    full_b = Capacity("b", True, 1, 0, 8, 8, 1000, 1000, queued=1)
    free_c = Capacity("c", True, 1, 1, 8, 8, 1000, 1000, queued=5)
    assert place(Need(gpu=1), [full_a, full_b, free_c], runner_queues=True).runners == ["c"]
    assert place(Need(gpu=1), [full_a, full_b], runner_queues=True).runners == ["b"]
    # Pinned: it queues on that runner, busy or not.
    assert place(Need(gpu=1), [full_a, free_c], pinned="a", runner_queues=True).runners == ["a"]
    assert place(Need(gpu=2), [full_a], runner_queues=True).rejected


def test_with_runner_queues_a_gang_goes_to_runners_that_fit_even_busy_ones():
    """Followed or detached, a gang waits in its runners' queues (they start its nodes together:
    agent/gang/hub.py), never in the controller: busy runners that fit will do, room now first."""
    busy_a = Capacity("a", True, 1, 0, 8, 8, 1000, 1000, queued=2)
    busy_b = Capacity("b", True, 1, 0, 8, 8, 1000, 1000, queued=0)
    free_c = Capacity("c", True, 1, 1, 8, 8, 1000, 1000, queued=0)
    assert place(Need(gpu=1), [busy_a, busy_b, free_c], nodes=2, runner_queues=True).runners == ["c", "b"]
    assert place(Need(gpu=1), [busy_a, busy_b], nodes=2, runner_queues=True).runners == ["b", "a"]
    assert place(Need(gpu=1), [busy_a, busy_b], nodes=3, runner_queues=True).rejected
    assert not place(Need(gpu=1), [busy_a, busy_b], nodes=2).runners  # without queues: it waits


# -- what a runner can run (its mode, engine and Pythons, as its Hello says) --------------------


def typed(name, mode, executor="process", pythons="3.11,3.10"):
    return Capacity(name, True, 0, 0, 8, 8, 32000, 32000, mode=mode, executor=executor, pythons=pythons)


POOL = [
    typed("a-proc", "process"),
    typed("b-auto", "auto"),  # no engine: an image is ignored there, the job runs as processes
    typed("c-docker", "docker", executor="docker"),
    typed("d-slurm", "slurm", executor="slurm", pythons=""),
]


def test_a_runner_that_would_refuse_the_job_is_never_chosen_and_each_says_why():
    able = {
        kind: [c.name for c in POOL if not c.cannot_run(Need(runs_in=kind))]
        for kind in ("docker", "image", "any", "process")
    }
    assert able == {
        "docker": ["c-docker"],
        "image": ["b-auto", "c-docker"],
        "any": ["a-proc", "b-auto", "c-docker", "d-slurm"],
        "process": ["a-proc", "b-auto", "d-slurm"],
    }
    assert place(Need(runs_in="image"), POOL[:2]).runners == ["b-auto"]  # not a-proc, though it sorts first
    refused = place(Need(runs_in="docker"), POOL[:2] + POOL[3:]).rejected
    assert refused.startswith("no runner can run it: a-proc runs no containers (--executor process)"), refused
    assert "b-auto runs no containers (--executor auto)" in refused and "d-slurm runs no containers" in refused


def test_a_python_version_counts_where_the_job_runs_as_processes():
    need = Need(runs_in="process", python="3.8")
    refused = place(need, POOL[:3]).rejected
    assert "a-proc has Python 3.11, 3.10, not 3.8" in refused and "c-docker runs jobs in containers only" in refused
    assert place(Need(runs_in="process", python="3.10.4"), POOL[:1]).runners == ["a-proc"]
    assert place(Need(runs_in="any", python="3.8"), POOL).runners == ["c-docker"]  # in its image there
    assert place(Need(runs_in="process", python="3.8"), POOL[3:]).runners == ["d-slurm"]  # it says none: tried


def test_a_runner_that_says_nothing_of_its_executor_is_tried_as_before():
    silent = Capacity("old", True, 0, 0, 8, 8, 32000, 32000)
    assert place(Need(runs_in="docker", python="2.7"), [silent]).runners == ["old"]


def test_too_few_runners_for_the_nodes_is_said_as_before_when_none_is_skipped():
    refused = place(Need(runs_in="process"), POOL[:1], nodes=3).rejected
    assert refused.startswith("needs 3 runners"), refused
    mixed = place(Need(runs_in="image"), POOL[:3], nodes=3).rejected
    assert mixed.startswith("2 of 3 runners can run it: a-proc runs no containers"), mixed


def test_a_job_with_absolute_artifacts_goes_only_where_containers_run():
    from types import SimpleNamespace

    def job(image, implicit, artifacts, executor=""):
        return SimpleNamespace(
            python="",
            executor=executor,
            image=image,
            image_implicit=implicit,
            artifacts=artifacts,
            artifacts_all_nodes=[],
        )

    assert Need.of({}, job("python:3.11-slim", True, ["out"])).runs_in == "any"
    assert Need.of({}, job("python:3.11-slim", True, ["/root/.cache/huggingface/hub"])).runs_in == "docker"
    assert Need.of({}, job("conda", False, ["/opt/conda/envs/x"])).runs_in == "docker"
    assert place(Need.of({}, job("python:3.11-slim", True, ["/opt/x"])), POOL).runners == ["c-docker"]
