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
"""

import re
from dataclasses import dataclass, field

from app.workflows.shell_heredocs import Body, HereDoc, find_bodies, read_delimiter
from app.workflows.shell_sinks import (
    ARITH_TESTS,
    ASSIGN,
    DECLARE,
    NAME,
    OPENERS,
    Placement,
    ScriptFacts,
    command_sinks,
    mark,
    reads_name,
    unquote,
)

_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[-@*#?$!0]")
_REDIRECT = re.compile(r"<<<|<>|>>|>\||<&|>&|&>>|&>|<|>")
_UNCLOSED = {"c": "$( or (", "d": '"', "s": "'", "a": "$'", "q": "'", "x": "$(( or ((", "i": "[", "p": "${"}


@dataclass
class Scan:
    placements: dict[int, Placement]
    heredocs: list[HereDoc]
    problem: str = ""  # what the model could not follow ("" : nothing)
    problem_at: int = 0
    arithmetic: list[str] = field(default_factory=list)  # the text of every region bash evaluates as arithmetic

    def reads_in_arithmetic(self, name: str) -> bool:
        """Whether arithmetic reads the shell variable `name` (and so evaluates its value)."""
        return any(reads_name(text, name) for text in self.arithmetic)


@dataclass(eq=False)
class _Frame:
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


def scan(script: str, variables: re.Pattern) -> Scan:
    facts = ScriptFacts()
    result = _Scanner(script, variables, facts).run()
    facts.finish()
    result.arithmetic = facts.arithmetic
    return result


class _Scanner:
    def __init__(
        self,
        text: str,
        variables: re.Pattern,
        shared: ScriptFacts,
        backquotes: int = 0,
        sink: tuple[str, str] = ("", ""),
    ) -> None:
        self.text, self.n, self.shared, self.backquotes, self.outer_sink = text, len(text), shared, backquotes, sink
        self.variables = variables
        self.refs = {m.start(): m.end() for m in variables.finditer(text)}
        self.stack = [_Frame("u", 0)]
        self.placements: dict[int, Placement] = {}
        self.heredocs: list[HereDoc] = []
        self.pending_heredocs: list[tuple[str, bool, bool]] = []
        self.bodies: list[Body] = []
        self.problem, self.problem_at = "", 0

    def run(self) -> Scan:
        i = 0
        while True:
            body = next((f for f in self.stack if f.kind == "h" and i >= f.end), None)
            if body is not None:  # bash found the body's end by lines, whatever is open in it
                if self.stack[-1] is not body:
                    self._fail(
                        f"unclosed {_UNCLOSED.get(self.stack[-1].kind, '(')} in a here-document", self.stack[-1].start
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
            self._fail(f"unclosed {_UNCLOSED.get(f.kind, f.kind)}", f.start)
        elif top.case:
            self._fail("a case without its esac", top.start)
        elif top.dbracket >= 0:
            self._fail("a [[ without its ]]", top.start)
        return Scan(self.placements, self.heredocs, self.problem, self.problem_at)

    def _fail(self, problem: str, at: int) -> None:
        if not self.problem:
            self.problem, self.problem_at = problem, at

    # -- frames ------------------------------------------------------------------

    def _push(self, kind: str, start: int, **kw) -> _Frame:
        frame = _Frame(kind, start, **kw)
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

    # -- commands ------------------------------------------------------------------

    def _command_position(self, f: _Frame, extra: frozenset = frozenset()) -> bool:
        return all(w in OPENERS or w in extra for w in f.words)

    def _command_char(self, f: _Frame, i: int) -> int:
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
        return self._word_char(f, i, quote="u")

    def _subscript_here(self, f: _Frame, i: int) -> bool:
        """`a[…]=` as an assignment (or a name given to declare): bash evaluates the subscript."""
        if f.array and f.word_start == i:
            return True
        if not NAME.match(self.text[f.word_start : i]):
            return False
        if all(ASSIGN.match(w) or w in OPENERS for w in f.words):
            return True
        first = next((unquote(w) for w in f.words if w not in OPENERS and not ASSIGN.match(w)), "")
        return first in DECLARE

    def _word_char(self, f: _Frame, i: int, quote: str) -> int:
        ch = self.text[i]
        if ch == "\\":
            return i + 2
        if ch == "'":
            self._push("s", i)
            return i + 1
        if ch == '"':
            self._push("d", i)
            return i + 1
        if ch == "`":
            return self._backtick(i, in_double_quotes=False)
        if ch == "$":
            return self._dollar(i, quote, ansi=True)
        return i + 1

    def _end_word(self, f: _Frame, i: int) -> None:
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

    def _end_command(self, f: _Frame) -> None:
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

    # -- quotes and expansions ------------------------------------------------------------

    def _quote_char(self, f: _Frame, i: int, close: str, escapes: bool) -> int:
        ch = self.text[i]
        if escapes and ch == "\\":
            return i + 2
        if ch == close:
            self._pop(i)
            return i + 1
        if i in self.refs:
            if f.kind == "q":
                self._place(i, "s")
                mark(self.placements[i], "quote", "${…}")
            else:
                self._place(i, f.kind)
            return self.refs[i]
        return i + 1

    def _expanding_char(self, f: _Frame, i: int) -> int:
        """Inside "…", arithmetic, a subscript or a here-document: expansions nest, little else."""
        text, ch = self.text, self.text[i]
        if ch == "\\":
            return i + 2
        if f.kind == "d" and ch == '"':
            self._pop(i)
            return i + 1
        if f.kind in "xi":
            if ch in "([":
                f.depth += 1
            elif ch in ")]" and f.depth:
                f.depth -= 1
            elif ch == "]" and f.close == "]":
                self._pop(i)
                return i + 1
            elif ch == ")":
                self._pop(i)
                return i + (2 if text.startswith("))", i) and f.close == "))" else 1)
            elif ch in "\"'":
                self._push("d" if ch == '"' else "s", i)
                return i + 1
        if ch == "`":
            return self._backtick(i, in_double_quotes=f.kind == "d")
        if ch == "$":
            return self._dollar(i, {"d": "d", "h": "h"}.get(f.kind, "u"), ansi=False)
        return i + 1

    def _dollar(self, i: int, quote: str, ansi: bool) -> int:
        text = self.text
        if i in self.refs:
            return self._place(i, quote)
        if text.startswith("$((", i):
            self._push("x", i, close="))", sink="arith", construct="$(( ))")
            return i + 3
        if text.startswith("$[", i):
            self._push("x", i, close="]", sink="arith", construct="$[ ]")
            return i + 2
        if text.startswith("$(", i):
            self._push("c", i)
            return i + 2
        if text.startswith("${", i):
            return self._param_start(i + 2)
        if ansi and text.startswith("$'", i):
            self._push("a", i)
            return i + 2
        return i + 1

    def _param_start(self, i: int) -> int:
        """After `${`: an optional # or !, the parameter, then maybe a subscript."""
        self._push("p", i - 2, phase="op")
        if self.text[i : i + 1] in ("#", "!") and _PARAM.match(self.text, i + 1) and self.text[i + 1 : i + 2] != "}":
            i += 1
        m = _PARAM.match(self.text, i)
        i = m.end() if m else i
        if self.text.startswith("[", i):
            self._push("i", i, close="]", sink="arith", construct="an array subscript ${a[...]}")
            return i + 1
        return i

    def _param_char(self, f: _Frame, i: int) -> int:
        text, ch = self.text, self.text[i]
        if ch == "}":
            self._pop(i)
            return i + 1
        if f.phase == "op":
            if ch == ":" and text[i + 1 : i + 2] not in ("-", "=", "+", "?"):
                f.phase, f.sink, f.construct = "arith", "arith", "${...:offset:length}"
                return i + 1
            f.phase = "word"
            return i + (2 if ch == ":" else 1) if ch in ":-=+?#%/^,@" else i
        if ch == "\\":
            return i + 2
        if ch == "'":
            self._push("q" if f.phase == "word" else "s", i)
            return i + 1
        if ch == '"':
            self._push("d", i)
            return i + 1
        if ch == "`":
            return self._backtick(i, in_double_quotes=False)
        if ch == "$":
            return self._dollar(i, "p" if f.phase == "word" else "u", ansi=False)
        return i + 1

    def _backtick(self, i: int, in_double_quotes: bool) -> int:
        """`…`: bash strips one level of backslashes from the body, then reads it as a script."""
        text, j = self.text, i + 1
        stripped = "\\`$" + ('"' if in_double_quotes else "")
        inner, where, escaped = [], [], []  # the body as bash reads it; where each character was; was it \-escaped
        while j < self.n and text[j] != "`":
            if text[j] == "\\" and j + 1 < self.n and text[j + 1] in stripped:
                inner.append(text[j + 1])
                where.append(j + 1)
                escaped.append(True)
                j += 2
                continue
            step = 2 if text[j] == "\\" and j + 1 < self.n else 1  # another backslash stays, with what it escapes
            for k in range(j, j + step):
                inner.append(text[k])
                where.append(k)
                escaped.append(False)
            j += step
        if j >= self.n:
            self._fail("unclosed `", i)
        sub = _Scanner("".join(inner), self.variables, self.shared, self.backquotes + 1, self._sink()).run()
        if sub.problem:
            self._fail(sub.problem + " inside `…`", i)
        for pos, placement in sub.placements.items():
            if not escaped[pos]:  # `\$v` in the template: bash's own, literal `$v` in the body
                self._attach(placement, where[pos])
        return j + 1
