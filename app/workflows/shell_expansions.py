"""Quotes and expansions: '...', "...", $'...', `...`, $( ), ${ } and arithmetic, as bash reads them."""

import re

from lanpool.app.workflows.shell_frames import Frame, ScannerState
from lanpool.app.workflows.shell_sinks import mark

_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[-@*#?$!0]")


class Expansions(ScannerState):
    def _quote_char(self, f: Frame, i: int, close: str, escapes: bool) -> int:
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

    def _expanding_char(self, f: Frame, i: int) -> int:
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

    def _param_char(self, f: Frame, i: int) -> int:
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
        word = f.phase == "word"
        return self._word_part(i, single="q" if word else "s", quote="p" if word else "u", ansi=False)

    def _word_part(self, i: int, single: str, quote: str, ansi: bool) -> int:
        """In a word (of a command, or of `${…}`): an escape, the start of a quote or of an expansion.
        `single`: the frame a ' opens; `quote`: what a reference right here lands in."""
        ch = self.text[i]
        if ch == "\\":
            return i + 2
        if ch == "'":
            self._push(single, i)
            return i + 1
        if ch == '"':
            self._push("d", i)
            return i + 1
        if ch == "`":
            return self._backtick(i, in_double_quotes=False)
        if ch == "$":
            return self._dollar(i, quote, ansi=ansi)
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
        sub = type(self)("".join(inner), self.variables, self.shared, self.backquotes + 1, self._sink()).run()
        if sub.problem:
            self._fail(sub.problem + " inside `…`", i)
        for pos, placement in sub.placements.items():
            if not escaped[pos]:  # `\$v` in the template: bash's own, literal `$v` in the body
                self._attach(placement, where[pos])
        return j + 1
