"""The runner's own queue: jobs that fit the runner but not what is free now
wait there, journalled, and start when room frees, with no controller alive; stop on a
queued job; max_duration and retry kept by the runner. Real agents, real SSH.
The in-process part (unit); the rest: tests/integration/test_runner_queue.py."""

import pytest

from lanpool.protocol import ProtocolError, SubmitJob, decode_client_message
from lanpool.protocol.messages import to_wire


def test_absurd_time_limits_and_retries_are_refused_by_the_bounds():
    for field, value in (
        ("max_duration_s", 1e18),
        ("retry_limit", 10**6),
        ("retry_delay_s", -1),
        ("retry_on", ["x" * 100]),
    ):
        body = to_wire(SubmitJob("j", "r", "w", ["true"]))
        body[field] = value
        with pytest.raises(ProtocolError, match=f"submit.{field}"):
            decode_client_message(body)
