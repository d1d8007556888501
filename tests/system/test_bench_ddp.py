"""scripts/bench_ddp.py --probe: the trainers started through scripts/bench_ddp_probe.py, their start phases read back."""

import json
import sys
from argparse import Namespace
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import bench_ddp  # noqa: E402
from bench_stats import BenchError  # noqa: E402


def test_probe_runs_the_same_recipe_with_the_same_arguments():
    plain, probed = bench_ddp.train_command(20, "c.txt"), bench_ddp.train_command(20, "c.txt", probe=True)
    assert plain.startswith("python -m training.chargpt train ")
    assert probed == plain.replace("python -m training.chargpt", f"python {bench_ddp.PROBE.name}")
    assert bench_ddp.PROBE.is_file()


def _bench(probe: bool) -> bench_ddp.Bench:
    bench = bench_ddp.Bench.__new__(bench_ddp.Bench)  # no temp dir, no agents: only probed() is used
    bench.args = Namespace(probe=probe)
    return bench


def test_probed_gives_each_phase_from_the_launch_and_the_trainers_own_start(tmp_path):
    started = 1000.0
    nodes = []
    for k, exec_at in enumerate((1000.5, 1000.7)):
        w = tmp_path / f"node{k}"
        w.mkdir()
        marks = {phase: exec_at + i for i, phase in enumerate(bench_ddp.PHASES)}
        (w / "probe.json").write_text(json.dumps({**marks, "executable": "python", "path": [], "sched": "nice 0"}))
        nodes.append(w)
    got = _bench(True).probed(nodes, started, [{"step": 0, "time": 1009.0}])
    assert got["node0_exec_s"] == pytest.approx(0.5) and got["node1_lightning_s"] == pytest.approx(3.7)
    assert got["first_step_s"] == pytest.approx(9.0)
    assert got["own_start_s"] == pytest.approx(9.0 - 0.7)  # from the later node's exec
    assert _bench(False).probed(nodes, started, [{"step": 0, "time": 1009.0}]) == {}


def test_probed_says_which_node_left_no_probe_file(tmp_path):
    (tmp_path / "node0").mkdir()
    (tmp_path / "node0" / "probe.json").write_text(json.dumps({"exec": 1.0}))  # died before its imports
    with pytest.raises(BenchError, match="node 0 left no complete probe.json"):
        _bench(True).probed([tmp_path / "node0"], 0.0, [{"step": 0, "time": 1.0}])
    with pytest.raises(BenchError, match="node 0 left no complete probe.json"):
        _bench(True).probed([tmp_path / "missing"], 0.0, [{"step": 0, "time": 1.0}])
