"""A YAML mapping with the lines it was written on: what a workflow file's mappings are read as
(app/workflows/yaml_lines.py) and kept as (app/workflows/yaml_cache.py)."""

from typing import Any


class LineMap(dict[Any, Any]):
    """A YAML mapping that remembers where it and each of its keys were written."""

    line: int = 1
    key_lines: dict[Any, int]
    scalar_text: dict[Any, Any]  # each scalar value as written: `3.10` would otherwise read as the float 3.1

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)
