"""protocol/__init__ imports each public name on first use (start-up time).

A verb that reads the store asks for JobState only; the message classes and their
validation load when something first names them, and every public name still resolves.
The in-process part (unit); the rest: tests/integration/test_protocol_lazy.py."""

import sys

import pytest

from lanpool import protocol


def test_every_public_name_resolves_to_its_module_object() -> None:
    for name in protocol.__all__:
        value = getattr(protocol, name)
        module = sys.modules[protocol._WHERE[name]]
        assert value is getattr(module, name)
    assert sorted(protocol.__all__) == sorted(protocol._WHERE)
    assert set(protocol.__all__) <= set(dir(protocol))


def test_an_unknown_name_is_an_attribute_error_not_a_key_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchMessage'"):
        protocol.NoSuchMessage  # noqa: B018
    with pytest.raises(ImportError):
        exec("from lanpool.protocol import NoSuchMessage", {})
