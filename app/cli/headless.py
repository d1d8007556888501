"""`app headless <verb>`: the controller from scripts and CI.

Every verb calls the same Controller API as the TUI. Errors are one line on
stderr and an ExitCode; `run` exits with the job's own exit code. The verbs
live by area: app/cli/run_verbs.py (run, plan), job_verbs.py (status, logs,
stop, artifacts, metrics), compare_verbs.py (compare), attach_verbs.py (attach), retention_verbs.py (rm, prune), runner_verbs.py
(runners, key), secret_verbs.py (secrets), usage_verbs.py (usage), dev_verbs.py (ssh-config);
the command line itself in parser.py.
"""

import argparse
import importlib
import os
import sqlite3
import sys
from collections.abc import Callable, Coroutine
from typing import Any, cast

from lanpool.app.cli.parser import parse_args
from lanpool.app.controller import Controller
from lanpool.app.errors import ExitCode, LanpoolError
from lanpool.app.views.terminal_text import safe_text
from lanpool.protocol.runtime import event_loop

Handler = Callable[[Controller, argparse.Namespace], Coroutine[Any, Any, int]]

# verb -> (module under app.cli, function): a verb imports only its own module (start-up
# time is most of a short command's time).
_HANDLERS: dict[str, tuple[str, str]] = {
    "run": ("run_verbs", "run"),
    "plan": ("run_verbs", "plan"),
    "status": ("job_verbs", "status"),
    "logs": ("job_verbs", "logs"),
    "stop": ("job_verbs", "stop"),
    "attach": ("attach_verbs", "attach"),
    "artifacts": ("job_verbs", "artifacts"),
    "metrics": ("job_verbs", "metrics"),
    "compare": ("compare_verbs", "compare"),
    "usage": ("usage_verbs", "usage"),
    "rm": ("retention_verbs", "rm"),
    "prune": ("retention_verbs", "prune"),
    "runners": ("runner_verbs", "runners"),
    "key": ("runner_verbs", "key"),
    "ssh": ("shell_verbs", "ssh"),
    "exec": ("shell_verbs", "exec_"),
    "ports": ("shell_verbs", "ports"),
    "ssh-config": ("dev_verbs", "ssh_config"),
    "secrets": ("secret_verbs", "secrets"),
}


# Verbs that only ask runners a question or two (or none: `usage` reads the store): asyncio's own loop
# (already imported) serves them as well as uvloop, whose import (~4 ms) they would pay for nothing
# (protocol/runtime/event_loop.py says where uvloop pays: moving bytes).
_ON_ASYNCIO_LOOP = frozenset({"runners", "key", "usage", "ssh-config"})


def handler_of(verb: str) -> Handler:
    module, name = _HANDLERS[verb]
    return cast(Handler, getattr(importlib.import_module(f"lanpool.app.cli.{module}"), name))


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    handler = handler_of(args.verb)
    ctl = None
    try:
        ctl = Controller()
        return int(event_loop.run(handler(ctl, args), prefer_uvloop=args.verb not in _ON_ASYNCIO_LOOP))
    except LanpoolError as exc:
        print(f"app: error: {safe_text(exc.message)}", file=sys.stderr)  # may quote a runner's text
        return int(exc.exit_code)
    except BrokenPipeError:  # `app headless ... | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.OK
    except (sqlite3.Error, OSError) as exc:  # a full disk under LANPOOL_HOME: one line, not a traceback
        full = ctl.disk_full(exc) if ctl is not None else None
        if full is None:
            raise
        print(f"app: error: {safe_text(full.message)}", file=sys.stderr)
        return int(full.exit_code)
    except KeyboardInterrupt:
        if args.verb == "attach":  # detaching is what Ctrl-C is for there: not an interruption
            print(
                f"\napp: detached; the job keeps running (`app headless attach {safe_text(args.ref)}` again)",
                file=sys.stderr,
            )
            return ExitCode.OK
        print(
            "\napp: interrupted; a job its runner took keeps running there "
            "(`app headless status` lists them; `app headless stop RUN` stops one)",
            file=sys.stderr,
        )
        return 130
    finally:
        if ctl is not None:
            ctl.close()
