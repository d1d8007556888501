"""The last run of each benchmark, kept as docs/bench/<name>.json, and docs/benchmarks.md rendered from them.

Each scripts/bench_*.py ends its main with `record(name, rows)`: the figures of that run, each with
the baseline measured in the same run, so the tables in docs/ come from a run and are never copied
by hand (hand-copied figures drift). `scripts/bench-report` (this file as a program) renders them.

    record("bench-shell", [row("keystroke echo", 0.60, 0.25, target="<= 1.2", unit="ms")])
    record("bench", [picked(results, "first line", "lanpool.first_s", "bare.first_s", unit="s")])

A bench writes only when asked: `--record` (scripts/bench-run sets LANPOOL_BENCH_RESULTS to
docs/bench), or LANPOOL_BENCH_RESULTS=DIR (tests); without either, or with =off, measuring leaves
the tree as it was.
"""

import argparse
import json
import math
import os
import platform
import re
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO / "docs" / "bench"
REPORT = REPO / "docs" / "benchmarks.md"
COLUMNS = ("figure", "value", "baseline", "ratio", "target", "met")
RUN_KEYS = ("command", "date", "load", "machine", "source")
_TARGET = re.compile(r"^\s*(<=|>=|<|>)\s*([0-9][0-9,]*(?:\.[0-9]+)?)\s*(\S*)")


class BenchReportError(Exception):
    """A results file cannot be read or rendered."""


def row(
    figure: str,
    value: object,
    baseline: object = None,
    *,
    target: str = "",
    unit: str = "",
    ratio: float | None = None,
) -> dict:
    """One figure. ratio = value / baseline when both are numbers. A `target` that is a bare
    number or ends in x ("<= 1.2", ">= 0.8x") is checked against the ratio; one with a unit
    ("< 1 s", ">= 500000 lines/s") against the value, in the row's unit."""
    if ratio is None and _number(value) and _number(baseline) and baseline:
        ratio = round(float(value) / float(baseline), 3)  # type: ignore[arg-type]
    met = _met(target, value, ratio)
    return {
        "figure": figure,
        "value": value,
        "baseline": baseline,
        "ratio": ratio,
        "target": target,
        "met": met,
        "unit": unit,
    }


def pick(results: object, path: str) -> object:
    """results["a"]["b"] for "a.b", or None where a key is missing (a bench ran only some parts)."""
    for key in path.split("."):
        if not isinstance(results, dict) or key not in results:
            return None
        results = results[key]
    return results


def picked(
    results: object,
    figure: str,
    value: str,
    baseline: str | None = None,
    *,
    target: str = "",
    unit: str = "",
    ratio: str | None = None,
) -> dict:
    """row() with its numbers picked from `results` by path ("a.b", see pick): the shape every
    bench's rows_of repeats. A path the results lack gives None (the row is then left out)."""
    return row(
        figure,
        pick(results, value),
        pick(results, baseline) if baseline else None,
        target=target,
        unit=unit,
        ratio=pick(results, ratio) if ratio else None,  # type: ignore[arg-type]
    )


def machine() -> str:
    cpus = os.cpu_count() or 0
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = " ".join(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    return f"{cpus} cores{', ' + model if model else ''}, {platform.system()} {platform.machine()}"


def record(name: str, rows: list[dict], command: str | None = None) -> Path | None:
    """Write <LANPOOL_BENCH_RESULTS>/<name>.json for this run (rows without a value are left out);
    nothing unless asked (`--record`)."""
    where = os.environ.get("LANPOOL_BENCH_RESULTS", "")
    if where == "off":
        return None
    if not where:
        print(f"{name}: figures not recorded (add --record to write docs/bench/{name}.json)", file=sys.stderr)
        return None
    run = {
        "command": command or " ".join(["scripts/" + name, *map(shlex.quote, sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d %H:%M", time.localtime()),
        "load": round(os.getloadavg()[0], 1),
        "machine": machine(),
    }
    kept = [{**run, **r} for r in rows if r.get("value") is not None]
    path = Path(where) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"name": name, **run, "rows": kept}, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(path)  # a reader never sees half a file
    print(f"{name}: figures recorded in {path} (scripts/bench-report renders docs/benchmarks.md)", file=sys.stderr)
    return path


def recording(name: str, work: Callable[[], dict], rows_of: Callable[[dict], list[dict]]) -> Callable[[], dict]:
    """`work` for bench_stats.run_bench, recording its figures once it has them. A figure the
    results lack (a part not run, a key renamed) is left out; recording never fails the bench."""

    def recorded() -> dict:
        results = work()
        try:
            record(name, rows_of(results))
        except (OSError, TypeError, ValueError, KeyError, ZeroDivisionError) as exc:
            print(f"{name}: figures not recorded: {exc}", file=sys.stderr)
        return results

    return recorded


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _met(target: str, value: object, ratio: float | None) -> bool | None:
    m = _TARGET.match(target or "")
    against = ratio if m and m.group(3) in ("", "x") else value
    if not m or not _number(against):
        return None
    op, bound = m.group(1), float(m.group(2).replace(",", ""))
    x = float(against)  # type: ignore[arg-type]
    return {"<=": x <= bound, ">=": x >= bound, "<": x < bound, ">": x > bound}[op]


def _cell(x: object, unit: str = "") -> str:
    if x is None or x == "":
        return ""
    if isinstance(x, bool):
        return "yes" if x else "**no**"
    if _number(x):
        f = float(x)  # type: ignore[arg-type]
        text = f"{f:,.0f}" if abs(f) >= 1000 or f == int(f) else f"{f:.4g}"
        return f"{text}{unit}" if unit == "x" else f"{text} {unit}".rstrip()
    return str(x).replace("|", "\\|").replace("\n", " ")  # a string carries its own unit


def load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BenchReportError(f"{path}: not readable JSON ({exc}); re-run its benchmark or fix the file") from exc
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise BenchReportError(f"{path}: no 'rows' list; re-run its benchmark or fix the file")
    for i, r in enumerate(data["rows"]):
        if not isinstance(r, dict) or not isinstance(r.get("figure"), str):
            raise BenchReportError(f"{path}: row {i + 1} has no 'figure'; re-run its benchmark or fix the file")
    return data


def render_one(name: str, data: dict, notes: str) -> str:
    rows = data["rows"]
    # What all rows share goes above the table; what differs gets a column.
    shared = {k: rows[0].get(k) for k in RUN_KEYS if rows and all(r.get(k) == rows[0].get(k) for r in rows)}
    varying = [k for k in RUN_KEYS if k not in shared and any(r.get(k) not in (None, "") for r in rows)]
    out = [f"## {name}", ""]
    if shared.get("command"):
        out.append(f"Re-run: `{shared['command']}`")
    facts = [f"{k} {_cell(shared[k])}" for k in ("date", "load", "machine") if shared.get(k) not in (None, "")]
    if shared.get("source"):
        facts.append(f"**source: {shared['source']}** (not re-run since)")
    if facts:
        out.append("; ".join(facts).replace("load ", "load average ", 1) + ".")
    out.append("")
    cols = [*COLUMNS, *varying]
    out.append("| " + " | ".join(cols) + " |")
    out.append("|" + "---|" * len(cols))
    for r in rows:
        unit = r.get("unit", "")
        cells = [
            _cell(r.get("figure")),
            _cell(r.get("value"), unit),
            _cell(r.get("baseline"), unit),
            _cell(r.get("ratio"), "x") if r.get("ratio") is not None else "",
            _cell(r.get("target")),
            _cell(r.get("met")),
            *(_cell(r.get(k)) for k in varying),
        ]
        out.append("| " + " | ".join(cells) + " |")
    if notes.strip():
        out += ["", notes.strip()]
    return "\n".join(out) + "\n"


def render(bench_dir: Path = BENCH_DIR) -> str:
    parts = [
        "# Benchmarks\n",
        "Generated by `scripts/bench-report` from `docs/bench/*.json`, which a benchmark writes when run with "
        "`--record` (`scripts/bench_results.py`; without it a run changes nothing in the tree); edit the notes "
        "in `docs/bench/NAME.md`, never the tables. "
        "Every ratio compares figures measured in the same run, alternating where the script says so, "
        "so the machine's load weighs on both sides. A table marked with a source was copied from an "
        "older README and is waiting for its benchmark to run again.\n",
    ]
    names = sorted(p.stem for p in bench_dir.glob("*.json"))
    for name in names:
        notes_file = bench_dir / f"{name}.md"
        notes = notes_file.read_text() if notes_file.is_file() else ""
        parts.append(render_one(name, load(bench_dir / f"{name}.json"), notes))
    scripts = sorted(p.stem.replace("_", "-") for p in (REPO / "scripts").glob("bench_*.py"))
    missing = [
        s
        for s in scripts
        if s not in names and s not in ("bench-stats", "bench-results", "bench-tui-probe", "bench-store")
    ]
    if missing:
        parts.append("## Not run yet\n\n" + ", ".join(f"`scripts/{s}`" for s in missing) + ": no recorded figures.\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-report", description="render docs/benchmarks.md")
    parser.add_argument("--dir", type=Path, default=BENCH_DIR, help="results directory (default docs/bench)")
    parser.add_argument("--out", type=Path, default=REPORT, help="file to write (default docs/benchmarks.md)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not what would be rendered")
    args = parser.parse_args(argv)
    try:
        text = render(args.dir)
        if args.check:
            current = args.out.read_text() if args.out.is_file() else ""
            if current != text:
                print(f"bench-report: {args.out} is out of date; run scripts/bench-report", file=sys.stderr)
                return 1
            return 0
        args.out.write_text(text)
    except (BenchReportError, OSError) as exc:
        print(f"bench-report: {exc}", file=sys.stderr)
        return 2
    print(f"bench-report: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
