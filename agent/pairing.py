"""One-time pairing codes: how a new controller gets its key authorized without
copying files around.

A fresh agent (no authorized controller) makes a code and shows it; a
controller that proves the code over SSH (password auth with the code) may send
one Pair message with its public key, which the agent adds to authorized_keys.
Codes expire, are used once, and wrong guesses are slowed down and locked out.
"""

import hmac
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# No 0/O, 1/I/L: codes are read off a screen and typed.
ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_TTL_S = 15 * 60
MAX_FAILURES = 5  # then locked out for LOCKOUT_S
LOCKOUT_S = 60.0


def new_code() -> str:
    raw = "".join(secrets.choice(ALPHABET) for _ in range(8))
    return f"{raw[:4]}-{raw[4:]}"


def _normal(code: str) -> str:
    return code.strip().upper().replace("-", "").replace(" ", "")


@dataclass
class PairingState:
    code: str
    expires_at: float


class Pairing:
    """The agent's current pairing code (persisted so `app agent status` can show it)."""

    def __init__(self, path: Path, ttl_s: float = CODE_TTL_S) -> None:
        self.path = path
        self.ttl_s = ttl_s
        self.failures = 0
        self.locked_until = 0.0

    def current(self) -> PairingState | None:
        try:
            data = json.loads(self.path.read_text())
            state = PairingState(data["code"], float(data["expires_at"]))
        except (OSError, ValueError, KeyError):
            return None
        return state if state.expires_at > time.time() else None

    def issue(self) -> PairingState:
        state = PairingState(new_code(), time.time() + self.ttl_s)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"code": state.code, "expires_at": state.expires_at}))
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.path)
        self.failures = 0
        return state

    def consume(self) -> None:
        self.path.unlink(missing_ok=True)

    @property
    def active(self) -> bool:
        return self.current() is not None

    def check(self, attempt: str, peer: str) -> bool:
        """True if `attempt` is the current code; counts and logs failures."""
        now = time.time()
        if now < self.locked_until:
            log.warning("pairing attempt from %s refused: locked out for %.0fs more", peer, self.locked_until - now)
            return False
        state = self.current()
        if state is not None and hmac.compare_digest(_normal(attempt), _normal(state.code)):
            self.failures = 0
            return True
        self.failures += 1
        log.warning("wrong pairing code from %s (%d/%d)", peer, self.failures, MAX_FAILURES)
        if self.failures >= MAX_FAILURES:
            self.locked_until = now + LOCKOUT_S
            self.failures = 0
            log.warning("too many wrong pairing codes: pairing locked for %.0fs", LOCKOUT_S)
        return False
