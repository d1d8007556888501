"""YAML read with line numbers, so that an error in a workflow file can say `file:line`."""

from pathlib import Path
from typing import Any

import yaml

from app.workflows.model import WorkflowError


class LineMap(dict[Any, Any]):
    """A YAML mapping that remembers where it and each of its keys were written."""

    line: int = 1
    key_lines: dict[Any, int]
    scalar_text: dict[Any, Any]  # each scalar value as written: `3.10` would otherwise read as the float 3.1

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class _LineLoader(yaml.SafeLoader):  # type: ignore[misc]  # yaml has no types here (types-PyYAML not installed)
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> LineMap:
        mapping = LineMap(super().construct_mapping(node, deep=deep))
        mapping.line = node.start_mark.line + 1
        mapping.key_lines = {k.value: k.start_mark.line + 1 for k, _ in node.value if hasattr(k, "value")}
        mapping.scalar_text = {
            k.value: v.value for k, v in node.value if hasattr(k, "value") and isinstance(v, yaml.ScalarNode)
        }
        return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _LineLoader.construct_mapping)


def read_yaml(path: Path) -> Any:
    """The file's YAML (every mapping a LineMap); WorkflowError, with the line, when it cannot be read."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkflowError(f"cannot read the file: {exc}", path) from None
    try:
        return yaml.load(text, Loader=_LineLoader)  # safe: _LineLoader is a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise WorkflowError(f"malformed YAML: {problem}", path, mark.line + 1 if mark else None) from None
