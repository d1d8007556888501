"""Job log text made terminal-safe (app/views/terminal_text.py): what a terminal would act on
is shown as inert text, what a reader needs (text, line ends, tabs) is kept."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lanpool.app.views.terminal_text import safe_bytes, safe_line, safe_text

# What a terminal may act on in UTF-8 mode, plus the bidi controls that reorder text.
_ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain text\twith a tab\n", "plain text\twith a tab\n"),
        ("\x1b]52;c;cm0gLXJmIH4K\x07", "^[]52;c;cm0gLXJmIH4K^G"),  # OSC 52: write the clipboard
        ("\x1b]52;c;cm0=\x1b\\", "^[]52;c;cm0=^[\\"),  # the same, ended by ST
        ("\x1b]0;pwned\x07", "^[]0;pwned^G"),  # OSC 0: window title
        ("\x1b[2J\x1b[H", "^[[2J^[[H"),  # clear screen, cursor home
        ("\x1b[1A\x1b[2Kfake prompt", "^[[1A^[[2Kfake prompt"),  # move up, erase a line
        ("\x1b[8mhidden\x1b[0m shown", "hidden shown"),  # SGR dropped: concealed text is visible
        ("\x1b[30;40mblack on black\x1b[m", "black on black"),
        ("\x1b[1;38;5;196mred\x1b[0m", "red"),
        ("\u009b31mC1 CSI", "<U+009B>31mC1 CSI"),
        ("\u009d0;title\u009c", "<U+009D>0;title<U+009C>"),
        ("safe\rEVIL", "safe\nEVIL"),  # a carriage return cannot overwrite what was shown
        ("line\r\n", "line\n"),
        ("abc\x08\x08XY", "abc^H^HXY"),  # backspaces cannot either
        ("del\x7f", "del^?"),
        ("bell\x07 nul\x00 vt\x0b ff\x0c", "bell^G nul^@ vt^K ff^L"),
        ("user \u202eexe.txt", "user <U+202E>exe.txt"),  # right-to-left override
        ("unicode ✓ λ 日本", "unicode ✓ λ 日本"),
    ],
)
def test_safe_text(raw, shown):
    assert safe_text(raw) == shown


def test_bytes_that_are_not_utf8_cannot_be_c1_controls():
    # A raw 0x9B byte is CSI to a terminal in an 8-bit mode.
    assert safe_bytes(b"a\x9b31mb\xff\n") == "a\ufffd31mb\ufffd\n".encode()
    assert safe_bytes(b"ok \xc3\xa9\n") == "ok é\n".encode()


def test_a_display_line_holds_no_line_break():
    assert safe_line("a\rb\nc") == "a^Mb^Mc"


@given(st.text())
def test_nothing_active_survives_and_neutralising_twice_changes_nothing(text):
    once = safe_text(text)
    assert not _ACTIVE.search(once.replace("\n", "").replace("\t", ""))
    assert safe_text(once) == once
    line = safe_line(text)
    assert "\n" not in line and not _ACTIVE.search(line.replace("\t", ""))


@given(st.binary())
def test_any_bytes_become_safe_utf8(data):
    out = safe_bytes(data).decode("utf-8")
    assert not _ACTIVE.search(out.replace("\n", "").replace("\t", ""))
