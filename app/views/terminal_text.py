"""Job log text made safe to show on a terminal.

A job's output is data from whoever wrote the job (or a hostile runner), and a
terminal obeys escape sequences in what it prints: OSC 52 writes the user's
clipboard, OSC 0 sets the window title, `ESC [2J` clears the screen, `ESC [8m`
hides text, `\\r` and backspace overwrite what was shown, and some terminals
act on C1 controls (U+0080-U+009F) too. The store keeps the bytes as the job
wrote them; this module is what stands between them and a terminal (the CLI
when stdout is one, and every line the TUI shows).

The rules, in order:
- SGR sequences (`ESC [ ... m`, colour and style) are dropped: the text they
  styled stays, plainly visible (hidden or same-colour text included);
- `\\r\\n` is a line end, and a lone `\\r` breaks the line (as the TUI's line
  splitting does): overwritten text is shown, not hidden;
- every other C0 control but `\\n` and `\\t`, and DEL, is shown in caret
  notation as `cat -v` and `less` do: ESC is `^[`, BEL `^G`, backspace `^H`;
  so an OSC or cursor sequence shows as inert text (`^[]52;c;...^G`);
- C1 controls and the bidirectional overrides that reorder what is shown
  (U+202A-U+202E, U+2066-U+2069) are shown as `<U+XXXX>`, as `less` does.
Bytes that are not UTF-8 become U+FFFD (a raw 0x9B byte is CSI to a terminal
in an 8-bit mode).

Pure functions, no terminal or textual import: the headless CLI and the TUI
both call them.
"""

import re

_SGR = re.compile(r"\x1b\[[0-9;:]*m")
# What a terminal may act on, or what reorders the visible text.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CRLF = re.compile(r"\r+\n")


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char == "\r":
        return "\n"
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    return f"<U+{code:04X}>"


def safe_text(text: str) -> str:
    """`text` with nothing a terminal would act on but line ends and tabs."""
    if not _UNSAFE.search(text):  # almost every log line: no copy, one scan
        return text
    text = _SGR.sub("", text)
    text = _CRLF.sub("\n", text)
    return _UNSAFE.sub(_visible, text)


def safe_bytes(data: bytes) -> bytes:
    """Log bytes as stored to UTF-8 bytes that are safe to write to a terminal."""
    return safe_text(data.decode("utf-8", "replace")).encode("utf-8")


def safe_line(text: str) -> str:
    """One display line (already split): like safe_text, and a line break that
    would come out of it (a lone `\\r`) is shown as `^M` instead, since a line
    cannot hold one."""
    return safe_text(text).replace("\n", "^M")
