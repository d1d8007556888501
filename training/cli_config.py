"""Typed command lines made from a recipe's config dataclass.

Each field becomes `--field-name` (and `--field_name`, the spelling of the
HuggingFace tutorials), typed by its annotation, defaulting to the field's
default. `int | None` and `str | None` fields take the inner type; a bool field
takes `true/false/1/0/yes/no`.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _parse_bool(text: str) -> bool:
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _arg_type(annotation: Any) -> Any:
    # `int | None` -> int: None is only ever the default, never typed on a command line.
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"unsupported union annotation {annotation}")
        annotation = inner[0]
    return _parse_bool if annotation is bool else annotation


def _default(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def add_config_arguments(parser: argparse.ArgumentParser, config_cls: type) -> None:
    """Add one option per field of the dataclass `config_cls`."""
    hints = typing.get_type_hints(config_cls)
    for field in dataclasses.fields(config_cls):
        default = _default(field)
        flags = ["--" + field.name.replace("_", "-")]
        if "_" in field.name:
            flags.append("--" + field.name)
        parser.add_argument(
            *flags,
            dest=field.name,
            type=_arg_type(hints[field.name]),
            default=default,
            metavar=field.name.upper(),
            help=(field.metadata.get("help", "") + f" (default: {default})").strip(),
        )


def config_from_args(config_cls: type[T], args: argparse.Namespace) -> T:
    """The dataclass from parsed args, ignoring args that are not its fields."""
    names = {f.name for f in dataclasses.fields(config_cls)}
    return config_cls(**{k: v for k, v in vars(args).items() if k in names})


def parse_config(config_cls: type[T], argv: list[str] | None, prog: str, description: str) -> T:
    # No prefixes: `--lr` must not stand for `--lr-warmup` when a workflow passes its variables.
    parser = argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False)
    add_config_arguments(parser, config_cls)
    return config_from_args(config_cls, parser.parse_args(argv))
