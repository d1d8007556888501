"""A sweep's stop_worst (app/runs/halving.py): each job ranked at each rung it reaches, among those
that reached it; the worse part stopped, saying why. The CLI on real agents: tests/integration/test_sweep.py."""

import math

from lanpool.app.runs.halving import Rungs
from lanpool.app.workflows.model import StopWorst


def _points(values: dict[int, float], name: str = "val_loss") -> list[dict]:
    return [{"step": s, "name": name, "value": v} for s, v in values.items()]


def test_each_arrival_is_ranked_among_those_that_reached_the_step():
    rungs = Rungs(StopWorst(metric="val_loss", at=[2], keep=0.5), "min")
    assert rungs.observe("a", _points({1: 1.0})) == []  # not at step 2 yet
    [a] = rungs.observe("a", _points({1: 1.0, 2: 0.8}))
    assert (a.rank, a.of, a.stop) == (1, 1, False)  # the first to arrive is never stopped alone
    assert rungs.observe("a", _points({1: 1.0, 2: 0.8, 3: 0.1})) == []  # ranked once per rung
    [b] = rungs.observe("b", _points({2: 0.9}))
    assert (b.rank, b.of, b.stop) == (2, 2, True)
    assert b.reason("val_loss") == "stopped by the sweep at step 2 (val_loss 0.9, rank 2 of 2)"
    [c] = rungs.observe("c", _points({1: 0.5, 3: 2.0}))  # reached past the step: its best up to it
    assert (c.value, c.rank, c.of, c.stop) == (0.5, 1, 3, False)
    [d] = rungs.observe("d", _points({2: 0.85}))
    assert (d.rank, d.of, d.stop) == (3, 4, True)  # keep 0.5 of 4: the best 2


def test_later_rungs_and_a_score_to_maximise():
    rungs = Rungs(StopWorst(metric="val_acc", at=[10, 20], keep=0.5, mode="max"), "max")
    first = rungs.observe("a", _points({10: 0.6, 20: 0.7}, "val_acc"))
    assert [(v.step, v.stop) for v in first] == [(10, False), (20, False)]
    [passed, later] = rungs.observe("b", _points({10: 0.9, 20: 0.65}, "val_acc"))
    assert (passed.step, passed.rank, passed.stop) == (10, 1, False)
    assert (later.step, later.value, later.rank, later.stop) == (20, 0.9, 1, False)  # its best up to step 20
    [c] = rungs.observe("c", _points({10: 0.1, 20: 0.95}, "val_acc"))
    assert (c.step, c.rank, c.of, c.stop) == (10, 3, 3, True)  # stopped at the first rung: the second not looked at


def test_points_that_are_not_numbers_are_not_ranked():
    rungs = Rungs(StopWorst(metric="val_loss", at=[1], keep=0.5), "min")
    hostile = [
        {"step": "1", "name": "val_loss", "value": 0.1},
        {"step": 1, "name": "val_loss", "value": "0.1"},
        {"step": 1, "name": "val_loss", "value": math.nan},
        {"step": True, "name": "val_loss", "value": 0.1},
        {"step": 1, "name": "other", "value": 0.1},
    ]
    assert rungs.observe("x", hostile) == []
    assert rungs.values == {1: {}}
