"""protocol/message_base.py: the messages compare, hash and print as `dataclass` made them."""

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import pytest

from protocol import AGENT_MESSAGES, CLIENT_MESSAGES, FileEntry, Hello, JobAccepted, Ping, Pong
from protocol.message_base import Message


@dataclass(frozen=True)
class _Plain:
    """What `dataclass` generates, to compare with."""

    TAG: ClassVar[str] = "plain"
    job_id: str
    workspace: str
    master_port: int = 0
    tags: tuple[str, ...] | list[str] = ()


@dataclass(frozen=True, eq=False, repr=False)
class _Ours(Message):
    TAG: ClassVar[str] = "plain"
    job_id: str
    workspace: str
    master_port: int = 0
    tags: tuple[str, ...] | list[str] = ()


def test_every_message_uses_the_shared_base() -> None:
    for cls in {*AGENT_MESSAGES.values(), *CLIENT_MESSAGES.values(), FileEntry}:
        assert issubclass(cls, Message), cls
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]


def test_repr_eq_hash_as_dataclass_generates() -> None:
    plain, ours = _Plain("j1", "/w", 5), _Ours("j1", "/w", 5)
    assert repr(ours) == repr(plain).replace("_Plain", "_Ours")
    assert repr(JobAccepted("j1", "/w")) == "JobAccepted(job_id='j1', workspace='/w', master_port=0)"
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
        del hello.name  # type: ignore[misc]
    assert hello.name == "box"
