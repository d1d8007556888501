"""Variable substitution in workflow fields, shell-safe in commands.

Syntaxes: `$name`, `${name}` and `${{ name }}` (also `${{ variables.name }}`).
A `$name` or `${name}` that names no variable is left for the shell ($HOME,
$PATH); a `${{ name }}` that names none is an error, since it can only have
meant a variable.

In commands, a value is escaped for the quoting context it lands in, found by
a small shell lexer (unquoted, "double", 'single', $'...', $(...), `...`,
comments), so `$(touch x)` and `'; rm -rf ~'` come out as text. The lexer does
not model nested backticks or heredoc bodies; a variable inside
those is escaped for the enclosing context, which is not guaranteed inert:
write such commands with $(...) instead.
"""

import re
from collections.abc import Callable, Mapping

_VAR = re.compile(
    r"\$\{\{\s*(?:variables\.)?(?P<t>[A-Za-z_][A-Za-z0-9_]*)\s*\}\}"  # ${{ name }}
    r"|\$\{(?P<b>[A-Za-z_][A-Za-z0-9_]*)\}"  # ${name}
    r"|\$(?P<p>[A-Za-z_][A-Za-z0-9_]*)"  # $name
)
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./,:=+@%^")


class UndefinedVariable(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def variable_names_used(text: str) -> set[str]:
    """Names written as `${{ name }}`: these must be defined."""
    return {m.group("t") for m in _VAR.finditer(text) if m.group("t")}


def names_referenced(text: str) -> set[str]:
    """Every name written in any syntax ($x, ${x}, ${{ x }}): variables or shell variables."""
    return {m.group("t") or m.group("b") or m.group("p") for m in _VAR.finditer(text)}


def substitute_text(text: str, values: Mapping[str, str]) -> str:
    """Plain substitution (env values, paths, resources): no quoting."""
    return _VAR.sub(lambda m: _lookup(m, values, lambda v, _ctx: v), text)


def substitute_command(command: str, values: Mapping[str, str], words: Mapping[str, str] | None = None) -> str:
    """Substitution in one shell command line, each value escaped for its context.

    `words` maps names to text that is already escaped shell words (the
    `$variables_as_args` pairs): spliced in unquoted, closing any quotes around it.
    """
    contexts = _contexts(command)
    words = words or {}

    def replace(m: re.Match) -> str:
        context = contexts.get(m.start(), "u")
        if context == "#":
            return m.group(0)  # in a comment: nothing to run, nothing to substitute
        name = m.group("t") or m.group("b") or m.group("p")
        if name in words:
            return _splice(words[name], context)
        return _lookup(m, values, lambda v, _c: _escape(v, context))

    return _VAR.sub(replace, command)


def _lookup(m: re.Match, values: Mapping[str, str], render: Callable[[str, str], str]) -> str:
    name = m.group("t") or m.group("b") or m.group("p")
    if name in values:
        return render(values[name], "")
    if m.group("t"):
        raise UndefinedVariable(name)
    return m.group(0)  # a shell variable: left alone


# -- escaping -------------------------------------------------------------------


def escape_word(value: str) -> str:
    """One shell word with exactly `value`'s text, for an unquoted context.

    Backslash-escaping (not single quotes) because it is also inert inside
    double or single quotes. Newlines go in single quotes: a backslash-newline
    would be a line continuation. Non-ASCII bytes are never special to a shell.
    """
    if value == "":
        return "''"
    out = []
    for ch in value:
        if ch in _SAFE or ord(ch) > 127:
            out.append(ch)
        elif ch == "\n":
            out.append("'\n'")
        else:
            out.append("\\" + ch)
    return "".join(out)


def _escape(value: str, context: str) -> str:
    if context.startswith("k"):  # in `...`: the shell strips one level of \ before \, $ and ` first
        return re.sub(r"([\\$`])", r"\\\1", _escape(value, context[1:] or "u"))
    if context == "d":  # inside "...": only these four are live
        return re.sub(r'([\\$`"])', r"\\\1", value)
    if context == "s":  # inside '...': close, add an unquoted word, reopen
        return "'" + escape_word(value) + "'"
    if context == "a":  # inside $'...': the same, reopening $'...' so its \ escapes still mean the same
        return "'" + escape_word(value) + "$'"
    return escape_word(value)


def _splice(words: str, context: str) -> str:
    """Escaped words in any context: their `'\\n'` newlines and backslashes only hold unquoted."""
    if context.startswith("k"):
        return re.sub(r"([\\$`])", r"\\\1", _splice(words, context[1:] or "u"))
    if context in ("d", "s", "a"):
        return {"d": '"{}"', "s": "'{}'", "a": "'{}$'"}[context].format(words)
    return words


def _contexts(command: str) -> dict[int, str]:
    """The quoting context ('u', 'd', 's' or 'a', after 'k' in backquotes) at each `$` of the command."""
    stack = ["u"]  # u: unquoted, d: "...", s: '...', a: $'...', c: $(...) or (...), k: `...`
    found: dict[int, str] = {}
    i, n = 0, len(command)
    while i < n:
        ch, top = command[i], stack[-1]
        if top in ("s", "a"):
            if ch == "\\" and top == "a":  # $'\'' holds a quote
                i += 1
            elif ch == "'":
                stack.pop()
            elif ch == "$":
                found[i] = ("k" if "k" in stack else "") + top  # `...` strips a level of \ even here
        elif top == "d":
            if ch == "\\":
                i += 1
            elif ch == '"':
                stack.pop()
            elif ch == "$":
                found[i] = "kd" if "k" in stack else "d"
                if command.startswith("$(", i):
                    stack.append("c")
                    i += 1
            elif ch == "`":
                stack.append("k")
        else:  # u, c, k: unquoted contexts
            if ch == "\\":
                i += 1
            elif ch == "'":
                stack.append("s")
            elif ch == '"':
                stack.append("d")
            elif ch == "#" and (i == 0 or command[i - 1] in " \t\n;|&("):
                while i < n and command[i] != "\n":  # a comment: left as written
                    found[i] = "#"
                    i += 1
                continue
            elif ch == "$":
                found[i] = "k" if "k" in stack else "u"
                if command.startswith("$(", i):
                    stack.append("c")
                    i += 1
                elif command.startswith("$'", i):
                    stack.append("a")  # ANSI-C quoting
                    i += 1
            elif ch == "(":
                stack.append("c")
            elif ch == ")" and top == "c":
                stack.pop()
            elif ch == "`":
                if top == "k":
                    stack.pop()
                else:
                    stack.append("k")
        i += 1
    return found
