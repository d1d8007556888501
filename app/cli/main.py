"""Entry point of the `app` console script."""

import gc
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:  # argparse is imported only by the verbs that parse
    import argparse

_USAGE = (
    "usage: app [PATH]                the terminal UI on the project at PATH (default: here);\n"
    "                                 --notify, --notify-cmd CMD: also tell when a job ends\n"
    "       app headless VERB ...   the controller for scripts and CI\n"
    "       app agent VERB ...      the runner daemon\n"
    '       app completion bash|zsh a shell completion script: eval "$(app completion bash)" in ~/.bashrc\n'
    "       app help [TOPIC]        the documentation installed with lanpool (`app help` lists the topics)\n"
    "       app --version\n"
)


def main(argv: list[str] | None = None) -> int:
    """The program. Called with no argv (the console script, `python -m lanpool.app.cli.main`), a
    headless verb ends the process itself once its output is flushed (`_exit_now`)."""
    as_program = argv is None
    argv = sys.argv[1:] if argv is None else argv
    # What the imports allocate is never garbage: collecting during them, and
    # walking it all again at exit, costs ~130 ms of every short CLI call.
    gc.disable()
    try:
        verb = _load(argv[0] if argv else "")
    finally:
        gc.freeze()
        gc.enable()
    if verb is None:
        if argv[0] in ("-h", "--help"):
            print(_help())
            return 0
        print(f"app: error: unknown option {argv[0]!r}: `app --help` lists the commands", file=sys.stderr)
        return 2
    code = verb(argv if verb is _tui else argv[1:])
    if as_program and argv[:1] == ["headless"]:
        _exit_now(code)
    return code


def _exit_now(code: int) -> NoReturn:
    """End a headless command without interpreter teardown (~100 ms on a 2-core machine:
    every module's dict and every object freed one by one, atexit, GC).

    Safe here because by now the verb has returned: the Controller closed its SQLite
    connection (autocommit; each `atomic` block committed or rolled back),
    asyncio.run closed its loop and executor, and files were closed by their `with`.
    What is left: buffered output and logging handlers, flushed below. The TUI and
    the agent exit the usual way.
    """
    if "logging" in sys.modules:
        import logging

        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`): nothing more can reach it
            pass
    os._exit(code)


def _load(first: str) -> Callable[[list[str]], int] | None:
    if first == "agent":
        # The one place `app` reaches into `agent`: starting the runner daemon.
        from lanpool.agent.cli import main as agent_main

        return agent_main
    if first == "headless":
        from lanpool.app.cli.headless import main as headless_main

        return headless_main
    if first in ("-V", "--version"):
        return _version
    if first == "completion":
        return _completion
    if first == "help":
        from lanpool.app.cli.help_topics import main as help_main

        return help_main
    if first == "__complete":  # hidden: what the completion scripts call on each Tab
        from lanpool.app.cli.completion import main as complete_main

        return complete_main
    if first.startswith("-") and first != "--notify" and not first.startswith("--notify-cmd"):
        return None
    return _tui  # `app`, `app PATH`, `app --notify ...`


def _tui(argv: list[str]) -> int:
    from lanpool.app.tui import main as tui_main

    return tui_main(argv)


def _parsers() -> "dict[str, argparse.ArgumentParser]":
    from lanpool.agent.cli import build_parser as agent_parser
    from lanpool.app.cli.parser import build_parser as headless_parser

    return {"headless": headless_parser(), "agent": agent_parser()}


def _help() -> str:
    """The usage, then every verb with its one line, read from the parsers so none is left out."""
    from lanpool.app.cli.completion import verb_helps

    lines = [_USAGE]
    for word, parser in _parsers().items():
        lines.append(f"app {word} verbs:")
        lines += [f"  {verb:<12}{text}" for verb, text in verb_helps(parser)]
        lines.append("")
    lines.append(
        "Start with `app headless run --help`; `app help` lists the documentation installed with lanpool "
        "(`app help cli`: every verb; `app help lan-walkthrough`: two machines in five minutes)."
    )
    return "\n".join(lines)


def _completion(argv: list[str]) -> int:
    from lanpool.app.cli.completion import SHELLS, script

    if len(argv) != 1 or argv[0] not in SHELLS:
        print(f"app completion: error: expects one shell, {' or '.join(SHELLS)}: app completion bash", file=sys.stderr)
        return 2
    print(script(argv[0], _parsers()), end="")
    return 0


def _version(_argv: list[str]) -> int:
    from lanpool import __version__

    print(f"lanpool {__version__}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
