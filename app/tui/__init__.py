"""The interactive terminal UI (`app [PATH]`). Only this package imports textual."""

import sys
from pathlib import Path


def _notify_options(argv: list[str]) -> tuple[bool, str | None, list[str]]:
    """`--notify` and `--notify-cmd CMD` (or `--notify-cmd=CMD`) taken out of `argv`, anywhere in it."""
    desktop, command, rest = False, None, []
    args = iter(argv)
    for arg in args:
        if arg == "--notify":
            desktop = True
        elif arg == "--notify-cmd":
            command = next(args, "")
        elif arg.startswith("--notify-cmd="):
            command = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return desktop, command, rest


def main(argv: list[str]) -> int:
    """`app [--notify] [--notify-cmd CMD] [PATH]`: open the TUI on the project at PATH (default:
    the current dir); with the options, a job that ends also notifies as `run --notify` does."""
    from lanpool.app.errors import LanpoolError

    desktop, command_text, argv = _notify_options(argv)
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print(
            f"app: error: unexpected arguments {' '.join(argv[1:] or argv)!r}: `app [--notify] [--notify-cmd CMD] "
            "[PATH]` opens the TUI, `app headless ...` is for scripts (see --help)",
            file=sys.stderr,
        )
        return 2
    command = None
    if command_text is not None:
        from lanpool.app.notify import notify_command

        try:
            command = notify_command(command_text)
        except LanpoolError as exc:
            print(f"app: error: {exc.message}", file=sys.stderr)
            return int(exc.exit_code)
    project = Path(argv[0]).expanduser() if argv else None
    if project is not None and not project.is_dir():
        print(f"app: error: {project} is not a directory: `app [PATH]` opens the project at PATH", file=sys.stderr)
        return 2
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("app: error: the TUI needs a terminal: use `app headless ...` from scripts (see --help)", file=sys.stderr)
        return 2
    LanpoolApp = load_app()
    try:
        tui = LanpoolApp(project.resolve() if project else None, notify_desktop=desktop, notify_command=command)
    except LanpoolError as exc:
        print(f"app: error: {exc.message}", file=sys.stderr)
        return int(exc.exit_code)
    tui.run()
    return tui.return_code or 0


FRAMES_PER_S = 120


def load_app() -> type:
    """Import the app class with the collector off, freeze what the imports made, and
    collect the young generation less often.

    What textual, the controller and their dependencies create at import (~100,000
    objects) lives as long as the process: frozen, it is not walked again by every full
    collection. Nearly all the garbage a frame makes is freed by reference counting;
    with Python's default thresholds (700, 10, 10), following a job that prints 10,000
    lines/s made ~160 collections a second, 25 of them full in 20 s (up to 230 ms
    each, 22% of the time: keys waited for them). With (5000, 20, 20): ~15 a second,
    6% of the time, none full while it streamed, the longest 100 ms (scripts/bench-tui)."""
    import gc
    import os

    # Textual draws a frame at most every 1/TEXTUAL_FPS s, on a fixed grid: a key handled just
    # after a frame (while following a fast job, the log's frames come 20 times a second) waited
    # up to a whole period for its own. At 120 (Textual's default is 60) the key -> frame p95
    # while following went from 47 to 26 ms (scripts/bench-tui); frames still come only when
    # something changed. Read once, at textual's import: a user's own TEXTUAL_FPS wins.
    os.environ.setdefault("TEXTUAL_FPS", str(FRAMES_PER_S))
    gc.disable()
    try:
        from lanpool.app.tui.app import LanpoolApp
    finally:
        gc.freeze()
        gc.set_threshold(5000, 20, 20)
        gc.enable()
    return LanpoolApp
