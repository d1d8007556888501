"""The base class of the wire messages: equality, hash and repr written once.

Each message is `@dataclass(frozen=True, eq=False, repr=False)` on `Message`: the same
`__eq__`, `__hash__` and `__repr__` that `dataclass` would generate, but not compiled per
class. On Python 3.11 `dataclass` compiles each generated method with its own `exec`
(~0.3 ms for these three per class); with ~30 messages that was ~10 ms of every `app
headless run` before its first line (issue #17). `__init__` and the frozen `__setattr__`
/ `__delattr__` are still generated.

`Record` is the same without the wire: the controller's parsed workflows use it (they are
built on every `run` too), and it honours `field(compare=False)` / `field(repr=False)`.
"""

import dataclasses
from typing import Any


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
