"""Workflow files as read before, kept by their content's hash: a `run` whose files did not
change neither imports yaml nor parses them (~15 ms of each `run`'s start).

An entry is JSON in the controller's data dir (cache/yaml/SHA256.json) holding the
values app/workflows/yaml_lines.py read from exactly that text: mappings with their
lines, lists and plain scalars. A document holding anything else (dates, binary,
sets) is not kept and is read from YAML each time. What comes back is checked
like any workflow file afterwards; an entry that does not decode is ignored and
written again. Never a pickle: the cache is data, whoever wrote it.
"""

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from lanpool.app.workflows.line_map import LineMap

log = logging.getLogger(__name__)

KEEP = 64  # entries: each edit of a workflow file makes one; the oldest go
# How yaml_lines reads a text, part of each entry's name: when the reading changes (YAML 1.2's
# booleans), an entry written by the old reading is never taken for the new one's.
READING = "core-booleans"
_SCALARS = (str, int, float, bool, type(None))


class Unreadable(Exception):
    """A cache entry that is not what this module writes."""


def cache_dir() -> Path:
    from lanpool.app.home import ControllerHome  # the data dir, as the controller finds it

    return ControllerHome.default().root / "cache" / "yaml"


def digest(text: str) -> str:
    return hashlib.sha256(f"{READING}\0{text}".encode("utf-8", "surrogateescape")).hexdigest()


def load(text: str) -> tuple[bool, Any]:
    """(True, the values) when `text` was read before, else (False, None)."""
    try:
        raw = (cache_dir() / f"{digest(text)}.json").read_bytes()
        return True, _decode(json.loads(raw))
    except FileNotFoundError:
        return False, None
    except (OSError, ValueError, TypeError, KeyError, RecursionError, Unreadable) as exc:
        log.debug("yaml cache entry ignored: %s", exc)
        return False, None


def store(text: str, data: Any) -> None:
    """Keep `data`, read from `text`, when it holds only what decodes back the same."""
    try:
        encoded = json.dumps(_encode(data, set())).encode()
    except (Unreadable, RecursionError, ValueError):
        return  # dates, binary, sets ...: read from YAML each time
    try:
        where = cache_dir()
        if not where.parent.parent.is_dir():  # no controller here yet: nothing is made for a cache
            return
        where.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".tmp-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(encoded)
        os.replace(tmp, where / f"{digest(text)}.json")
        _prune(where)
    except OSError as exc:  # a read-only home: the file is read from YAML, as before
        log.debug("yaml cache not written: %s", exc)


def _prune(where: Path) -> None:
    entries = sorted(where.glob("*.json"), key=lambda p: p.stat().st_mtime)
    for old in entries[:-KEEP]:
        old.unlink(missing_ok=True)


def _encode(x: Any, seen: set[int]) -> Any:
    if isinstance(x, LineMap | list):
        if id(x) in seen:  # a YAML alias: one object in two places, which two copies would not be
            raise Unreadable("an alias")
        seen.add(id(x))
    if isinstance(x, LineMap):
        return {
            "map": [[_encode(k, seen), _encode(v, seen)] for k, v in x.items()],
            "line": x.line,
            "key_lines": list(getattr(x, "key_lines", {}).items()),
            "scalar_text": list(getattr(x, "scalar_text", {}).items()),
        }
    if type(x) is list:
        return {"list": [_encode(v, seen) for v in x]}
    if type(x) in _SCALARS:
        if type(x) is float and x != x:  # nan: JSON keeps it, but it never equals itself
            raise Unreadable("nan")
        return x
    raise Unreadable(type(x).__name__)


def _decode(x: Any) -> Any:
    if type(x) in _SCALARS:
        return x
    if type(x) is not dict:
        raise Unreadable(type(x).__name__)
    if set(x) == {"list"} and type(x["list"]) is list:
        return [_decode(v) for v in x["list"]]
    if set(x) != {"map", "line", "key_lines", "scalar_text"} or type(x["line"]) is not int:
        raise Unreadable("not an entry of this cache")
    mapping = LineMap((_key(k), _decode(v)) for k, v in x["map"])
    mapping.line = x["line"]
    mapping.key_lines = {k: v for k, v in x["key_lines"] if type(k) in _SCALARS and type(v) is int}
    mapping.scalar_text = {k: v for k, v in x["scalar_text"] if type(k) in _SCALARS and type(v) in _SCALARS}
    return mapping


def _key(x: Any) -> Any:
    if type(x) not in _SCALARS:
        raise Unreadable("a mapping key that is not a scalar")
    return x
