"""The README and docs/: a newcomer's README that links every doc, links that lead somewhere, every
verb documented, and docs/benchmarks.md generated from docs/bench/*.json (never hand-copied).
The in-process part (unit); the rest: tests/integration/test_docs.py."""

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


README = REPO / "README.md"


DOCS = REPO / "docs"


sys.path.insert(0, str(REPO / "scripts"))


import bench_results  # noqa: E402


def _links(md: Path) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", md.read_text()) if "://" not in t]


def test_readme_is_short_and_starts_with_the_two_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    start = text.index("## Start here")
    block = text[start:].split("```")[1]  # the first code block of that section
    assert [line.split()[0] for line in block.splitlines()[1:] if line.strip() and not line.startswith(" ")] == [
        "scripts/demo",
        "scripts/test",
    ]
    assert (
        text.index("## Start here") < text.index("## Use it with your own project") < text.index("## Troubleshooting")
    )


@pytest.mark.parametrize("md", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_every_local_link_leads_to_a_file(md):
    for target in _links(md):
        path = target.split("#")[0]
        if path:
            assert (md.parent / path).exists(), f"{md.name} links {target}, which does not exist"


def test_the_readme_links_every_doc():
    linked = {Path(t.split("#")[0]).name for t in _links(README)}
    docs = {p.name for p in DOCS.glob("*.md")}
    assert "benchmarks.md" in linked
    assert docs <= linked, f"not linked from the README: {sorted(docs - linked)}"


def test_record_can_be_switched_off(tmp_path, monkeypatch):
    monkeypatch.setenv("LANPOOL_BENCH_RESULTS", "off")
    monkeypatch.chdir(tmp_path)
    assert bench_results.record("bench-example", [bench_results.row("x", 1)]) is None
    assert not (DOCS / "bench" / "bench-example.json").exists()


def _layout_entries() -> set[str]:
    """The files docs/layout.md names: each table row's first cell, under its `## folder/` heading."""
    entries, folder = set(), ""
    for line in (DOCS / "layout.md").read_text().splitlines():
        if heading := re.match(r"^#{2,3} (\S+)/$", line):
            folder = heading.group(1)
        elif folder and (row := re.match(r"^\| `([^`]+)` \|", line)):
            entries.add(f"{folder}/{row.group(1)}")
    return entries


def test_the_layout_names_every_module():
    """docs/layout.md is where a newcomer looks a module up: every one is there, and nothing else."""
    named = _layout_entries()
    modules = {
        p.relative_to(REPO).as_posix()
        for package in ("protocol", "agent", "app", "training")
        for p in (REPO / package).rglob("*.py")
        if p.name != "__init__.py"
    }
    assert modules - named == set(), "not in docs/layout.md"
    assert {n for n in named if not (REPO / n).is_file()} == set(), "named in docs/layout.md, not in the tree"
