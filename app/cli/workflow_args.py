"""The words after the workflow name in `app headless run W ...` and `plan W ...`.

The rule (README "Headless CLI"): lanpool's options go before the workflow name,
the workflow's variables after it, as `dstack run W --var value` did. After the
name a variable always wins: any name the workflow formats allow (`run`,
`project`, `d`, `batch-size` ...) reaches the job, and an option of the same
spelling has to be given before the name (a note says so). lanpool's options
still work after the name where no variable of the workflow is spelled like
them. Nothing is matched by prefix, and a spelling that could mean two things
is an error naming both, never a guess. A workflow that takes `${{ run.args }}` (dstack
2022) gets every other word after its name, in order, as its run's arguments.
"""

from collections.abc import Collection
from dataclasses import dataclass, field

from lanpool.app.errors import UsageError
from lanpool.protocol.message_base import Record, record


@dataclass(eq=False)  # never compared: no __eq__ compiled at import
class Tail:
    """What the words after the workflow name meant."""

    overrides: dict[str, str] = field(default_factory=dict)  # variable name (as the project spells it) -> text
    options: list[str] = field(default_factory=list)  # lanpool option words, for the verb's own parser
    run_args: list[str] = field(default_factory=list)  # `${{ run.args }}`, for a workflow that takes them
    notes: list[str] = field(default_factory=list)  # one line each, for stderr


@record
class Options(Record):
    """The verb's options: each spelling -> whether it takes a value, and its other spellings."""

    takes_value: dict[str, bool]
    aliases: dict[str, tuple[str, ...]]  # "-d" -> ("-d", "--detach")

    def shown(self, spelling: str) -> str:
        return "/".join(self.aliases.get(spelling, (spelling,)))


def _key(name: str) -> str:
    # `--batch-size` for a variable `batch_size` (and the reverse): how variables were always passed.
    return name.replace("-", "_")


def match_variable(spelled: str, variables: Collection[str]) -> str | None:
    """The variable `--spelled` names: exactly, else the one that differs only in `-` vs `_`."""
    if spelled in variables:
        return spelled
    close = sorted(v for v in variables if _key(v) == _key(spelled))
    if len(close) > 1:
        both = " and ".join(repr(v) for v in close)
        raise UsageError(f"--{spelled} could be variable {both}: write the name exactly as variables.yaml spells it")
    return close[0] if close else None


def tail_value(tokens: list[str], option: str) -> str | None:
    """The value of `option` given after the workflow name (last one wins), if any.

    Every `--` word after the name is a variable or an option, never a value (a
    value starting with `--` is written `--name=VALUE`), so this scan cannot
    mistake a variable's value for the option."""
    found = None
    for i, token in enumerate(tokens):
        if token == option and i + 1 < len(tokens):
            found = tokens[i + 1]
        elif token.startswith(option + "="):
            found = token[len(option) + 1 :]
    return found


class _Reader:
    def __init__(
        self, tokens: list[str], variables: Collection[str], options: Options, verb: str, workflow: str, run_args: bool
    ):
        self.tokens, self.variables, self.options = tokens, variables, options
        self.verb, self.workflow, self.takes_run_args = verb, workflow, run_args
        self.tail = Tail()
        self.i = 0

    def before_name(self, option: str, value: str = "") -> str:
        return f"app headless {self.verb} {option}{value} {self.workflow} ..."

    def value_of(self, spelled: str, what: str, flag: str | None) -> str:
        """The word after `--spelled`, refused where it is itself an option or a variable."""
        nxt = self.tokens[self.i + 1] if self.i + 1 < len(self.tokens) else None
        if nxt is None or (nxt.startswith("--") and len(nxt) > 2):
            if flag is not None:  # `run W --help` where W has a variable `help`
                raise UsageError(
                    f"--{spelled} needs a value: after the workflow name it is {what}; lanpool's option "
                    f"{self.options.shown(flag)} goes before the name: {self.before_name(flag)}"
                )
            after = f", not {nxt!r} (a value starting with -- is written --{spelled}=VALUE)" if nxt else ""
            raise UsageError(f"--{spelled} needs a value: it is {what}{after}")
        if nxt in self.options.takes_value:  # `--lr -d`: the value, or the option -d/--detach?
            raise UsageError(
                f"--{spelled} {nxt}: is {nxt!r} the value of {what}, or lanpool's option "
                f"{self.options.shown(nxt)}? Write --{spelled}={nxt} for the value; the option goes before "
                f"the name: {self.before_name(nxt)}"
            )
        self.i += 1
        return nxt

    def variable(self, spelled: str, name: str, value: str | None, option: str | None) -> None:
        what = f"variable {name!r} of {self.workflow!r}"
        if value is None:
            flag = option if option is not None and not self.options.takes_value[option] else None
            value = self.value_of(spelled, what, flag)
        if name in self.tail.overrides:
            raise UsageError(
                f"--{spelled} given twice ({self.tail.overrides[name]!r}, then {value!r}): give {what} once"
            )
        self.tail.overrides[name] = value
        if option is not None:
            self.tail.notes.append(
                f"note: --{spelled} is {what}; lanpool's option {self.options.shown(option)} goes before "
                f"the workflow name: {self.before_name(option)}"
            )

    def option(self, token: str, option: str, has_value: bool) -> None:
        self.tail.options.append(token)
        if self.options.takes_value[option] and not has_value:
            if self.i + 1 >= len(self.tokens):
                raise UsageError(f"{self.options.shown(option)} needs a value")
            self.i += 1
            self.tail.options.append(self.tokens[self.i])

    def unexpected(self, token: str) -> UsageError:
        prev = self.tokens[self.i - 1] if self.i else ""
        if prev.startswith("-") and not prev.startswith("--") and prev[1:] in self.variables:
            # `-d 5` where the workflow has a variable `d`: the flag was taken, not the variable.
            return UsageError(
                f"{prev} {token}: {prev} is lanpool's option {self.options.shown(prev)}; "
                f"variable {prev[1:]!r} is written --{prev[1:]} {token}"
            )
        return UsageError(f"unexpected argument {token!r}: variables are given as --NAME VALUE")

    def read(self) -> Tail:
        while self.i < len(self.tokens):
            token = self.tokens[self.i]
            if token.startswith("--") and len(token) > 2:
                spelled, eq, value = token[2:].partition("=")
                name = match_variable(spelled, self.variables)
                option = f"--{spelled}" if f"--{spelled}" in self.options.takes_value else None
                if name is not None and option is not None and name != spelled:
                    raise UsageError(
                        f"--{spelled} could be lanpool's option {self.options.shown(option)} or variable "
                        f"{name!r} of {self.workflow!r}: write --{name} for the variable, or put the option "
                        f"before the name: {self.before_name(option)}"
                    )
                if name is not None:
                    self.variable(spelled, name, value if eq else None, option)
                elif option is not None:
                    self.option(token, option, bool(eq))
                elif self.takes_run_args:
                    self.tail.run_args.append(token)
                else:
                    valid = ", ".join(f"--{n}" for n in sorted(self.variables)) or "none (add them to variables.yaml)"
                    raise UsageError(
                        f"unknown variable --{spelled} for {self.workflow!r}; valid: {valid}; "
                        f"lanpool's options go before the workflow name"
                    )
            elif token in self.options.takes_value:  # a short option (-d, -h): never a variable's spelling
                self.option(token, token, False)
            elif self.takes_run_args:
                self.tail.run_args.append(token)
            else:
                raise self.unexpected(token)
            self.i += 1
        return self.tail


def read_tail(
    tokens: list[str], variables: Collection[str], options: Options, verb: str, workflow: str, run_args: bool = False
) -> Tail:
    """Sort the words after the workflow name into variable overrides and lanpool options (and,
    with `run_args`, the run's arguments: every other word).

    A variable given twice is an error (one of the two values would be dropped)."""
    return _Reader(tokens, variables, options, verb, workflow, run_args).read()
