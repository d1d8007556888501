"""The scanner's state: its stack of open constructs and where each variable reference lands.

shell_model.py reads commands and here-documents, shell_expansions.py quotes
and expansions; both work on this state, which also collects the result.
"""

import re
from dataclasses import dataclass, field
from typing import Any

from lanpool.app.workflows.shell_heredocs import Body, HereDoc
from lanpool.app.workflows.shell_sinks import Placement, ScriptFacts, reads_name

UNCLOSED = {"c": "$( or (", "d": '"', "s": "'", "a": "$'", "q": "'", "x": "$(( or ((", "i": "[", "p": "${"}


@dataclass
class Scan:
    """What a scan of a script found: where each value is placed, and its here-documents."""

    placements: dict[int, Placement]
    heredocs: list[HereDoc]
    problem: str = ""  # what the model could not follow ("" : nothing)
    problem_at: int = 0
    arithmetic: list[str] = field(default_factory=list)  # the text of every region bash evaluates as arithmetic

    def reads_in_arithmetic(self, name: str) -> bool:
        """Whether arithmetic reads the shell variable `name` (and so evaluates its value)."""
        return any(reads_name(text, name) for text in self.arithmetic)


@dataclass(eq=False)
class Frame:
    """One open construct (quote, substitution, here-document...) while scanning a script."""

    kind: str  # u: commands, c: $( ) ( ), d s a q: quotes, x: arithmetic, i: subscript, p: ${ }, h: here-document
    start: int
    sink: str = ""
    construct: str = ""
    close: str = ""  # x: "))" or "]"
    depth: int = 0
    phase: str = ""  # p: op, word or arith
    array: bool = False  # c: an array literal `a=( … )`, where `[k]=v` holds a subscript
    end: int = 0  # h: where the body ends ..
    resume: int = 0  # .. and where the script goes on
    words: list[str] = field(default_factory=list)  # u, c: the simple command's words so far
    word_start: int = -1
    pending: list[tuple[Placement, int, bool]] = field(default_factory=list)  # placed in this command: word, name part
    redirects: set[int] = field(default_factory=set)  # words that are redirection targets
    redirect_next: bool = False
    case: list[str] = field(default_factory=list)  # open case statements: head, pat or cmd
    dbracket: int = -1  # the word where an open [[ starts ..
    dbracket_at: int = 0  # .. and its place in the text


class ScannerState:
    def __init__(
        self,
        text: str,
        variables: re.Pattern[str],
        shared: ScriptFacts,
        backquotes: int = 0,
        sink: tuple[str, str] = ("", ""),
    ) -> None:
        self.text, self.n, self.shared, self.backquotes, self.outer_sink = text, len(text), shared, backquotes, sink
        self.variables = variables
        self.refs = {m.start(): m.end() for m in variables.finditer(text)}
        self.stack = [Frame("u", 0)]
        self.placements: dict[int, Placement] = {}
        self.heredocs: list[HereDoc] = []
        self.pending_heredocs: list[tuple[str, bool, bool]] = []
        self.bodies: list[Body] = []
        self.problem, self.problem_at = "", 0

    def run(self) -> Scan:
        """Read the whole text (a script, or the body of a `…`)."""
        raise NotImplementedError

    def _fail(self, problem: str, at: int) -> None:
        if not self.problem:
            self.problem, self.problem_at = problem, at

    # -- frames ------------------------------------------------------------------

    def _push(self, kind: str, start: int, **kw: Any) -> Frame:
        frame = Frame(kind, start, **kw)
        self.stack.append(frame)
        return frame

    def _pop(self, i: int) -> None:
        f = self.stack.pop()
        if f.kind == "x" or (f.kind == "p" and f.phase == "arith") or f.kind == "i":
            self.shared.arithmetic.append(self.text[f.start : i])

    def _sink(self) -> tuple[str, str]:
        for f in reversed(self.stack):
            if f.sink:
                return f.sink, f.construct
        return self.outer_sink

    def _place(self, i: int, quote: str) -> int:
        """A variable reference at i: note where it lands; returns where it ends."""
        sink, construct = self._sink()
        self._attach(Placement(quote, self.backquotes, sink, construct), i)
        return self.refs[i]

    def _attach(self, placement: Placement, i: int) -> None:
        self.placements[i] = placement
        if not placement.sink:
            placement.sink, placement.construct = self._sink()
        for f in reversed(self.stack):
            if f.kind == "h":
                break  # a here-document is the command's input, not its words
            if f.kind in "uc":  # also through a ( ) that began no word: `[[ ( $v -gt 0 ) ]]`
                name_part = f.word_start < 0 or "=" not in self.text[f.word_start : i]
                f.pending.append((placement, len(f.words), name_part))
