"""protocol/schema.py checks each message type by a plan built once: the plan's
fast paths must accept and refuse exactly what the full `_check` walk does, with the same words."""

import dataclasses
import re
import typing

import pytest

from lanpool.protocol import AGENT_MESSAGES, CLIENT_MESSAGES, ProtocolError, schema

# Values of every kind a peer can send: right and wrong types, bounds' edges, control characters.
SAMPLES: list[object] = [
    None,
    True,
    0,
    -1,
    7,
    2**62 + 1,
    2**63,
    1.5,
    float("inf"),
    "",
    "abc",
    "a/b",
    ".hidden",
    "a\x1bb",
    "x" * 5000,
    "0" * 64,
    b"",
    b"line\n",
    b"x" * 70_000,
    [],
    ["abc"],
    {},
    {"k": 1},
]


def _outcome(fn: typing.Callable[..., object], *args: object) -> tuple[str, object]:
    try:
        return ("ok", fn(*args))
    except ProtocolError as exc:
        return ("refused", str(exc))


@pytest.mark.parametrize("cls", sorted({*AGENT_MESSAGES.values(), *CLIENT_MESSAGES.values()}, key=lambda c: c.TAG))
def test_the_plan_decides_as_the_full_check_does(cls: type) -> None:
    hints = typing.get_type_hints(cls)
    plan = {name: check for name, _required, check in schema._plan(cls)}
    for f in dataclasses.fields(cls):
        bound = schema._FIELD_BOUNDS.get(f.name, schema._DEFAULT_BOUND)
        for value in SAMPLES:
            fast = _outcome(plan[f.name], value, cls.TAG)
            full = _outcome(schema._check, value, hints[f.name], f"{cls.TAG}.{f.name}", bound)
            assert fast == full, (cls.TAG, f.name, value)


def test_a_log_chunk_with_a_bad_field_is_refused_with_where_and_why() -> None:
    from lanpool.protocol import LogChunk, decode_agent_message

    good = {"t": "log", "job_id": "j1", "seq": 0, "stream": "out", "data": b"a\n"}
    assert decode_agent_message(good) == LogChunk("j1", 0, "out", b"a\n")
    for field, value, says in [
        ("job_id", "../etc", "log.job_id: must be letters"),
        ("seq", -1, "log.seq: out of range"),
        ("seq", True, "log.seq: expected int, got bool"),
        ("node", 70_000, "log.node: out of range"),
        ("stream", "o\x1bt", "log.stream: holds control or invisible characters"),
        ("at", float("nan"), "log.at: must be a finite number"),
        ("data", "text", "log.data: expected bytes, got str"),
    ]:
        with pytest.raises(ProtocolError, match=says.replace(".", r"\.")):
            decode_agent_message({**good, field: value})
    with pytest.raises(ProtocolError, match="missing field 'data'"):
        decode_agent_message({k: v for k, v in good.items() if k != "data"})


def test_a_name_from_a_peer_is_printable_and_never_a_path_of_its_own() -> None:
    """Found by the decoder fuzzing (Paired(name='/')): a runner's, a run's or a workflow's name may
    be shown as a path or become part of one, and is printed: no '/' to start, not '..', nothing
    invisible (a right-to-left override, a zero-width joiner)."""
    from lanpool.protocol import Paired, decode_agent_message

    assert decode_agent_message({"t": "paired", "name": "gpu-box 2"}) == Paired("gpu-box 2")
    for value, says in [
        ("/", "must not start with '/'"),
        ("/etc", "must not start with '/'"),
        ("..", "must not start with '/' nor be '..'"),
        ("box\u202egnp.exe", "holds control or invisible characters"),
        ("a\u200db", "holds control or invisible characters"),
        ("a\u00a0b", "holds control or invisible characters"),
    ]:
        with pytest.raises(ProtocolError, match=re.escape(f"paired.name: {says}")):
            decode_agent_message({"t": "paired", "name": value})
