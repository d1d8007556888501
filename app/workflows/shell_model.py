"""How bash reads a workflow's script, as far as placing a value in it needs.

`scan(script, variables)` says, for each live `$` where a variable reference
starts, the quoting a value lands in there, and whether bash would evaluate a
value there instead of keeping it as text (its sink: arithmetic, a variable
name, code; shell_sinks.py holds the command-level rules).

Modelled: '...', "...", $'...', `...` (its body is read again with one level
of backslashes stripped, as bash does), $( ), ( ), ${ } and its operators,
$(( )), (( )), $[ ], array subscripts, case ... esac (a pattern's `)` closes
nothing), [[ ]], here-documents (bodies found line by line, as bash does),
comments and redirections. A `$` escaped by a backslash or in a comment is
not live: nothing is placed there. Where the model cannot follow the script
(an unclosed quote, bracket or case), `problem` says so, and substitute.py
places nothing rather than guess.

This module reads commands and here-documents; shell_expansions.py reads quotes
and expansions, on the state in shell_frames.py.
"""

import re

from lanpool.app.workflows.shell_expansions import Expansions
from lanpool.app.workflows.shell_frames import UNCLOSED, Frame, Scan
from lanpool.app.workflows.shell_heredocs import find_bodies, read_delimiter
from lanpool.app.workflows.shell_sinks import (
    ARITH_TESTS,
    ASSIGN,
    DECLARE,
    NAME,
    OPENERS,
    ScriptFacts,
    command_sinks,
    mark,
    unquote,
)

_REDIRECT = re.compile(r"<<<|<>|>>|>\||<&|>&|&>>|&>|<|>")


def scan(script: str, variables: re.Pattern[str]) -> Scan:
    facts = ScriptFacts()
    result = _Scanner(script, variables, facts).run()
    facts.finish()
    result.arithmetic = facts.arithmetic
    return result


class _Scanner(Expansions):
    def run(self) -> Scan:
        i = 0
        while True:
            body = next((f for f in self.stack if f.kind == "h" and i >= f.end), None)
            if body is not None:  # bash found the body's end by lines, whatever is open in it
                if self.stack[-1] is not body:
                    self._fail(
                        f"unclosed {UNCLOSED.get(self.stack[-1].kind, '(')} in a here-document", self.stack[-1].start
                    )
                del self.stack[self.stack.index(body) :]
                i = self._next_body(body.resume)
                continue
            if i >= self.n:
                break
            f = self.stack[-1]
            if f.kind in "uc":
                i = self._command_char(f, i)
            elif f.kind in "sq":
                i = self._quote_char(f, i, "'", escapes=False)
            elif f.kind == "a":
                i = self._quote_char(f, i, "'", escapes=True)
            elif f.kind == "p":
                i = self._param_char(f, i)
            else:  # d, x, i, h
                i = self._expanding_char(f, i)
        top = self.stack[0]
        self._end_word(top, self.n)
        self._end_command(top)
        if len(self.stack) > 1:
            f = self.stack[1]
            self._fail(f"unclosed {UNCLOSED.get(f.kind, f.kind)}", f.start)
        elif top.case:
            self._fail("a case without its esac", top.start)
        elif top.dbracket >= 0:
            self._fail("a [[ without its ]]", top.start)
        return Scan(self.placements, self.heredocs, self.problem, self.problem_at)

    # -- commands ------------------------------------------------------------------

    def _command_position(self, f: Frame, extra: frozenset[str] = frozenset()) -> bool:
        return all(w in OPENERS or w in extra for w in f.words)

    def _command_char(self, f: Frame, i: int) -> int:
        text, ch = self.text, self.text[i]
        if ch in " \t" or (ch == "\n" and f.dbracket >= 0):
            self._end_word(f, i)
            return self._next_body(i + 1) if ch == "\n" and self.pending_heredocs else i + 1
        if ch == "\n":
            self._end_word(f, i)
            self._end_command(f)
            return self._next_body(i + 1) if self.pending_heredocs else i + 1
        if ch == "#" and f.word_start < 0:  # a comment: nothing in it is live
            end = text.find("\n", i)
            return self.n if end < 0 else end
        if ch == ";":
            self._end_word(f, i)
            self._end_command(f)
            if f.case and f.case[-1] == "cmd" and text.startswith((";;", ";&"), i):
                f.case[-1] = "pat"
                return i + (3 if text.startswith(";;&", i) else 2)
            return i + 1
        if ch == "|" and f.case and f.case[-1] == "pat":
            self._end_word(f, i)
            return i + 1
        if ch in "<>&" and not text.startswith(("<(", ">("), i):
            m = _REDIRECT.match(text, i)
            if text.startswith("<<", i) and not text.startswith("<<<", i):
                self._end_word(f, i)
                return self._heredoc_operator(i)
            if m:
                self._end_word(f, i)
                f.redirect_next = True
                return m.end()
        if ch in "&|":
            self._end_word(f, i)
            if f.dbracket < 0:
                self._end_command(f)
            return i + 1
        if ch == "(":
            if f.case and f.case[-1] == "pat" and f.word_start < 0:
                return i + 1  # `(pattern)`: the optional opening parenthesis
            if f.word_start < 0 and text.startswith("((", i) and self._command_position(f, frozenset({"for"})):
                self._push("x", i, close="))", sink="arith", construct="(( ))")
                return i + 2
            array = f.word_start >= 0 and ASSIGN.fullmatch(text[f.word_start : i]) is not None
            self._push("c", i, array=array)
            return i + 1
        if ch == ")":
            self._end_word(f, i)
            if f.case and f.case[-1] == "pat":
                f.case[-1] = "cmd"
                f.words.clear()
                f.pending.clear()
                return i + 1
            self._end_command(f)
            if f.kind == "c":
                self._pop(i)
            return i + 1
        if f.word_start < 0:  # a word begins
            f.word_start = i
            if f.redirect_next:
                f.redirects.add(len(f.words))
                f.redirect_next = False
        if ch == "[" and self._subscript_here(f, i):
            self._push("i", i, close="]", sink="arith", construct="an array subscript a[...]=")
            return i + 1
        return self._word_part(i, single="s", quote="u", ansi=True)

    def _subscript_here(self, f: Frame, i: int) -> bool:
        """`a[…]=` as an assignment (or a name given to declare): bash evaluates the subscript."""
        if f.array and f.word_start == i:
            return True
        if not NAME.match(self.text[f.word_start : i]):
            return False
        if all(ASSIGN.match(w) or w in OPENERS for w in f.words):
            return True
        first = next((unquote(w) for w in f.words if w not in OPENERS and not ASSIGN.match(w)), "")
        return first in DECLARE

    def _end_word(self, f: Frame, i: int) -> None:
        if f.word_start < 0:
            return
        word = self.text[f.word_start : i]
        at_start = self._command_position(f)
        f.words.append(word)
        f.word_start = -1
        if f.case and f.case[-1] == "head":
            if word == "in":
                f.case[-1] = "pat"
                f.words.clear()
                f.pending.clear()
            return
        if f.case and f.case[-1] == "pat":
            if word == "esac":
                f.case.pop()
            f.words.clear()
            f.pending.clear()
            return
        if f.dbracket >= 0 and word == "]]":
            inside = self.text[f.dbracket_at : i]  # its words, and those in ( ) groups
            if ARITH_TESTS & {unquote(w) for w in re.split(r"[\s()]+", inside)}:
                self.shared.arithmetic.append(inside)
                for placement, index, _ in f.pending:
                    if index >= f.dbracket:
                        mark(placement, "arith", "a [[ ]] that compares numbers (-eq, -gt ...) or tests -v")
            f.dbracket = -1
            return
        if not at_start:
            return
        if word == "case":
            f.case.append("head")
        elif word == "esac" and f.case:
            f.case.pop()
            f.words.clear()
            f.pending.clear()
        elif word == "[[":
            f.dbracket, f.dbracket_at = len(f.words) - 1, i

    def _end_command(self, f: Frame) -> None:
        """A simple command is complete: its name decides what its arguments are."""
        if f.words and not (f.case and f.case[-1] in ("head", "pat")):
            command_sinks(f.words, f.pending, f.redirects, self.shared)
        f.words, f.pending, f.redirects, f.redirect_next = [], [], set(), False

    # -- here-documents ------------------------------------------------------------------

    def _heredoc_operator(self, i: int) -> int:
        """`<<[-]WORD`: remember the delimiter; the body starts after this line."""
        j = i + 2
        strip = self.text.startswith("-", j)
        j += strip
        while j < self.n and self.text[j] in " \t":
            j += 1
        delimiter, quoted, end, dollars, problem = read_delimiter(self.text, j)
        if problem:
            self._fail(problem, j)
        for ref in (d for d in dollars if d in self.refs):
            self._place(ref, "u")
            self.placements[ref].sink, self.placements[ref].construct = "delim", "<<"
        self.pending_heredocs.append((delimiter, quoted, strip))
        return end

    def _next_body(self, i: int) -> int:
        """At the line after `<<` (or after a body): the next pending body, if any."""
        self.bodies += find_bodies(self.text, i, self.pending_heredocs)
        self.pending_heredocs = []
        if not self.bodies:
            return i
        body = self.bodies.pop(0)
        self.heredocs.append(body.doc)
        if body.doc.quoted:  # nothing in it expands: every reference is plain text there
            for ref in (r for r in self.refs if body.doc.start <= r < body.doc.end):
                self._place(ref, "H")
            return self._next_body(body.resume)
        self._push("h", body.doc.start, end=body.doc.end, resume=body.resume)
        return body.doc.start
