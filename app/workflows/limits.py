"""A workflow's time limit and retries (`max_duration: 2h`, `retry: {on: [failure, lost],
limit: 3, delay: 30s}`), as dstack spells them; the runner keeps both (agent.jobs.limits)."""

import re
from collections.abc import Callable
from typing import Any

from lanpool.app.workflows.model import WorkflowError, flag

RETRY_ON = ("failure", "lost")
RETRY_KEYS = ("on", "limit", "delay")
MAX_DURATION_S = 366 * 24 * 3600  # the wire's bound (protocol.schema)
MAX_RETRIES = 100
MAX_DELAY_S = 7 * 24 * 3600
_DURATION = re.compile(r"^\s*(\d{1,9}(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any, what: str, most: float) -> float:
    """`2h`, `90m`, `30s`, `1d` or a number of seconds; ValueError naming `what` otherwise."""
    m = _DURATION.match(str(value)) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None
    seconds = float(m.group(1)) * _UNITS[m.group(2).lower()] if m else -1.0
    if not m or seconds <= 0 or seconds > most:
        raise ValueError(f"{what} {str(value)[:40]!r} is not a duration like 2h, 90m or 30s (at most {most:g}s)")
    return seconds


def parse_limits(item: Any, err: Callable[[str, str], WorkflowError]) -> tuple[float, list[str], int, float]:
    """max_duration seconds (0: none), and retry's on, limit and delay seconds."""
    max_duration = 0.0
    if item.get("max_duration") is not None and flag(item["max_duration"]) is not False:  # `off`: no limit
        try:
            max_duration = parse_duration(item["max_duration"], "'max_duration'", MAX_DURATION_S)
        except ValueError as exc:
            raise err(str(exc), "max_duration") from None
    retry = item.get("retry")
    if retry is None or flag(retry) is False:
        return max_duration, [], 0, 0.0
    if flag(retry):
        retry = {}
    if not isinstance(retry, dict):
        raise err("'retry' must be a mapping like {on: [failure], limit: 3, delay: 30s}", "retry")
    unknown = set(retry) - set(RETRY_KEYS)
    if unknown:
        raise err(f"'retry' takes {', '.join(RETRY_KEYS)}, not {sorted(map(str, unknown))}", "retry")
    on = retry.get("on", ["failure"])
    on = [on] if isinstance(on, str) else on
    if not isinstance(on, list) or not on or any(e not in RETRY_ON for e in on):
        raise err(f"'retry.on' must list {' and/or '.join(RETRY_ON)}, not {str(on)[:60]!r}", "retry")
    limit = retry.get("limit", 1)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RETRIES:
        raise err(f"'retry.limit' must be a whole number from 1 to {MAX_RETRIES}, not {str(limit)[:40]!r}", "retry")
    delay = 0.0
    if retry.get("delay") not in (None, 0):
        try:
            delay = parse_duration(retry["delay"], "'retry.delay'", MAX_DELAY_S)
        except ValueError as exc:
            raise err(str(exc), "retry") from None
    return max_duration, list(dict.fromkeys(on)), limit, delay
