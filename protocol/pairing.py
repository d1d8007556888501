"""The pairing exchange: SPAKE2 over the short code, bound to both keys.

Both sides prove they know the code without sending it, as magic-wormhole does:

    controller (SPAKE2 side A)               runner (side B)
    PairStart{pake_A, controller key}   ->
                                        <-   PairReply{pake_B, runner proof}
    checks the runner's proof
    PairConfirm{controller proof, label} ->
                                             checks it, authorizes the key
                                        <-   Paired{name}

The SPAKE2 identities are the two public keys ("type base64"): idA the key the
controller authenticated the SSH connection with, idB the runner's host key as
the controller saw it. A relay in the middle shows the controller its own host
key (or authenticates to the runner with its own client key), so the two sides
derive different keys and no proof verifies. Each connection allows one guess:
someone without the code learns nothing it can test offline.

The runner proves first, and the controller sends nothing more (not even its
label) to a runner whose proof fails.
"""

import hashlib
import hmac
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # spake2 costs ~20 ms to import: only pairing needs it, not every `run`
    from spake2 import SPAKE2_A, SPAKE2_B

# No 0/O, 1/I/L: codes are read off a screen and typed.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8  # shown as ABCD-EFGH: 31^8 ~ 2^40, with 5 guesses a minute per address
PAKE_MESSAGE_BYTES = 33  # side byte + an ed25519 group element
PROOF_BYTES = 32  # HMAC-SHA256
MAX_LABEL_CHARS = 64
_LABEL_PUNCTUATION = frozenset(" -_.@:+()/")
# The user name a controller connects with to pair: the runner accepts any key
# for it while a code is active, and such a connection may only pair.
PAIRING_USER = "lanpool-pair"

_RUNNER_LABEL = b"lanpool pairing v2: runner knows the code"
_CONTROLLER_LABEL = b"lanpool pairing v2: controller knows the code"


class PairingFailed(Exception):
    """The peer's PAKE message is malformed or its proof does not verify."""


def normal_code(code: str) -> str:
    """The code as compared: case, dashes and spaces do not matter."""
    return code.strip().upper().replace("-", "").replace(" ", "")


def sanitize_label(label: str) -> str:
    """A controller's label fit for an authorized_keys comment: letters, digits,
    space and a few punctuation marks, one line, at most MAX_LABEL_CHARS. The
    controller sends it so; the runner applies it again to what it receives."""
    kept = []
    for ch in label:
        if ch in _LABEL_PUNCTUATION or (ch.isalnum() and ch.isprintable()):
            kept.append(ch)
        elif unicodedata.category(ch)[0] in "CZ":  # controls, odd spaces, line/paragraph separators
            kept.append(" ")
    return " ".join("".join(kept).split())[:MAX_LABEL_CHARS].strip()


def key_identity(public_key: str) -> bytes:
    """An OpenSSH public key as the PAKE identity: "type base64", no comment."""
    return " ".join(public_key.split()[:2]).encode("ascii", "replace")


class _Side:
    def __init__(self, spake: "SPAKE2_A | SPAKE2_B", controller_key: str, runner_key: str) -> None:
        self._spake = spake
        self._ids = _lp(key_identity(controller_key)) + _lp(key_identity(runner_key))
        self._key: bytes | None = None
        self.message = spake.start()

    def _finish(self, peer_message: bytes) -> None:
        if len(peer_message) != PAKE_MESSAGE_BYTES:
            raise PairingFailed(f"pairing message of {len(peer_message)} bytes, expected {PAKE_MESSAGE_BYTES}")
        from spake2.spake2 import SPAKEError

        try:
            self._key = self._spake.finish(peer_message)
        except (SPAKEError, ValueError) as exc:
            raise PairingFailed(f"malformed pairing message: {exc}") from None

    def _proof(self, label: bytes) -> bytes:
        assert self._key is not None, "finish the exchange first"
        return hmac.new(self._key, label + self._ids, hashlib.sha256).digest()

    def _verify(self, label: bytes, proof: bytes) -> bool:
        return self._key is not None and hmac.compare_digest(self._proof(label), proof)


class ControllerPake(_Side):
    """The controller's half: `message` goes in PairStart."""

    def __init__(self, code: str, controller_key: str, runner_key: str) -> None:
        from spake2 import SPAKE2_A

        ids = key_identity(controller_key), key_identity(runner_key)
        super().__init__(SPAKE2_A(normal_code(code).encode(), idA=ids[0], idB=ids[1]), controller_key, runner_key)

    def check_runner(self, runner_message: bytes, runner_proof: bytes) -> bytes:
        """Verify PairReply; returns the controller's proof for PairConfirm. Raises PairingFailed."""
        self._finish(runner_message)
        if not self._verify(_RUNNER_LABEL, runner_proof):
            raise PairingFailed("the runner's proof does not verify")
        return self._proof(_CONTROLLER_LABEL)


class RunnerPake(_Side):
    """The runner's half: `message` and `proof` go in PairReply."""

    def __init__(self, code: str, controller_key: str, runner_key: str, controller_message: bytes) -> None:
        from spake2 import SPAKE2_B

        ids = key_identity(controller_key), key_identity(runner_key)
        super().__init__(SPAKE2_B(normal_code(code).encode(), idA=ids[0], idB=ids[1]), controller_key, runner_key)
        self._finish(controller_message)
        self.proof = self._proof(_RUNNER_LABEL)

    def controller_proved(self, proof: bytes) -> bool:
        return self._verify(_CONTROLLER_LABEL, proof)


def _lp(data: bytes) -> bytes:
    # Length-prefixed, so ("ab", "c") and ("a", "bc") differ.
    return len(data).to_bytes(4, "big") + data
