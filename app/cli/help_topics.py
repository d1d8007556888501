"""`app help [TOPIC]`: the documentation shipped in the package (docs/*.md and the JSON
schemas of the workflow files), so that a `pip install` without the repository has it too.

The files are read with importlib.resources from `lanpool/docs` (a link to docs/ in a clone,
files in the wheel: pyproject.toml's package data). A topic is a file's name without `.md`
(`cli`, `workflows`) or a schema's without `.json` (`workflows.schema`); what the user types
is only ever compared with that list, never joined into a path.
"""

import sys
from importlib import resources
from importlib.resources.abc import Traversable


def _docs() -> Traversable | None:
    docs = resources.files("lanpool") / "docs"
    return docs if docs.is_dir() else None


def topics() -> dict[str, Traversable]:
    """Each topic's name -> its file, sorted by name."""
    docs = _docs()
    if docs is None:
        return {}
    found: dict[str, Traversable] = {}
    for entry in docs.iterdir():
        if entry.name.endswith(".md"):
            found[entry.name[: -len(".md")]] = entry
        elif entry.name.endswith(".schema.json"):
            found[entry.name[: -len(".json")]] = entry
    return dict(sorted(found.items()))


def _title(entry: Traversable) -> str:
    """A topic's first heading (a schema's `title`), for the list."""
    text = entry.read_text(encoding="utf-8")
    if entry.name.endswith(".json"):
        return "JSON Schema of " + entry.name.split(".")[0] + ".yaml (editors validate and complete with it)"
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return ""


def main(argv: list[str]) -> int:
    found = topics()
    if not found:
        print("app help: error: this installation has no documentation files (docs/ was not shipped)", file=sys.stderr)
        return 1
    if len(argv) > 1 or (argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        print("app help: error: give one topic, or none for the list: app help cli", file=sys.stderr)
        return 2
    if not argv or argv[0] in ("-h", "--help"):
        width = max(len(name) for name in found)
        print("Documentation installed with lanpool: `app help TOPIC` prints one (`app help cli | less`).\n")
        for name, entry in found.items():
            print(f"  {name.ljust(width)}  {_title(entry)}")
        return 0
    wanted = argv[0].removesuffix(".md").removesuffix(".json")
    chosen = found.get(wanted)
    if chosen is None:
        shown = wanted if wanted.isprintable() and len(wanted) <= 40 else repr(wanted[:40])
        print(f"app help: error: no topic {shown!r}; topics: {', '.join(found)}", file=sys.stderr)
        return 2
    sys.stdout.write(chosen.read_text(encoding="utf-8"))
    return 0
