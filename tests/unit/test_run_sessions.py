"""A run's probe sessions (app/runners/sessions.py): taken back to submit on only with the host
key pinned for that address now; anything else is closed, never used."""

from types import SimpleNamespace
from typing import Any, cast

from lanpool.app.runners.sessions import RunSessions


class _Conn:
    def __init__(self, closed: bool = False) -> None:
        self.closed = closed

    def is_closed(self) -> bool:
        return self.closed


def _session(host_key: str, closed: bool = False) -> Any:
    conn = _Conn(closed)
    return SimpleNamespace(host_key=host_key, conn=conn, close=lambda: setattr(conn, "closed", True))


def test_a_kept_probe_session_is_taken_once_with_its_pinned_key():
    kept, session = RunSessions(), _session("ssh-ed25519 AAAA")
    kept.keep("127.0.0.1", 7000, cast(Any, session))
    assert kept.take("127.0.0.1", 7000, "ssh-ed25519 AAAA") is session
    assert kept.take("127.0.0.1", 7000, "ssh-ed25519 AAAA") is None, "once only"
    assert not session.conn.closed


def test_a_kept_session_with_another_key_or_none_pinned_or_closed_is_closed_not_used():
    kept = RunSessions()
    for pinned, session in (
        ("ssh-ed25519 BBBB", _session("ssh-ed25519 AAAA")),  # the pin changed since the probe
        (None, _session("ssh-ed25519 AAAA")),  # nothing pinned there now
        ("ssh-ed25519 AAAA", _session("ssh-ed25519 AAAA", closed=True)),  # the runner hung up
    ):
        kept.keep("h", 1, cast(Any, session))
        assert kept.take("h", 1, pinned) is None
        assert session.conn.closed
    other = _session("ssh-ed25519 AAAA")
    kept.keep("h", 2, cast(Any, other))
    assert kept.take("h", 3, "ssh-ed25519 AAAA") is None, "another address's session is never handed out"
    kept.close()
    assert other.conn.closed, "what the run did not take is closed with its placement"


def test_a_refresh_is_answered_from_a_probe_only_just_made():
    kept = RunSessions()
    assert not kept.fresh()
    kept.probed()
    assert kept.fresh()
    kept._probed_at = 0.0  # long ago
    assert not kept.fresh()
