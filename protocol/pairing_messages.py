"""The pairing messages: the PAKE of protocol/pairing.py on a pairing connection.

Controller -> agent: PairStart, then PairConfirm once the runner's proof verified;
agent -> controller: PairReply, then Paired. Registered in protocol/messages.py.
"""

from typing import ClassVar

from lanpool.protocol.message_base import Message, record

# -- controller -> agent ----------------------------------------------------


@record
class PairStart(Message):
    """The controller's half of the pairing PAKE, on a pairing connection.
    `public_key` must be the key that connection authenticated with."""

    TAG: ClassVar[str] = "pair_start"
    pake: bytes
    public_key: str


@record
class PairConfirm(Message):
    """The controller's proof that it knows the code, sent only after the runner's
    proof verified; `label` names the controller in the runner's authorized_keys."""

    TAG: ClassVar[str] = "pair_confirm"
    confirm: bytes
    label: str = ""


# -- agent -> controller ----------------------------------------------------


@record
class PairReply(Message):
    """The runner's half of the pairing PAKE and its proof that it knows the code
    (protocol/pairing.py); the controller checks it before answering."""

    TAG: ClassVar[str] = "pair_reply"
    pake: bytes
    confirm: bytes


@record
class Paired(Message):
    """The controller's key is now authorized; reply to a valid PairConfirm."""

    TAG: ClassVar[str] = "paired"
    name: str
