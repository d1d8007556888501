"""Mutual pairing (a PAKE over the short code, bound to both keys) against a real agent,
and the attacks on it: wrong codes, a fake runner, a relay in the middle, replayed
pairing connections, label injection. After each, the agent still serves.
The in-process part (unit); the rest: tests/integration/test_pairing.py."""

import pytest

from lanpool.protocol.pairing import ControllerPake, PairingFailed, RunnerPake, sanitize_label


def _exchange(code_a: str, code_b: str, ctl_keys=("ssh-ed25519 CTL",) * 2, runner_keys=("ssh-ed25519 RUN",) * 2):
    """Controller sees (ctl_keys[0], runner_keys[0]), runner sees (ctl_keys[1], runner_keys[1])."""
    ctl = ControllerPake(code_a, ctl_keys[0], runner_keys[0])
    runner = RunnerPake(code_b, ctl_keys[1], runner_keys[1], ctl.message)
    proof = ctl.check_runner(runner.message, runner.proof)
    return runner.controller_proved(proof)


def test_the_pake_needs_the_same_code_and_the_same_two_keys():
    assert _exchange("ABCD-EFGH", "abcd efgh")
    with pytest.raises(PairingFailed):
        _exchange("ABCD-EFGH", "ABCD-EFGJ")
    with pytest.raises(PairingFailed):  # a relay's own host key on the controller's side
        _exchange("ABCD-EFGH", "ABCD-EFGH", runner_keys=("ssh-ed25519 RELAY", "ssh-ed25519 RUN"))
    with pytest.raises(PairingFailed):  # a relay's own client key on the runner's side
        _exchange("ABCD-EFGH", "ABCD-EFGH", ctl_keys=("ssh-ed25519 CTL", "ssh-ed25519 RELAY"))
    ctl = ControllerPake("ABCD-EFGH", "ssh-ed25519 CTL", "ssh-ed25519 RUN")
    for bad in (b"", b"B" + bytes(32), ctl.message, b"B" + b"\xff" * 40):  # malformed, or reflected back
        with pytest.raises(PairingFailed):
            ControllerPake("ABCD-EFGH", "ssh-ed25519 CTL", "ssh-ed25519 RUN").check_runner(bad, bytes(32))


def test_labels_become_one_short_line():
    assert sanitize_label("laptop\nssh-ed25519 AAAA evil\r\n\x1b[2J\u2028x") == "laptop ssh-ed25519 AAAA evil 2J x"
    assert sanitize_label("Zoë's Mac (2)") == "Zoës Mac (2)"
    assert sanitize_label("a" * 500) == "a" * 64
