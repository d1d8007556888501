"""scripts/bench_results.picked: the row every bench builds from its nested results, by path."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import bench_results  # noqa: E402

RESULTS = {"dispatch": {"lanpool": {"s": 0.6}, "bare": {"s": 0.5}}, "ratio": 1.5, "n": 3}


def test_picked_is_row_with_its_numbers_picked_by_path():
    got = bench_results.picked(RESULTS, "echo", "dispatch.lanpool.s", "dispatch.bare.s", target="<= 1.2", unit="s")
    assert got == bench_results.row("echo", 0.6, 0.5, target="<= 1.2", unit="s")
    assert got["ratio"] == 1.2 and got["met"] is True


def test_picked_takes_a_recorded_ratio_over_the_computed_one():
    got = bench_results.picked(RESULTS, "x", "dispatch.lanpool.s", "dispatch.bare.s", target=">= 1.4", ratio="ratio")
    assert got["ratio"] == 1.5 and got["met"] is True


def test_picked_gives_none_for_a_part_not_run_and_record_leaves_it_out(tmp_path, monkeypatch):
    missing = bench_results.picked(RESULTS, "not run", "throughput.lanpool.s", "throughput.bare.s", ratio="no.such")
    assert missing["value"] is None and missing["baseline"] is None and missing["ratio"] is None
    assert bench_results.picked(RESULTS, "no baseline", "n")["baseline"] is None
    monkeypatch.setenv("LANPOOL_BENCH_RESULTS", str(tmp_path))
    path = bench_results.record("bench-example", [missing, bench_results.picked(RESULTS, "n", "n")], command="x")
    assert path is not None and [r["figure"] for r in bench_results.load(path)["rows"]] == ["n"]


def test_a_bench_writes_nothing_unless_asked(tmp_path, monkeypatch, capsys):
    """Measuring leaves the tree as it was: docs/bench is written only with --record
    (scripts/bench-run sets LANPOOL_BENCH_RESULTS for it)."""
    monkeypatch.delenv("LANPOOL_BENCH_RESULTS", raising=False)
    monkeypatch.setattr(bench_results, "BENCH_DIR", tmp_path)
    assert bench_results.record("bench-example", [bench_results.picked(RESULTS, "n", "n")]) is None
    assert list(tmp_path.iterdir()) == []
    assert "add --record to write docs/bench/bench-example.json" in capsys.readouterr().err
