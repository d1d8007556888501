"""protocol/message_base.py: the messages are built, compare, hash and print as `dataclass` made them,
without `dataclass` compiling anything per class (`record`)."""

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from lanpool.protocol import AGENT_MESSAGES, CLIENT_MESSAGES, FileEntry, Hello, JobAccepted, Ping, Pong
from lanpool.protocol.message_base import Message, Record, record


@dataclass(frozen=True)
class _Plain:
    """What `dataclass` generates, to compare with."""

    TAG: ClassVar[str] = "plain"
    job_id: str
    workspace: str
    master_port: int = 0
    tags: tuple[str, ...] | list[str] = ()


@record
class _Ours(Message):
    TAG: ClassVar[str] = "plain"
    job_id: str
    workspace: str
    master_port: int = 0
    tags: tuple[str, ...] | list[str] = ()


def test_every_message_uses_the_shared_base() -> None:
    for cls in {*AGENT_MESSAGES.values(), *CLIENT_MESSAGES.values(), FileEntry}:
        assert issubclass(cls, Message), cls
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls


def test_repr_eq_hash_as_dataclass_generates() -> None:
    plain, ours = _Plain("j1", "/w", 5), _Ours("j1", "/w", 5)
    assert repr(ours) == repr(plain).replace("_Plain", "_Ours")
    assert repr(JobAccepted("j1", "/w")) == "JobAccepted(job_id='j1', workspace='/w', ports=[])"
    assert ours == _Ours("j1", "/w", 5) and hash(ours) == hash(_Ours("j1", "/w", 5))
    assert hash(ours) == hash(plain)  # the same tuple of fields (the ClassVar is not one)
    assert ours != _Ours("j1", "/w", 6)
    assert Ping(1) != Pong(1)  # same fields, other class: not equal, as with dataclass
    assert ours != plain and (ours == ("j1", "/w", 5, ())) is False
    with pytest.raises(TypeError):
        hash(_Ours("j1", "/w", 5, ["a"]))  # a list field: unhashable, as with dataclass


def test_messages_stay_frozen() -> None:
    hello = Hello(3, "1.0", "box")
    with pytest.raises(dataclasses.FrozenInstanceError):
        hello.name = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del hello.name
    assert hello.name == "box"


@record
class _Fields(Record):
    """Every kind of field `record` supports."""

    name: str
    count: int = 0
    tags: list[str] = dataclasses.field(default_factory=list)
    derived: str = dataclasses.field(default="", init=False)
    seen: list[str] = dataclasses.field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "derived", f"{self.name}:{self.count}")


def test_record_builds_as_dataclass_does() -> None:
    a = _Fields("x", 2, ["t"])
    assert (a.name, a.count, a.tags, a.derived, a.seen) == ("x", 2, ["t"], "x:2", [])
    b = _Fields(name="y")
    assert (b.count, b.tags, b.derived) == (0, [], "y:0")
    assert b.tags is not _Fields("z").tags and b.seen is not _Fields("z").seen  # a new list each time
    assert _Fields("x", tags=["u"]).tags == ["u"]
    assert JobAccepted("j1", "/w") == JobAccepted(job_id="j1", workspace="/w")
    assert dataclasses.replace(a, count=5).derived == "x:5"  # replace() goes through __init__
    assert dataclasses.asdict(JobAccepted("j1", "/w")) == {"job_id": "j1", "workspace": "/w", "ports": []}
    assert _Fields.__match_args__ == ("name", "count", "tags")
    assert [f.name for f in dataclasses.fields(_Fields)] == ["name", "count", "tags", "derived", "seen"]


@pytest.mark.parametrize(
    ("args", "kwargs", "says"),
    [
        ((), {}, "missing required argument(s): 'name'"),
        (("x", 1, [], 4), {}, "takes 3 positional arguments but 4 were given"),
        (("x",), {"name": "y"}, "got multiple values for argument 'name'"),
        (("x",), {"colour": "red"}, "got an unexpected keyword argument 'colour'"),
        (("x",), {"derived": "d"}, "got an unexpected keyword argument 'derived'"),  # init=False
    ],
)
def test_record_refuses_wrong_arguments_as_dataclass_does(args: tuple, kwargs: dict, says: str) -> None:
    with pytest.raises(TypeError, match=re.escape(f"_Fields() {says}")):
        _Fields(*args, **kwargs)


def test_record_is_frozen_and_only_for_records() -> None:
    a = _Fields("x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.count = 3  # type: ignore[misc]
    assert _Fields.__dataclass_params__.frozen  # type: ignore[attr-defined]

    @dataclass(frozen=True)
    class Child(_Fields):  # a frozen dataclass may extend one: it is frozen
        extra: int = 1

    assert Child("c").extra == 1
    with pytest.raises(TypeError, match="Record subclasses"):
        record(_Plain)  # type: ignore[type-var]
    with pytest.raises(TypeError, match="kw_only or InitVar"):

        @record
        class KeywordOnly(Record):
            a: int = dataclasses.field(default=0, kw_only=True)

    with pytest.raises(TypeError, match="writes __init__ of"):

        @record
        class OwnInit(Record):
            a: int

            def __init__(self) -> None:
                pass

    with pytest.raises(TypeError, match="kw_only or InitVar"):

        @record
        class WithInitVar(Record):
            a: dataclasses.InitVar[int]


def test_record_compiles_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of it: no `exec` per class, where `dataclass` runs one per method."""
    compiled: list[str] = []

    def counted(source: str, *args: Any) -> None:
        compiled.append(source)
        exec(source, *args)

    monkeypatch.setattr(dataclasses, "exec", counted, raising=False)  # a module global shadows the builtin

    @record
    class Lean(Record):
        a: int
        b: list[int] = dataclasses.field(default_factory=list)

    assert compiled == [] and Lean(1).b == []

    @dataclass(frozen=True)
    class Plain:
        a: int

    assert any("__init__" in source for source in compiled)  # the check sees what dataclass compiles
