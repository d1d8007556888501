"""Here-documents: where bash finds their bodies, and that no value ends one early.

bash reads `<<WORD` bodies line by line after the line of the operator, up to
the first line that is exactly WORD (after leading tabs with `<<-`), before
any expansion. So quoting cannot keep a value from ending a body: a value
that puts WORD on a line of its own would turn the rest of the body into
commands. substitute.py checks the lines after placing values.
"""

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class HereDoc:
    """A here-document's body, delimiter and kind, as positions in the script."""

    start: int  # the body: its first line's start ..
    end: int  # .. the terminator line's start
    delimiter: str
    strip_tabs: bool
    quoted: bool  # a quoted delimiter: nothing in the body expands, and a trailing \ joins no lines

    def lines(self, text: str) -> Iterator[tuple[int, int, str]]:
        """(start, end, line) of each line of `text` as bash compares it with the delimiter;
        `end` is after its newline."""
        pos, start, joined = 0, 0, ""
        for line in text.split("\n")[:-1]:  # the last piece follows the last newline: not a whole line
            if not joined:
                start = pos
            pos += len(line) + 1
            trailing = len(line) - len(line.rstrip("\\"))
            if not self.quoted and trailing % 2:  # backslash-newline: the line goes on
                joined += line[:-1]
                continue
            line, joined = joined + line, ""
            yield start, pos, line.lstrip("\t") if self.strip_tabs else line


@dataclass(frozen=True)
class Body:
    """A here-document and where the script goes on after its terminator."""

    doc: HereDoc
    resume: int  # where the script goes on, after the terminator line


def read_delimiter(text: str, j: int) -> tuple[str, bool, int, list[int], str]:
    """The WORD after `<<`/`<<-` at j: (delimiter, quoted, where it ends, `$` positions in it,
    a problem or "")."""
    delimiter, quoted, dollars, problem = [], False, [], ""
    while j < len(text) and text[j] not in " \t\n;&|<>()":
        ch = text[j]
        if ch in "'\"":
            close = text.find(ch, j + 1)
            if close < 0:
                problem, close = f"unclosed {ch} in a here-document delimiter", len(text)
            delimiter.append(text[j + 1 : close])
            quoted, j = True, close + 1
        elif ch == "\\":
            delimiter.append(text[j + 1 : j + 2])
            quoted, j = True, j + 2
        else:
            if ch == "$":
                dollars.append(j)
            delimiter.append(ch)
            j += 1
    return "".join(delimiter), quoted, j, dollars, problem


def find_bodies(text: str, i: int, pending: list[tuple[str, bool, bool]]) -> list[Body]:
    """At the line after `<<`: each pending (delimiter, quoted, strip_tabs) body in turn."""
    bodies = []
    for delimiter, quoted, strip in pending:
        probe = HereDoc(i, len(text), delimiter, strip, quoted)
        end = resume = len(text)  # no terminator: bash warns and takes the rest of the script
        for start, after, line in probe.lines(text[i:] + "\n"):
            if line == delimiter:
                end, resume = i + start, min(len(text), i + after)
                break
        bodies.append(Body(HereDoc(i, end, delimiter, strip, quoted), resume))
        i = resume
    return bodies


def line_ending_early(doc: HereDoc, body: str) -> int:
    """Where in `body` (the body's text once values are placed) a line equal to the
    delimiter starts; -1 if none."""
    return next((start for start, _, line in doc.lines(body) if line == doc.delimiter), -1)
