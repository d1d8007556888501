"""One-time pairing codes: how a new controller gets its key authorized without
copying files around, and how it learns that this runner is the one showing the code.

A fresh agent (no authorized controller) makes a code and shows it. A controller
connects as PAIRING_USER with its own key; while a code is active the agent
accepts any key for that user, and the connection is pairing-only, bound to the
code active at that moment (it cannot complete a later one, and closes when its
code expires). On it the two sides run the PAKE of protocol/pairing.py; only a
controller that proves the code gets its key added to authorized_keys.

Codes expire and are used once (a controller that was already authorized does
not use it up). Every attempt that does not end proven counts against its source
address: each later attempt from there waits a second, and MAX_FAILURES lock that
address (only that one) out for LOCKOUT_S.
"""

import asyncio
import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lanpool.protocol import ErrorCode, PairConfirm, Paired, PairReply, PairStart
from lanpool.protocol.pairing import CODE_ALPHABET, CODE_LENGTH, PairingFailed, RunnerPake, key_identity, sanitize_label

log = logging.getLogger(__name__)

CODE_TTL_S = 15 * 60
MAX_FAILURES = 5  # per source address, then that address is locked out for LOCKOUT_S
LOCKOUT_S = 60.0
RETRY_DELAY_S = 1.0  # each attempt after an unproven one waits this long
_MAX_TRACKED_ADDRESSES = 4096


def new_code() -> str:
    raw = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
    return f"{raw[:4]}-{raw[4:]}"


@dataclass(frozen=True)
class PairingState:
    code: str
    expires_at: float


class Pairing:
    """The agent's current pairing code (a file, so `app agent pair` in another
    process can replace it and `app agent status` can show it)."""

    def __init__(self, path: Path, ttl_s: float = CODE_TTL_S) -> None:
        self.path = path
        self.ttl_s = ttl_s

    def current(self) -> PairingState | None:
        try:
            data = json.loads(self.path.read_text())
            state = PairingState(str(data["code"]), float(data["expires_at"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return state if state.expires_at > time.time() else None

    def issue(self) -> PairingState:
        state = PairingState(new_code(), time.time() + self.ttl_s)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"code": state.code, "expires_at": state.expires_at}))
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.path)
        return state

    def consume(self, state: PairingState) -> None:
        """Use up `state`, unless a newer code replaced it meanwhile."""
        if self.current() == state:
            self.path.unlink(missing_ok=True)

    @property
    def active(self) -> bool:
        return self.current() is not None


class Lockout:
    """Unproven pairing attempts per source address. An attempt counts when it
    starts (so parallel guesses count too) and is forgiven when it is proven."""

    def __init__(self, max_failures: int = MAX_FAILURES, lockout_s: float = LOCKOUT_S) -> None:
        self.max_failures = max_failures
        self.lockout_s = lockout_s
        self._failures: dict[str, int] = {}
        self._locked_until: dict[str, float] = {}

    def locked_for(self, peer: str) -> float:
        """Seconds `peer` stays locked out (0: may try)."""
        left = self._locked_until.get(peer, 0.0) - time.monotonic()
        if left > 0:
            return left
        self._locked_until.pop(peer, None)
        return self.lockout_s if self._failures.get(peer, 0) >= self.max_failures else 0.0

    def begin(self, peer: str) -> bool:
        """Count an attempt; True if an earlier attempt from `peer` was not proven."""
        earlier = self._failures.get(peer, 0)
        if peer not in self._failures and len(self._failures) >= _MAX_TRACKED_ADDRESSES:
            self._failures.clear()  # bounded memory; locked addresses stay locked
            now = time.monotonic()
            self._locked_until = {p: t for p, t in self._locked_until.items() if t > now}
        self._failures[peer] = earlier + 1
        return earlier > 0

    def proven(self, peer: str) -> None:
        self._failures.pop(peer, None)

    def failed(self, peer: str) -> None:
        """The attempt counted by begin() ended unproven (wrong code or abandoned)."""
        n = self._failures.get(peer, 0)
        log.warning("wrong pairing code from %s, or the attempt was abandoned (%d/%d)", peer, n, self.max_failures)
        if n >= self.max_failures:
            self._locked_until[peer] = time.monotonic() + self.lockout_s
            self._failures[peer] = 0
            log.warning(
                "too many wrong pairing codes from %s: pairing locked for %.0fs for that address", peer, self.lockout_s
            )


@dataclass(frozen=True)
class PairingGrant:
    """What a pairing-only connection authenticated with."""

    client_key: str  # "type base64", the key the SSH layer saw proven
    state: PairingState  # the code active then: the only one this connection can complete
    peer: str


class PairingRefused(Exception):
    """A pairing message refused: `code` and `message` go back in an Error reply."""

    def __init__(self, code: ErrorCode, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.close = close  # the connection is of no further use: close it


class PairingResponder:
    """The runner's side of the PAKE on one pairing-only connection (one attempt)."""

    def __init__(
        self,
        pairing: Pairing,
        lockout: Lockout,
        grant: PairingGrant,
        host_key: str,
        name: str,
        authorize: Callable[[str, str], bool],
    ) -> None:
        """`authorize(key, label)` adds the key to authorized_keys; False if it was there."""
        self._pairing = pairing
        self._lockout = lockout
        self._grant = grant
        self._host_key = host_key
        self._name = name
        self._authorize = authorize
        self._pake: RunnerPake | None = None
        self._attempted = False
        self._done = False

    def _check_code(self) -> None:
        if self._pairing.current() != self._grant.state:
            raise PairingRefused(
                ErrorCode.NOT_PAIRED,
                "the pairing code this connection started with expired or "
                "was replaced: get the current one with `app agent status` on the runner",
                close=True,
            )

    async def start(self, msg: PairStart) -> PairReply:
        peer = self._grant.peer
        if self._attempted:
            raise PairingRefused(ErrorCode.BAD_REQUEST, "one pairing attempt per connection", close=True)
        self._check_code()
        locked = self._lockout.locked_for(peer)
        if locked:
            log.warning("pairing attempt from %s refused: locked out for %.0fs more", peer, locked)
            raise PairingRefused(
                ErrorCode.NOT_PAIRED,
                f"pairing from {peer} is locked for {locked:.0f}s more after too many wrong codes",
                close=True,
            )
        if key_identity(msg.public_key) != key_identity(self._grant.client_key):
            raise PairingRefused(
                ErrorCode.BAD_REQUEST,
                "pair_start.public_key is not the key this connection authenticated with",
                close=True,
            )
        self._attempted = True
        if self._lockout.begin(peer):
            await asyncio.sleep(RETRY_DELAY_S)  # each guess after a wrong one costs the guesser a second
            self._check_code()
        try:
            # Pure-Python curve arithmetic (~25 ms): off the loop that streams jobs' logs.
            self._pake = await asyncio.to_thread(
                RunnerPake, self._grant.state.code, self._grant.client_key, self._host_key, msg.pake
            )
        except PairingFailed as exc:
            self.end()
            raise PairingRefused(ErrorCode.BAD_REQUEST, str(exc), close=True) from None
        return PairReply(self._pake.message, self._pake.proof)

    async def confirm(self, msg: PairConfirm) -> Paired:
        if self._pake is None or self._done:
            raise PairingRefused(ErrorCode.BAD_REQUEST, "pair_confirm without a pairing exchange in progress")
        if not self._pake.controller_proved(msg.confirm):
            self.end()
            await asyncio.sleep(RETRY_DELAY_S)
            raise PairingRefused(ErrorCode.NOT_PAIRED, "wrong pairing code", close=True)
        self._check_code()  # another controller may have used it meanwhile (no await from here on)
        label = sanitize_label(msg.label)
        added = self._authorize(self._grant.client_key, label)
        self._done = True
        self._lockout.proven(self._grant.peer)
        if added:
            self._pairing.consume(self._grant.state)
            log.warning("paired with a new controller from %s%s", self._grant.peer, f" ({label})" if label else "")
        else:
            log.info("controller from %s was already paired: the code stays valid", self._grant.peer)
        return Paired(self._name)

    def end(self) -> None:
        """The attempt is over (channel closed, or failed): an unproven one counts."""
        if self._attempted and not self._done:
            self._done = True
            self._lockout.failed(self._grant.peer)
