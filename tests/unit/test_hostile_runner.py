"""The controller against a hostile runner (tests/hostile_runner.py: real asyncssh, the
real protocol encoder, real SQLite): a runner writes only its own job's log and state,
a status it cannot read ends the follow with one line, job log text reaches no
terminal as escapes. Artifacts from a hostile runner: tests/integration/test_artifact_stream.py.
The in-process part (unit); the rest: tests/integration/test_hostile_runner.py."""

import asyncio
from pathlib import Path

import pytest

from lanpool.app.cli.render import LogPrinter

ESCAPES = (
    b"clip \x1b]52;c;cm0gLXJmIH4K\x07 title \x1b]0;pwned\x07 clear \x1b[2J "
    b"hidden \x1b[8msecret\x1b[0m c1 \xc2\x9b31m over ok\rEVIL bs ab\x08\x08XY\n"
)


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


class _Stream:
    def __init__(self, tty: bool) -> None:
        self.data = b""
        self._tty = tty

    def write(self, data: bytes) -> None:
        self.data += data

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return self._tty


@pytest.mark.parametrize(
    ("tty", "raw", "neutralised"), [(True, False, True), (True, True, False), (False, False, False)]
)
def test_log_printer_neutralises_what_goes_to_a_terminal(tty, raw, neutralised):
    out, err = _Stream(tty), _Stream(tty)
    printer = LogPrinter(raw=raw, stdout=out, stderr=err)
    printer("j", "out", ESCAPES)
    printer("j", "err", b"err \x1b]0;t\x07\n")
    printer("j", "met", b'{"name": "loss"}\n')
    if neutralised:
        assert b"\x1b" not in out.data + err.data and b"\x07" not in out.data and b"\xc2\x9b" not in out.data
        assert b"^[]52;c;cm0gLXJmIH4K^G" in out.data and b"secret" in out.data and b"<U+009B>" in out.data
        assert b"ok\nEVIL" in out.data and b"ab^H^HXY" in out.data
        assert err.data == b"err ^[]0;t^G\n"
    else:
        assert out.data == ESCAPES and err.data == b"err \x1b]0;t\x07\n"


def test_the_tui_log_view_shows_escapes_as_inert_text():
    pytest.importorskip("textual")
    from textual.app import App

    from lanpool.app.tui.widgets.log_view import LogView
    from lanpool.app.views.overview import LogLine, decode_lines

    lines = decode_lines(ESCAPES + b"[bold red]not markup[/]\n", "out", None)
    assert all("\x1b" not in line.text and "\x9b" not in line.text for line in lines)
    # A line that reached the widget unsanitised (another code path) is still shown inert.
    lines.append(LogLine("raw \x1b]52;c;aGk=\x07 \x1b[2J\x9b1m", "err"))

    class One(App):
        def compose(self):
            yield LogView(id="log")

    async def show() -> list[str]:
        app = One()
        async with app.run_test(size=(200, 20)) as pilot:
            view = app.query_one(LogView)
            view.set_lines(lines, at_start=True)
            view.scroll_home(animate=False, immediate=True)
            await pilot.pause()
            return ["".join(seg.text for seg in view.render_line(y)) for y in range(len(lines))]

    shown = asyncio.run(show())
    text = "\n".join(shown)
    assert not any(ch in text for ch in "\x1b\x07\x08\x9b\r")
    assert "^[]52;c;cm0gLXJmIH4K^G" in text and "secret" in text and "[bold red]not markup[/]" in text
    assert "raw ^[]52;c;aGk=^G ^[[2J<U+009B>1m" in text
