"""Checking a message's fields before anything acts on it: each field's type from its
annotation, and bounds that follow from the field's name (`_FIELD_BOUNDS`)."""

import dataclasses
import functools
import math
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from lanpool.protocol.errors import ErrorCode, ProtocolError, clip
from lanpool.protocol.message_base import Record, record


def build(cls: type, body: dict[str, Any], where: str) -> Any:
    """An instance of the message dataclass `cls` from an unpacked map, every field checked."""
    kwargs = {}
    for name, required, check in _plan(cls):
        if name in body:
            kwargs[name] = check(body[name], where)
        elif required:
            raise ProtocolError(ErrorCode.INVALID_MESSAGE, f"{where}: missing field {name!r}")
    return cls(**kwargs)


Check = Callable[[Any, str], Any]  # (value, the message's tag) -> the value to store, or ProtocolError
_PLANS: dict[type, tuple[tuple[str, bool, Check], ...]] = {}
_SCALARS = (str, bytes, int, float, bool)


def _plan(cls: type) -> tuple[tuple[str, bool, Check], ...]:
    """Each field's (name, required, checker), worked out once per message type: reading the
    annotations and bounds for every message cost more than checking its values."""
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        plan = _PLANS[cls] = tuple(
            (
                f.name,
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                _checker(f.name, hints[f.name], _FIELD_BOUNDS.get(f.name, _DEFAULT_BOUND)),
            )
            for f in dataclasses.fields(cls)
        )
    return plan


def _checker(name: str, tp: Any, bound: "_Bound") -> Check:
    """`_check` of field `name`, with the common cases decided up front: a scalar of its
    exact type, and None for an optional field. Anything else takes `_check`'s walk, so
    every value meets the same rules and gets the same error as before."""
    fast_tp: Any = tp
    optional = False
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        options = typing.get_args(tp)
        if len(options) == 2 and type(None) in options:
            optional = True
            fast_tp = options[0] if options[1] is type(None) else options[1]
    if fast_tp not in _SCALARS or fast_tp is float or (fast_tp is str and bound.pattern is not None):
        fast_tp = None  # floats are coerced and checked finite, patterns matched: `_check` does it
    return functools.partial(_check_field, name=name, tp=tp, bound=bound, fast_tp=fast_tp, optional=optional)


def _check_field(value: Any, where: str, name: str, tp: Any, bound: "_Bound", fast_tp: Any, optional: bool) -> Any:
    if value is None and optional:
        return None
    if fast_tp is not None and type(value) is fast_tp:
        if fast_tp is int:
            if not bound.lo <= value <= bound.hi:
                raise _invalid(f"{where}.{name}", f"out of range ({bound.lo} to {bound.hi})")
        elif fast_tp is not bool:  # str or bytes
            if bound.max_len is not None and len(value) > bound.max_len:
                unit = "characters" if fast_tp is str else "bytes"
                raise _invalid(f"{where}.{name}", f"{len(value)} {unit}, at most {bound.max_len}")
            if bound.text and fast_tp is str and not value.isprintable():
                raise _invalid(f"{where}.{name}", "holds control or invisible characters")
        return value
    return _check(value, tp, f"{where}.{name}", bound)


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@record
class _Bound(Record):
    """What a field's scalars may be, beyond their type: every str, int and float in
    the field (list items, dict keys and values too) is held to it."""

    max_len: int | None = None  # characters of a str, bytes of a bytes
    # Printable only (str.isprintable: no control, format or separator character but ' ', so no
    # escape sequence nor a right-to-left override): the value is printed, or becomes a label.
    text: bool = False
    pattern: re.Pattern[str] | None = None  # a str must match (the empty str always may: "not set")
    pattern_says: str = "must be letters, digits, '_', '.' or '-', not starting with '.', '_' or '-'"
    lo: int | float = INT64_MIN
    hi: int | float = INT64_MAX


# Bounds follow from a field's name, wherever it appears, so every message that
# carries a job_id (or a message added later) is held to the same rule.
# Ints default to int64: what SQLite stores and msgpack's signed range, so no
# 2**64-1 from a peer turns into an OverflowError later. Floats must be finite.
_DEFAULT_BOUND = _Bound()
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # used in paths: no '/', no leading '.', no '..'
# A name (a runner's, a run's, a workflow's) may be shown as a path or become part of one.
_NAME = _Bound(
    max_len=256,
    text=True,
    pattern=re.compile(r"(?!/)(?!\.\.\Z).*"),
    pattern_says="must not start with '/' nor be '..'",
)
_PATH = _Bound(max_len=4096, text=True)
_WORD = _Bound(max_len=64, text=True)
_COUNT = _Bound(lo=0, hi=2**62)
# A blob's name in the runner's cache.
_SHA256_BOUND = _Bound(max_len=64, pattern=re.compile(r"[0-9a-f]{64}"), pattern_says="must be 64 lowercase hex digits")
_FIELD_BOUNDS: dict[str, _Bound] = {
    "job_id": _Bound(max_len=128, pattern=_ID),
    "name": _NAME,
    "run_name": _NAME,
    "workflow": _NAME,
    "label": _NAME,
    "image": _Bound(max_len=1024, text=True),
    "agent_version": _WORD,
    "client_version": _WORD,
    "code": _WORD,
    "state": _WORD,
    "stream": _WORD,
    "pull": _WORD,
    "executor": _WORD,
    "python": _Bound(
        max_len=16,
        text=True,
        pattern=re.compile(r"[0-9]{1,3}(\.[0-9]{1,4}){0,2}"),
        pattern_says="must be a version such as 3.10",
    ),
    "requirements": _PATH,
    "masked": _Bound(max_len=64 * 1024),  # SubmitJob's secret texts (env values may hold newlines too)
    "workspace": _PATH,
    "working_dir": _PATH,
    "path": _PATH,
    "link": _PATH,
    "sha256": _SHA256_BOUND,
    "sha256s": _SHA256_BOUND,
    "artifacts": _PATH,  # SubmitJob's paths; JobStatus's ArtifactFile fields have their own names
    "public_key": _Bound(max_len=16 * 1024, text=True),
    "pake": _Bound(max_len=1024),  # bytes: a PAKE message and a key confirmation are tens of bytes
    "confirm": _Bound(max_len=1024),
    "message": _Bound(max_len=64 * 1024),
    "error": _Bound(max_len=64 * 1024),
    # Hello's and SubmitJob's resources: counts and sizes, names like "RTX 4090".
    "resources": _Bound(max_len=256, text=True, lo=0, hi=2**53),
    "protocol_version": _Bound(lo=0, hi=2**31 - 1),
    "seq": _COUNT,
    "from_seq": _COUNT,
    "log_lines": _COUNT,
    "artifacts_total": _COUNT,  # JobStatus's, and GetStatus's page start
    "artifacts_from": _COUNT,
    "size": _COUNT,
    "offset": _COUNT,
    "features": _WORD,
    "mode": _Bound(lo=0, hi=0o7777),
    "node": _Bound(lo=0, hi=65535),
    "port": _Bound(lo=1, hi=65535),  # DirectOffer's
    "cert_sha256": _SHA256_BOUND,
    "token": _Bound(max_len=64),
    "ports": _Bound(lo=1, hi=65535),
    "port_count": _Bound(lo=0, hi=16),  # SubmitJob's `ports: N`: the runner allows 16 ports in all
    "exit_code": _Bound(lo=-(2**31), hi=2**32 - 1),  # negative: killed by a signal
    "grace_s": _Bound(lo=0, hi=30 * 24 * 3600),
    # Runner-side queue, time limits and retries: bounded so that no absurd value
    # (a limit of 10**18 seconds, a million retries) reaches a runner's timers.
    "position": _COUNT,
    "reason": _Bound(max_len=1024, text=True),
    "attempt": _Bound(lo=0, hi=100),
    "retry_limit": _Bound(lo=0, hi=100),
    "retry_on": _WORD,
    "max_duration_s": _Bound(lo=0, hi=366 * 24 * 3600),
    "idle_s": _Bound(lo=0, hi=366 * 24 * 3600),  # a dev environment's idle limit
    "retry_delay_s": _Bound(lo=0, hi=7 * 24 * 3600),
    "after": _Bound(max_len=128, pattern=_ID),  # a DAG step's dependencies (job ids)
    "priority": _Bound(lo=-1000, hi=1000),  # orders one owner's waiting jobs (a workflow's `priority:`)
    "run_key": _Bound(max_len=128, text=True),
    # A detached gang's member (SubmitJob.gang, agent/gang/hub.py).
    "gang_id": _Bound(max_len=64, pattern=_ID),
    "gang_size": _Bound(lo=2, hi=256),
    "gang_rank": _Bound(lo=0, hi=255),
    "coordinator": _Bound(max_len=300, text=True),
    "host_key": _Bound(max_len=16 * 1024, text=True),
    # Hello's dev sshd (protocol/shell_sshd.py): a user name as the offer line carries it, and the
    # base64 of an ed25519 public key blob (what goes into a known_hosts line and an ssh_config).
    "sshd_user": _Bound(
        max_len=33, pattern=re.compile(r"[a-z_][a-z0-9_.-]{0,31}\$?"), pattern_says="must be a POSIX user name"
    ),
    "sshd_host_key": _Bound(
        max_len=68, pattern=re.compile(r"[A-Za-z0-9+/]{68}"), pattern_says="must be an ed25519 key's base64"
    ),
    "gang_token": _Bound(max_len=128, text=True),
    "gang_order": _Bound(lo=0),
    "submitted_at": _Bound(lo=0),
    "started_at": _Bound(lo=0),
    "finished_at": _Bound(lo=0),
}


def _check(value: Any, tp: Any, where: str, bound: _Bound = _DEFAULT_BOUND) -> Any:
    """Validate `value` against the annotation `tp` and the field's `bound`; returns the value to store."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        problem = None
        for option in typing.get_args(tp):
            try:
                return _check(value, option, where, bound)
            except ProtocolError as exc:
                # The type matched but the value is out of bounds: say that, not "expected X | Y".
                problem = problem or (exc if _type_matches(value, option) else None)
        raise problem or _mistyped(where, tp, value)
    if tp is type(None):
        if value is None:
            return None
        raise _mistyped(where, tp, value)
    if origin is list:
        if not isinstance(value, list):
            raise _mistyped(where, tp, value)
        (item_tp,) = typing.get_args(tp)
        return [_check(v, item_tp, f"{where}[{i}]", bound) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _mistyped(where, tp, value)
        key_tp, val_tp = typing.get_args(tp)
        return {
            _check(k, key_tp, where, bound): _check(v, val_tp, f"{where}[{clip(repr(k), 40)}]", bound)
            for k, v in value.items()
        }
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # a nested message struct (hints are classes)
        if not isinstance(value, dict):
            raise _mistyped(where, tp, value)
        return build(tp, value, where)
    if not _type_matches(value, tp):
        if tp in (float, int, str, bytes, bool):
            raise _mistyped(where, tp, value)
        raise TypeError(f"protocol schema uses an unsupported type {tp!r} at {where}")
    if tp is float:
        try:
            value = float(value)
        except OverflowError:  # an int past a double's range
            value = math.inf
        if not math.isfinite(value):
            raise _invalid(where, "must be a finite number")
    if tp in (int, float) and not bound.lo <= value <= bound.hi:
        raise _invalid(where, f"out of range ({bound.lo} to {bound.hi})")
    if tp in (str, bytes) and bound.max_len is not None and len(value) > bound.max_len:
        raise _invalid(where, f"{len(value)} {'characters' if tp is str else 'bytes'}, at most {bound.max_len}")
    if tp is str:
        if bound.text and not value.isprintable():
            raise _invalid(where, "holds control or invisible characters")
        if bound.pattern is not None and value and not bound.pattern.fullmatch(value):
            raise _invalid(where, bound.pattern_says)
    return value


def _type_matches(value: Any, tp: Any) -> bool:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # an optional struct: say what is wrong inside it
        return isinstance(value, dict)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return tp in (str, bytes, bool) and isinstance(value, tp)


def name_problem(value: str) -> str:
    """Why `value` cannot be a name on the wire (a runner's, a run's, a workflow's): the rule the
    decoders hold a peer to, for the agent's own `--name` before it is sent; "" when it can."""
    try:
        _check(value, str, "", _NAME)
    except ProtocolError as exc:
        return exc.message.removeprefix(": ")
    return ""


def _invalid(where: str, problem: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_MESSAGE, f"{where}: {problem}")


def _mistyped(where: str, tp: Any, value: Any) -> ProtocolError:
    name = getattr(tp, "__name__", str(tp))
    return ProtocolError(ErrorCode.INVALID_MESSAGE, f"{where}: expected {name}, got {type(value).__name__}")
