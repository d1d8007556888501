"""The interactive terminal UI (`app [PATH]`). Only this package imports textual."""

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """`app [PATH]`: open the TUI on the project at PATH (default: the current dir)."""
    if len(argv) > 1:
        print(f"app: error: unexpected arguments {' '.join(argv[1:])!r}: `app [PATH]` opens the TUI, "
              "`app headless ...` is for scripts (see --help)", file=sys.stderr)
        return 2
    project = Path(argv[0]).expanduser() if argv else None
    if project is not None and not project.is_dir():
        print(f"app: error: {project} is not a directory: `app [PATH]` opens the project at PATH", file=sys.stderr)
        return 2
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("app: error: the TUI needs a terminal: use `app headless ...` from scripts (see --help)",
              file=sys.stderr)
        return 2
    from app.errors import LanpoolError
    from app.tui.app import LanpoolApp

    try:
        tui = LanpoolApp(project.resolve() if project else None)
    except LanpoolError as exc:
        print(f"app: error: {exc.message}", file=sys.stderr)
        return int(exc.exit_code)
    tui.run()
    return tui.return_code or 0
