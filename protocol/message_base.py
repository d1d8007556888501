"""The base class of the wire messages and records, and `@record`, which makes them.

A message or record is `@record` on `Message` (or `Record`): a frozen dataclass to type
checkers, tools and `dataclasses.fields()/replace()/asdict()`, whose methods are written once
here instead of compiled per class. On Python 3.11 `dataclass` compiles each generated method
with its own `exec`: `__init__`, the frozen `__setattr__`/`__delattr__`, `__eq__`, `__hash__`
and `__repr__` cost ~0.4 ms a class, and ~40 classes made ~17 ms of every `app headless
runners`. `record` lets `dataclass` collect the fields (it compiles nothing with
init, eq, repr and frozen off), then gives the class a shared `__init__` built from them and
the shared frozen `__setattr__`/`__delattr__`.

`Record` is the same without the wire: the controller's workflows, store rows and views use
it, and it honours `field(compare=False)` / `field(repr=False)`.
"""

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform


class Record:
    """Field-wise equality (same class only), hash and repr, as `dataclass` generates them."""

    __slots__ = ()

    def _values(self, flag: str = "compare") -> tuple[Any, ...]:
        me: Any = self  # a dataclass instance: the subclasses are
        return tuple(getattr(self, f.name) for f in dataclasses.fields(me) if getattr(f, flag))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            assert isinstance(other, Record)
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self) -> int:
        me: Any = self  # dataclass hashes the fields that compare, unless a field says otherwise
        return hash(
            tuple(getattr(self, f.name) for f in dataclasses.fields(me) if (f.compare if f.hash is None else f.hash))
        )

    def __repr__(self) -> str:
        me: Any = self
        inner = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(me) if f.repr)
        return f"{type(self).__qualname__}({inner})"


class Message(Record):
    """The base of the wire messages (protocol/messages.py, transfer_messages.py, pairing_messages.py)."""

    __slots__ = ()


_R = TypeVar("_R", bound=type[Record])


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: _R) -> _R:
    """`@dataclass(frozen=True)` for a `Record` subclass, without compiling anything per class.

    Supports what these classes use: defaults, `field(default_factory=...)`, `field(init=False)`
    with a default, and `__post_init__`; not `InitVar`, `kw_only` or `slots`."""
    if not (isinstance(cls, type) and issubclass(cls, Record)):
        raise TypeError(f"@record is for Record subclasses, not {cls!r}")
    own = [name for name in ("__init__", "__setattr__", "__delattr__") if name in cls.__dict__]
    if own:  # record writes these (dataclass(frozen=True) refuses a class that has them, too)
        raise TypeError(f"@record writes {', '.join(own)} of {cls.__qualname__}: use __post_init__, or @dataclass")
    if not cls.__dict__.get("__doc__"):
        cls.__doc__ = cls.__qualname__  # else dataclass() computes one with inspect.signature (~0.25 ms)
    dataclasses.dataclass(cls, init=False, repr=False, eq=False)  # fields, __match_args__: nothing compiled
    made: Any = cls  # given methods below, which type checkers forbid on a class
    # What the class is: frozen. dataclass() reads this when a subclass is made (a frozen
    # dataclass may not inherit from a non-frozen one), as do tools that ask.
    made.__dataclass_params__.frozen = True
    made.__init__ = _init_for(cls)
    made.__setattr__ = _frozen_setattr
    made.__delattr__ = _frozen_delattr
    return cls


def _frozen_setattr(self: object, name: str, value: object) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: object, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _init_for(cls: Any) -> Callable[..., None]:
    """An `__init__` taking the fields as `dataclass` would (in order, or by name), with the
    same TypeErrors for a missing, unknown or repeated argument."""
    fields = dataclasses.fields(cls)
    declared: dict[str, dataclasses.Field[Any]] = cls.__dataclass_fields__  # InitVars too
    if any(f.kw_only is True for f in fields) or any(
        isinstance(f.type, dataclasses.InitVar) for f in declared.values()
    ):
        raise TypeError(f"@record does not support kw_only or InitVar fields ({cls.__qualname__}): use @dataclass")
    names = tuple(f.name for f in fields if f.init)
    known = frozenset(names)
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    factories = tuple((f.name, f.default_factory) for f in fields if f.default_factory is not dataclasses.MISSING)
    required = tuple(n for n in names if n not in defaults and all(n != m for m, _ in factories))
    post_init = hasattr(cls, "__post_init__")
    n = len(names)
    every_field_given = len(fields) == n  # no field(init=False): n arguments set every field
    where = f"{cls.__qualname__}()"

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        values = self.__dict__  # a new instance's: empty; writing it skips the frozen __setattr__
        if len(args) == n and not kwargs and every_field_given:  # in order: the decoders' and stores' way
            values.update(zip(names, args, strict=True))
        else:
            if len(args) > n:
                raise TypeError(f"{where} takes {n} positional arguments but {len(args)} were given")
            values.update(zip(names, args, strict=False))  # the first len(args) fields
            for name in kwargs:
                if name not in known:
                    raise TypeError(f"{where} got an unexpected keyword argument {name!r}")
                if name in values:
                    raise TypeError(f"{where} got multiple values for argument {name!r}")
            values.update(kwargs)
            missing = [name for name in required if name not in values]
            if missing:
                raise TypeError(f"{where} missing required argument(s): {', '.join(map(repr, missing))}")
            for name, value in defaults.items():
                if name not in values:
                    values[name] = value
            for name, factory in factories:
                if name not in values:
                    values[name] = factory()
        if post_init:
            self.__post_init__()

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__
