"""The TUI's habits and small-terminal fit (pilot, on the snapshot tests' fixed store):
k9s keys on tables, columns hidden by priority at 80 columns, log timestamps, metric families.
The in-process part (unit); the rest: tests/integration/test_tui_keys.py."""

import pytest

pytest.importorskip("textual")


from lanpool.app.tui.widgets.metrics_chart import families, family, log_ticks, smooth, step_ticks  # noqa: E402


def test_metric_families():
    assert family("train_loss") == family("val_loss") == "loss"
    assert family("tokens_per_s") == "throughput"
    assert family("lr-AdamW") == family("learning_rate") == "learning rate"
    assert family("gpu0_util") == family("gpu1_util") == "gpu util"
    assert family("gpu0_mem_used") != family("gpu0_util")
    assert family("accuracy") == "accuracy"
    assert list(families(["tokens_per_s", "val_loss", "train_loss"])) == ["loss", "throughput"]
    assert smooth([1.0, 1.0, 1.0], 0.9) == pytest.approx([1.0, 1.0, 1.0])  # debiased: no pull to 0
    assert smooth([0.0, 10.0], 0.0) == [0.0, 10.0]


def test_chart_ticks_are_whole_steps_and_log_values():
    assert step_ticks(0, 149) == [0, 50, 100]
    assert step_ticks(0, 3) == [0, 1, 2, 3]
    assert step_ticks(5, 5) == [5]
    assert all(isinstance(t, int) for t in step_ticks(0.4, 1e6))
    ticks, labels = log_ticks(-1.62, 0.3)  # losses from ~0.024 to 2
    assert labels == ["0.05", "0.1", "0.2", "0.5", "1"]
    assert ticks[1] == -1.0 and ticks[-1] == 0.0
    assert log_ticks(-3, 4)[1] == ["0.001", "0.01", "0.1", "1", "10", "100", "1000", "10000"]
    assert log_ticks(0.1, 0.2)[1] == ["1.26", "1.58"]  # within one factor of two: the ends


def test_every_bound_key_has_a_help_row():
    """`e` was bound but in no help (issue #35): each binding has a row in `?`, which the palette's
    Keys opens, and which docs/tui.md follows (tests/integration/test_tui_daily.py)."""
    from lanpool.app.tui.keys import BINDINGS, KEYS_HELP

    names = {"slash": "/", "question_mark": "?", "left_square_bracket": "[", "right_square_bracket": "]"}
    names |= {"plus": "+", "minus": "-"}
    shown = {token for key, _ in KEYS_HELP for token in key.replace(",", " ").split()}
    for binding in BINDINGS:
        keys = [names.get(k, k) for k in binding.key.split(",")]
        assert shown & set(keys), f"{binding.key} ({binding.description}) has no row in KEYS_HELP"
