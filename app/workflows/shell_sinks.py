"""Where bash *evaluates* a value rather than keeping it as text: its sinks.

No quoting keeps a string inert in a sink, so substitute.py refuses string
variables there (a whole number is inert everywhere). shell_model finds the
syntactic ones ($(( )), (( )), $[ ], subscripts, ${x:offset}); this module
holds what a simple command does with its arguments, and what the script
does with shell variables a value was copied into:

  arith   let, declare -i, [[ -eq/-gt/… ]], an assignment once any `declare -i` exists
  name    read, unset, mapfile, getopts, wait, printf -v, declare NAME=, test -v, declare -n
  code    eval, trap, ssh, and the word after `bash -c`, `python -c`, `perl -e` (also
          behind timeout, find -exec, env …)
  copied  NAME=$v, export NAME=$v, for NAME in $v, read NAME <<< $v: then arithmetic
          that mentions NAME (one copy deep; a second copy is not followed)
"""

import re
from dataclasses import dataclass, field

OPENERS = frozenset({"!", "{", "if", "then", "else", "elif", "do", "while", "until", "time"})
ARITH_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-v", "-R"})  # [[ ]] evaluates their operands
ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^]]*\])?\+?=")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
DECLARE = frozenset({"declare", "typeset", "local", "readonly", "export"})
_NAMES = frozenset({"read", "unset", "mapfile", "readarray", "getopts", "wait"})  # their arguments are names
# Programs whose option takes code in the next word: `bash -c CODE`, `python -c CODE`, `perl -e CODE`.
_CODE_OPTION = {
    "sh": "c",
    "bash": "c",
    "dash": "c",
    "zsh": "c",
    "ksh": "c",
    "python": "c",
    "perl": "e",
    "ruby": "e",
    "node": "e",
}


@dataclass(eq=False)
class Placement:
    """Where a substituted value lands in a script, and what bash would do with it there."""

    quote: str  # u: unquoted, d: "...", s: '...', a: $'...', p: a word in ${...}, h/H: here-document (unquoted/quoted)
    backquotes: int = 0  # levels of `...` around it
    sink: str = ""  # "" or arith, name, code, quote, delim, copied: why bash would evaluate a value here
    construct: str = ""  # where, for the error: "$(( ))", "read", "n" (the shell variable it is copied into)


def mark(placement: Placement, sink: str, construct: str) -> None:
    if not placement.sink:
        placement.sink, placement.construct = sink, construct


def reads_name(text: str, name: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text) is not None


def unquote(word: str) -> str:
    return re.sub(r"""['"\\]""", "", word)


@dataclass
class ScriptFacts:
    """What the whole script shares: integer attributes, copies into shell variables, arithmetic."""

    integer_declared: bool = False
    copies: dict[str, list[Placement]] = field(default_factory=dict)
    assignments: list[Placement] = field(default_factory=list)
    arithmetic: list[str] = field(default_factory=list)  # the text of every arithmetic region

    def copied(self, name: str, placement: Placement) -> None:
        self.assignments.append(placement)
        self.copies.setdefault(name, []).append(placement)

    def finish(self) -> None:
        """Once the whole script is read: sinks that depend on what comes later."""
        for placement in self.assignments if self.integer_declared else ():
            mark(placement, "arith", "an assignment to a `declare -i` variable")
        for name, placements in self.copies.items():
            if any(reads_name(text, name) for text in self.arithmetic):
                for placement in placements:
                    mark(placement, "copied", name)


def command_sinks(
    words: list[str], pending: list[tuple[Placement, int, bool]], redirects: set[int], facts: ScriptFacts
) -> None:
    """A simple command is complete: its name decides what its arguments are.

    `pending`: (placement, index of its word, whether it is in the NAME part of NAME=…).
    """
    k = 0
    while k < len(words) and (words[k] in OPENERS or unquote(words[k]) in ("command", "builtin")):
        k += 1
    while k < len(words) and ASSIGN.match(words[k]):
        k += 1
    name = unquote(words[k]) if k < len(words) else ""
    args = [unquote(w) for w in words[k + 1 :]]
    options = "".join(a[1:] for a in args if a[:1] in "-+" and len(a) > 1)
    if name in DECLARE and "i" in options:
        facts.integer_declared = True
    if name == "let" or (name in DECLARE and "i" in options):
        facts.arithmetic.append(" ".join(words[k + 1 :]))  # names in it are evaluated too
    code = _code_word(words, k)
    for placement, index, name_part in pending:
        assign = ASSIGN.match(words[index] if index < len(words) else "")
        if index < k:  # NAME=VALUE before the command: the value is copied into NAME
            if assign and not name_part:
                facts.copied(assign.group(1), placement)
            continue
        if index == k or index in redirects:
            if name == "read" and index in redirects:  # read NAME <<< "$v": NAME holds the value
                for arg in args:
                    if NAME.match(arg):
                        facts.copied(arg, placement)
            continue
        position = index - k  # 1: the first argument
        if name in DECLARE:
            if "n" in options and name != "export":  # a nameref: its value is a name, evaluated on use
                mark(placement, "name", f"{name} -n")
            elif "i" in options:
                mark(placement, "arith", f"{name} -i")
            elif name_part or not assign:
                mark(placement, "name", name)
            else:
                facts.copied(assign.group(1), placement)
        elif name == "let":
            mark(placement, "arith", "let")
        elif name in _NAMES:
            mark(placement, "name", name)
        elif name == "printf" and args[:1] == ["-v"] and position == 2:
            mark(placement, "name", "printf -v")
        elif name in ("test", "[") and ("-v" in args or "-R" in args):
            mark(placement, "name", f"{name} -v")
        elif name in ("eval", "ssh") or (name == "trap" and position == 1):
            mark(placement, "code", name)
        elif index == code[0]:
            mark(placement, "code", code[1])
        elif name in ("for", "select") and position > 2 and len(args) > 1 and args[1] == "in":
            facts.copied(args[0], placement)


def _code_word(words: list[str], k: int) -> tuple[int, str]:
    """The word a `bash -c`, `python -c`, `perl -e` ... runs as code, wherever it stands
    (`timeout 9 bash -c`, `find -exec sh -c`); (-1, "") if none. Later words are arguments."""
    for j in range(k, len(words)):
        program = re.sub(r"[0-9.]+$", "", unquote(words[j]).rsplit("/", 1)[-1])
        letter = _CODE_OPTION.get(program)
        if letter is None:
            continue
        for m in range(j + 1, len(words)):
            option = unquote(words[m])
            if not option.startswith("-") or option.startswith("--"):
                break
            if letter in option:
                return m + 1, f"{program} -{letter}"
    return -1, ""
