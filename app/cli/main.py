"""Entry point of the `app` console script."""

import gc
import sys
from collections.abc import Callable

_USAGE = (
    "usage: app [PATH]                the terminal UI on the project at PATH (default: here)\n"
    "       app headless VERB ...   run, status, logs, stop, artifacts, rm, prune, runners, key (scripts and CI)\n"
    "       app agent VERB ...      serve, authorize (the runner daemon)\n"
    "       app --version\n"
    "\n"
    "Start with `app headless run --help` or the README."
)


def main(argv: list[str] | None = None) -> int:
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
            print(_USAGE)
            return 0
        print(f"app: error: unknown option {argv[0]!r}: `app --help` lists the commands", file=sys.stderr)
        return 2
    return verb(argv if verb is _tui else argv[1:])


def _load(first: str) -> Callable[[list[str]], int] | None:
    if first == "agent":
        # The one place `app` reaches into `agent`: starting the runner daemon.
        from agent.cli import main as agent_main

        return agent_main
    if first == "headless":
        from app.cli.headless import main as headless_main

        return headless_main
    if first in ("-V", "--version"):
        return _version
    if first.startswith("-"):
        return None
    return _tui  # `app` or `app PATH`


def _tui(argv: list[str]) -> int:
    from app.tui import main as tui_main

    return tui_main(argv)


def _version(_argv: list[str]) -> int:
    from app import __version__

    print(f"lanpool {__version__}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
