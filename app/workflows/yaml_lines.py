"""YAML read with line numbers, so that an error in a workflow file can say `file:line`.

Booleans are YAML 1.2's (its core schema): only true and false, in any of their three
casings. PyYAML speaks YAML 1.1, where `on`, `off`, `yes` and `no` are booleans too, so
`retry: {on: [failure]}` lost its key and a variable `answer: no` reached the job as
`false`: here each means the word its author wrote. Where a field is a boolean, those four
words are still taken as one (FLAG_WORDS, app/workflows/model.py `flag`), as dstack's 2022
files were read.

yaml is imported only to read a text not read before (app/workflows/yaml_cache.py).
"""

import functools
import re
from pathlib import Path
from typing import Any

from lanpool.app.workflows import yaml_cache
from lanpool.app.workflows.line_map import LineMap
from lanpool.app.workflows.model import WorkflowError


@functools.cache
def _line_loader() -> Any:
    import yaml

    bool_tag = "tag:yaml.org,2002:bool"

    class _LineLoader(yaml.SafeLoader):  # type: ignore[misc]  # yaml has no types here (types-PyYAML not installed)
        yaml_implicit_resolvers = {  # SafeLoader's, less YAML 1.1's booleans (its own dict stays as it is)
            first: [(tag, regexp) for tag, regexp in resolvers if tag != bool_tag]
            for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
        }

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> LineMap:
            mapping = LineMap(super().construct_mapping(node, deep=deep))
            mapping.line = node.start_mark.line + 1
            mapping.key_lines = {k.value: k.start_mark.line + 1 for k, _ in node.value if hasattr(k, "value")}
            mapping.scalar_text = {
                k.value: v.value for k, v in node.value if hasattr(k, "value") and isinstance(v, yaml.ScalarNode)
            }
            return mapping

    _LineLoader.add_implicit_resolver(bool_tag, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    _LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _LineLoader.construct_mapping)
    return _LineLoader


def read_yaml(path: Path) -> Any:
    """The file's YAML (every mapping a LineMap); WorkflowError, with the line, when it cannot be read."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkflowError(f"cannot read the file: {exc}", path) from None
    known, data = yaml_cache.load(text)
    if known:
        return data
    data = _parse(text, path)
    yaml_cache.store(text, data)
    return data


def _parse(text: str, path: Path) -> Any:
    import yaml

    try:
        return yaml.load(text, Loader=_line_loader())  # safe: _LineLoader is a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise WorkflowError(f"malformed YAML: {problem}", path, mark.line + 1 if mark else None) from None
