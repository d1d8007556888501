"""The README and docs/: a newcomer's README that links every doc, links that lead somewhere, every
verb documented, and docs/benchmarks.md generated from docs/bench/*.json (never hand-copied).
The part with real agents and the CLI (integration); the rest: tests/unit/test_docs.py."""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.unit.test_docs import DOCS, README, REPO

REPORT = [str(REPO / "scripts" / "bench-report")]
sys.path.insert(0, str(REPO / "scripts"))
import bench_results  # noqa: E402


def test_every_verb_is_in_the_readme_and_the_cli_reference():
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from lanpool.app.cli.main import main; sys.exit(main())", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
    ).stdout
    verbs = re.findall(r"^  (\w+)\s{2,}", out.split("app headless verbs:")[1].split("app agent verbs:")[0], re.M)
    assert len(verbs) >= 10, out
    readme, cli = README.read_text(), (DOCS / "cli.md").read_text()
    for verb in verbs:
        assert f"`{verb}" in readme or f" {verb}`" in readme, f"verb {verb} not in the README's CLI table"
        assert f"app headless {verb}" in cli, f"verb {verb} not in docs/cli.md"


def test_benchmarks_md_is_rendered_from_every_json():
    names = sorted(p.stem for p in (DOCS / "bench").glob("*.json"))
    assert len(names) >= 9
    check = subprocess.run([*REPORT, "--check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr  # the committed file is what the JSON files render to
    text = (DOCS / "benchmarks.md").read_text()
    for name in names:
        data = json.loads((DOCS / "bench" / f"{name}.json").read_text())
        section = text.split(f"\n## {name}\n")[1].split("\n## ")[0]
        assert f"`{data['command']}`" in section
        for row in data["rows"]:
            assert row["figure"].replace("|", "\\|") in section


def test_record_writes_a_run_that_the_report_renders(tmp_path, monkeypatch):
    monkeypatch.setenv("LANPOOL_BENCH_RESULTS", str(tmp_path))
    rows = [
        bench_results.row("keystroke echo", 0.6, 0.25, target="<= 1.2", unit="ms"),
        bench_results.row("lines stored", 520_000, 850_000, target=">= 500000 lines/s", unit="lines/s"),
        bench_results.row("not measured this run", bench_results.pick({"a": {}}, "a.b")),
    ]
    path = bench_results.record("bench-example", rows, command="scripts/bench-example --pairs 3")
    data = json.loads(path.read_text())
    assert [r["figure"] for r in data["rows"]] == ["keystroke echo", "lines stored"]  # no value: left out
    echo, lines = data["rows"]
    assert (echo["ratio"], echo["met"]) == (2.4, False)  # a bare-number target is on the ratio
    assert (lines["met"], lines["ratio"]) == (True, 0.612)  # one with a unit is on the value
    assert echo["command"] == "scripts/bench-example --pairs 3" and echo["machine"] and "load" in echo
    out = tmp_path / "benchmarks.md"
    done = subprocess.run([*REPORT, "--dir", str(tmp_path), "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "## bench-example" in text and "`scripts/bench-example --pairs 3`" in text
    assert "| keystroke echo | 0.6 ms | 0.25 ms | 2.4x | <= 1.2 | **no** |" in text


@pytest.mark.parametrize(
    "content",
    ['{"rows": [', '{"name": "x"}', '{"rows": [{"value": 1}]}', '["not", "an", "object"]'],
    ids=["truncated", "no-rows", "row-without-figure", "a-list"],
)
def test_a_broken_results_file_is_one_line_and_overwrites_nothing(tmp_path, content):
    (tmp_path / "bench-broken.json").write_text(content)
    out = tmp_path / "benchmarks.md"
    out.write_text("the last good report\n")
    done = subprocess.run(
        [*REPORT, "--dir", str(tmp_path), "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "bench-broken.json" in done.stderr and "Traceback" not in done.stderr
    assert out.read_text() == "the last good report\n"
