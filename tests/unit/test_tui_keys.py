"""The TUI's habits and small-terminal fit (pilot, on the snapshot tests' fixed store):
k9s keys on tables, columns hidden by priority at 80 columns, log timestamps, metric families.
The in-process part (unit); the rest: tests/integration/test_tui_keys.py."""

import pytest

pytest.importorskip("textual")


from lanpool.app.tui.widgets.metrics_chart import families, family, smooth  # noqa: E402


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
