"""Variable substitution in workflow fields, shell-safe in commands.

Syntaxes: `$name`, `${name}` and `${{ name }}` (also `${{ variables.name }}`);
a name with `-` or `.` in it (`batch-size`) only as `${{ batch-size }}`.
A `$name` or `${name}` that names no variable is left for the shell ($HOME,
$PATH); a `${{ name }}` that names none is an error, since it can only have
meant a variable. In commands, a reference bash would not expand (`\\$name`,
or in a comment) is left as written.

In commands, a value is escaped for the quoting context it lands in, found by
shell_model's reading of the whole script (quotes, $(...), `...`, ${...},
case, here-documents), so `$(touch x)` and `'; rm -rf ~'` come out as text.
Where bash *evaluates* a value (arithmetic, [[ -gt ]], array subscripts,
variable names, eval), no quoting helps: a string variable there is refused
with what to do, and only a whole-number variable may stand there.

Also refused: a string copied into a shell variable (or an `env:` entry) that
arithmetic in the commands reads, one copy deep. Limits: the value is inert
where the template places it and in what bash itself does with it; a program
that reads it as code (awk, sed's `e`, a script that evals its argument, a
shell variable copied twice) is beyond this model, as are shells other than
bash (small images run the script with `sh`: dash has fewer of bash's sinks,
but reads `$'...'` differently). Nested backquotes are refused, not modelled.
"""

import re
from bisect import bisect_right
from collections.abc import Callable, Collection, Mapping
from itertools import accumulate
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the shell model is imported where a script holds a reference (start-up time)
    from lanpool.app.workflows.shell_heredocs import HereDoc
    from lanpool.app.workflows.shell_sinks import Placement

_VAR = re.compile(
    # ${{ name }}: dstack's names may hold - and . (`${{ batch-size }}`); the shell forms may not
    r"\$\{\{\s*(?:variables\.)?(?P<t>[A-Za-z_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?)\s*\}\}"
    r"|\$\{(?P<b>[A-Za-z_][A-Za-z0-9_]*)\}"  # ${name}
    r"|\$(?P<p>[A-Za-z_][A-Za-z0-9_]*)"  # $name
)
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./,:=+@%^")
_INT = re.compile(r"-?[0-9]+")


class UndefinedVariable(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class UnsafeVariable(Exception):
    """A variable placed where its value would not be inert; `line`: the index of the command."""

    def __init__(self, name: str, message: str, line: int) -> None:
        super().__init__(message)
        self.name, self.message, self.line = name, message, line


class _Refused(Exception):
    pass


def variable_names_used(text: str) -> set[str]:
    """Names written as `${{ name }}`: these must be defined."""
    return {m.group("t") for m in _VAR.finditer(text) if m.group("t")}


def names_referenced(text: str) -> set[str]:
    """Every name written in any syntax ($x, ${x}, ${{ x }}): variables or shell variables."""
    return {m.group("t") or m.group("b") or m.group("p") for m in _VAR.finditer(text)}


def substitute_text(text: str, values: Mapping[str, str]) -> str:
    """Plain substitution (env values, paths, resources): no quoting."""
    return _VAR.sub(lambda m: _lookup(m, values, lambda v, _ctx: v), text)


def substitute_command(
    command: str, values: Mapping[str, str], words: Mapping[str, str] | None = None, ints: Collection[str] = ()
) -> str:
    """Substitution in one shell command line, each value escaped for its context."""
    return substitute_commands([command], values, words, ints)[0]


def substitute_commands(
    commands: list[str],
    values: Mapping[str, str],
    words: Mapping[str, str] | None = None,
    ints: Collection[str] = (),
    env_copies: Mapping[str, str] | None = None,
) -> list[str]:
    """Substitution in the lines of one script (read as bash reads them: joined by newlines).

    `words` maps names to text that is already escaped shell words (the
    `$variables_as_args` pairs): spliced in unquoted, closing any quotes around it.
    `ints` names variables whose values are whole numbers (checked again here):
    only those may stand where bash evaluates a value (arithmetic, names, code).
    `env_copies` maps environment variables to the string variable each was set from:
    arithmetic must not read those either. Raises UnsafeVariable (with the line's
    index) where a value would not be inert.
    """
    script = "\n".join(commands)
    if not env_copies and _VAR.search(script) is None:
        # Nothing to place and no copy to trace: the script as written, without reading it as bash
        # does (the shell model's ~10 modules and its scan: ~5 ms of a `run`'s start).
        return list(commands)
    from lanpool.app.workflows.shell_model import scan

    starts = list(accumulate((len(c) + 1 for c in commands[:-1]), initial=0))
    model = scan(script, _VAR)
    for env, name in (env_copies or {}).items():
        if model.reads_in_arithmetic(env):
            line = next((k for k, c in enumerate(commands) if env in c), 0)
            raise UnsafeVariable(
                name,
                f"${name} is a string copied into env {env}, which arithmetic in the commands "
                f"reads; {_WHY['arith']}: make {name} a whole number in variables.yaml "
                f"({name}: 5), or keep {env} out of arithmetic",
                line,
            )
    words = words or {}
    out: list[str] = []
    done = 0
    placed: list[tuple[int, int, int, str]] = []  # (where in the script, length there, length out, name)
    for m in _VAR.finditer(script):
        placement = model.placements.get(m.start())
        name = m.group("t") or m.group("b") or m.group("p")
        if placement is None:  # escaped, or in a comment: not a reference bash would expand
            continue
        line = bisect_right(starts, m.start()) - 1
        if name not in values and name not in words:
            if m.group("t"):
                raise UndefinedVariable(name)
            continue  # a shell variable: left alone
        if model.problem:
            raise UnsafeVariable(
                name,
                f"cannot tell how bash reads this script ({model.problem}), so ${name} "
                "cannot be placed safely: close it",
                bisect_right(starts, model.problem_at) - 1,
            )
        try:
            text = _render(name, values, words, ints, placement)
        except _Refused as exc:
            raise UnsafeVariable(name, str(exc), line) from None
        out.append(script[done : m.start()])
        out.append(text)
        placed.append((m.start(), m.end() - m.start(), len(text), name))
        done = m.end()
    out.append(script[done:])
    result = "".join(out)

    def moved(pos: int) -> int:  # where a script position is in the result
        return pos + sum(n_out - n_in for at, n_in, n_out, _ in placed if at < pos)

    for doc in model.heredocs:
        _check_heredoc(
            doc,
            result,
            moved,
            [(moved(at), name) for at, _, _, name in placed if doc.start <= at < doc.end],
            bisect_right(starts, doc.start) - 1,
        )
    bounds = [moved(s) for s in starts] + [len(result) + 1]
    return [result[bounds[k] : bounds[k + 1] - 1] for k in range(len(commands))]


def _lookup(m: re.Match[str], values: Mapping[str, str], render: Callable[[str, str], str]) -> str:
    name = m.group("t") or m.group("b") or m.group("p")
    if name in values:
        return render(values[name], "")
    if m.group("t"):
        raise UndefinedVariable(name)
    return m.group(0)  # a shell variable: left alone


# -- escaping -------------------------------------------------------------------

_WHY = {
    "arith": "bash evaluates it as arithmetic there, so a value like x[$(cmd)] would run cmd",
    "name": "bash reads it as a variable name there, so a value like x[$(cmd)] would run cmd",
    "copied": "arithmetic reads that variable later, so a value like x[$(cmd)] would run cmd",
    "code": "bash runs it as a command there",
    "quote": "bash's quoting there depends on the operator",
    "delim": "it would decide where the here-document ends",
}


def _refusal(name: str, placement: "Placement") -> str:
    where = {
        "arith": f"used inside {placement.construct}",
        "name": f"used as a variable name by {placement.construct}",
        "copied": f"copied into the shell variable {placement.construct}",
        "code": f"used in code that {placement.construct} runs",
        "quote": "used inside '...' within ${...}",
        "delim": "used in a here-document's delimiter",
    }[placement.sink]
    fix = {
        "arith": f"make {name} a whole number in variables.yaml ({name}: 5), or use it outside arithmetic",
        "name": "use a fixed variable name there",
        "copied": f"make {name} a whole number in variables.yaml "
        f"({name}: 5), or keep {placement.construct} out of arithmetic",
        "code": "pass it as an argument or through env:, not inside the code",
        "quote": "write it outside the single quotes",
        "delim": "use a fixed delimiter",
    }[placement.sink]
    return f"${name} is a string {where}; {_WHY[placement.sink]}: {fix}"


def _render(
    name: str, values: Mapping[str, str], words: Mapping[str, str], ints: Collection[str], placement: "Placement"
) -> str:
    if placement.backquotes > 1:
        raise _Refused(f"${name} is inside nested backquotes, which lanpool does not quote for: write $(...) instead")
    if placement.backquotes and placement.quote in "hH":
        raise _Refused(f"${name} is in a here-document inside backquotes: write $(...) instead")
    if name in words:
        if placement.sink:
            raise _Refused(_refusal(name, placement))
        if placement.quote in "phH":
            raise _Refused(
                f"${name} is several words: write it as plain arguments, not inside ${{...}} or a here-document"
            )
        return _splice(words[name], placement)
    value = values[name]
    if placement.sink and not (name in ints and _INT.fullmatch(value)):
        raise _Refused(_refusal(name, placement))
    return _escape(value, placement)


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


def _double_quoted(value: str) -> str:
    return re.sub(r'([\\$`"])', r"\\\1", value)  # inside "...": only these four are live


def _escape(value: str, placement: "Placement") -> str:
    quote = placement.quote
    if quote == "d":
        text = _double_quoted(value)
    elif quote == "s":  # inside '...': close, add an unquoted word, reopen
        text = "'" + escape_word(value) + "'"
    elif quote == "a":  # inside $'...': the same, reopening $'...' so its \ escapes still mean the same
        text = "'" + escape_word(value) + "$'"
    elif quote == "p":  # a word in ${x:-...}: a nested "..." means the same for every operator
        text = '"' + _double_quoted(value) + '"'
    elif quote == "h":  # a here-document body: expansions are live, quotes are not
        text = re.sub(r"([\\$`])", r"\\\1", value)
    elif quote == "H":  # a quoted here-document: nothing is live (its lines are checked afterwards)
        text = value
    else:
        text = escape_word(value)
    return _backquoted(text, placement.backquotes)


def _backquoted(text: str, levels: int) -> str:
    """In `...`, bash strips one level of backslashes before \\, $ and ` first."""
    return re.sub(r"([\\$`])", r"\\\1", text) if levels else text


def _splice(words: str, placement: "Placement") -> str:
    """Escaped words in any context: their `'\\n'` newlines and backslashes only hold unquoted."""
    text = {"d": '"{}"', "s": "'{}'", "a": "'{}$'"}.get(placement.quote, "{}").format(words)
    return _backquoted(text, placement.backquotes)


def _check_heredoc(
    doc: "HereDoc", result: str, moved: Callable[[int], int], placed: list[tuple[int, str]], line: int
) -> None:
    """No value may put the delimiter's line into a here-document: bash would end it there."""
    if not placed:
        return
    from lanpool.app.workflows.shell_heredocs import line_ending_early

    start = moved(doc.start)
    at = line_ending_early(doc, result[start : moved(doc.end)])
    if at >= 0:
        name = next((n for pos, n in reversed(placed) if pos <= start + at + len(doc.delimiter)), placed[0][1])
        raise UnsafeVariable(
            name,
            f"the value of ${name} puts the line {doc.delimiter!r} into a here-document, "
            "which would end it there and run the rest as commands: change the value "
            "or the delimiter",
            line,
        )
