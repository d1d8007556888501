"""Env and secrets: `run --env/--env-file`, `secrets set|list|rm`, `${{ secrets.NAME }}`.

Real CLI, real agent on loopback, real SQLite. The secret's value must reach the
job and nowhere else: not the controller's SQLite (grepped as bytes, WAL included),
not the agent's data dir (journal, spool), not a log in clear.
The in-process part (unit); the rest: tests/integration/test_secrets.py."""

import pytest

from lanpool.app.errors import UsageError
from lanpool.app.runs.env_overrides import read_env_file


def test_env_file_reading_rules(tmp_path):
    path = tmp_path / "x.env"
    path.write_text("A=\"a\\nb\"\nB='$HOME'\nC=plain value # note\nE=\n")
    assert read_env_file(path) == {"A": "a\nb", "B": "$HOME", "C": "plain value", "E": ""}
    for text, problem in (
        ('A="open\n', "not closed"),
        ("A='x' y\n", "after the closing quote"),
        ("1A=x\n", "KEY=VALUE"),
    ):
        path.write_text(text)
        with pytest.raises(UsageError, match=problem):
            read_env_file(path)


def test_masking_rules_on_the_controller(tmp_path):
    from lanpool.app.home import ControllerHome
    from lanpool.app.secret_store import SecretStore, mask, masked_values

    masks = masked_values(["abc-long", "abc", "xy", "one-line\r\ntwo-line"])
    assert (
        masks.index("abc-long") < masks.index("abc")
        and "xy" not in masks
        and "two-line" in masks
        and "one-line" in masks
    )
    line = b"abc-long abc xy one-line\n"
    assert mask(line, masks) == b"*** *** xy ***\n"  # the longer value first: no "***-long"
    store = SecretStore(ControllerHome(tmp_path))
    store.set("T", "value-of-t")
    assert store.masks_for_spec({"X": "pre ${{ secrets.T }}", "Y": "${{ secrets.GONE }}"}) == ["value-of-t"]
