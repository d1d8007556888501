"""Entry point of the `app` console script."""

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "agent":
        # The one place `app` reaches into `agent`: starting the runner daemon.
        from agent.cli import main as agent_main

        return agent_main(argv[1:])
    if argv and argv[0] == "headless":
        from app.cli.headless import main as headless_main

        return headless_main(argv[1:])
    if argv and argv[0] in ("-V", "--version"):
        from app import __version__

        print(f"lanpool {__version__}")
        return 0
    print(
        "usage: app headless VERB ...   run, status, logs, stop, artifacts, runners, key (scripts and CI)\n"
        "       app agent VERB ...      serve, authorize (the runner daemon)\n"
        "       app --version\n"
        "\n"
        "Start with `app headless run --help` or the README.",
        file=sys.stderr if argv else sys.stdout,
    )
    return 0 if not argv or argv[0] in ("-h", "--help") else 2


if __name__ == "__main__":
    raise SystemExit(main())
