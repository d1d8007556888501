"""Which runner takes a multi-node job whole: a Slurm runner, by the partitions it reports."""

from lanpool.app.runners.views import RunnerState, RunnerView
from lanpool.app.runs.slurm_placement import fits, partitions, slurm_runner


def _view(name: str, props: dict, state: str = RunnerState.LIVE, trusted: bool = True) -> RunnerView:
    return RunnerView(name, "10.0.0.1", 7000, "manual", state, props, None, 0, trusted=trusted)


SLURM = {"executor": "slurm", "slurm_partitions": "debug:1/2n:2/4g,gpu:0/8n:0/32g"}


def test_partitions_are_read_and_what_does_not_parse_is_left_out():
    props = {"executor": "slurm", "slurm_partitions": "debug:1/2n:2/4g,bad;rm:1/2n:0/0g,x:9/-1n:0/0g"}
    assert [(p.name, p.nodes, p.gpus) for p in partitions(props)] == [("debug", 2, 4)]
    assert partitions({"executor": "process", "slurm_partitions": "debug:1/2n:2/4g"}) == []


def test_a_job_fits_a_partition_with_its_nodes_and_gpus_per_node():
    assert fits(SLURM, {}, 8) and fits(SLURM, {"gpu": 2}, 2) and fits(SLURM, {"gpu": 4}, 8)
    assert not fits(SLURM, {}, 9)
    assert fits(SLURM, {"gpu": 3}, 2)  # only the gpu partition has 6 GPUs
    assert not fits(SLURM, {"gpu": 3, "slurm_partition": "debug"}, 2)
    assert fits(SLURM, {"slurm_partition": "debug"}, 2) and not fits(SLURM, {"slurm_partition": "debug"}, 3)
    assert not fits(SLURM, {"slurm_partition": "nope"}, 1)


def test_only_a_usable_slurm_runner_is_chosen_and_a_pin_is_kept():
    lan = _view("lan", {"executor": "process", "gpus": "8"})
    offline = _view("off", SLURM, state=RunnerState.OFFLINE)
    untrusted = _view("stranger", SLURM, trusted=False)
    assert slurm_runner([lan, offline, untrusted], {}, 2, None) is None
    ok = _view("hpc", SLURM)
    assert slurm_runner([lan, ok], {}, 2, None) is ok
    assert slurm_runner([lan, ok], {}, 2, "lan") is None
    assert slurm_runner([lan, ok], {}, 2, "hpc") is ok


def test_a_job_naming_no_partition_is_placed_by_the_default_partition_only():
    # 8 nodes in "gpu", 2 in the default "debug": a 4-node job naming none goes where sbatch would put it
    default_debug = {**SLURM, "slurm_default_partition": "debug"}
    assert fits(default_debug, {}, 2) and not fits(default_debug, {}, 4)
    assert fits(default_debug, {"slurm_partition": "gpu"}, 4)  # named: that one, whatever the default
    assert slurm_runner([_view("hpc", default_debug)], {}, 4, None) is None
    assert fits({**SLURM, "slurm_default_partition": "gpu"}, {}, 8)
    # a default that is not among the partitions (a --partition sinfo does not list) fits nothing
    assert not fits({**SLURM, "slurm_default_partition": "gone"}, {}, 1)
    assert fits(SLURM, {}, 8)  # a runner that reports no default: any partition


def test_the_runner_chosen_has_the_most_idle_nodes_in_a_partition_the_job_can_use():
    # "a" has 7 idle nodes, but in a partition the job cannot use (its default is "small")
    a = _view(
        "a",
        {"executor": "slurm", "slurm_partitions": "small:0/2n:0/0g,big:7/8n:0/0g", "slurm_default_partition": "small"},
    )
    b = _view("b", {"executor": "slurm", "slurm_partitions": "debug:2/2n:0/0g", "slurm_default_partition": "debug"})
    assert slurm_runner([a, b], {}, 2, None) is b
