"""`app headless secrets set|list|rm`: the values `${{ secrets.NAME }}` stands for (app/secret_store.py).

A value never comes from the command line (argv is visible in `ps` and shell
history): it is read from `--from-file`, from stdin when that is a pipe, or
from a prompt that does not echo.
"""

import argparse
import getpass
import json
import sys

from lanpool.app.cli.render import say
from lanpool.app.controller import Controller
from lanpool.app.errors import ExitCode, UsageError
from lanpool.app.secret_store import check_name


def _value(args: argparse.Namespace) -> str:
    text: str
    if args.from_file is not None:
        try:
            text = args.from_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--from-file {args.from_file}: {getattr(exc, 'strerror', None) or exc}") from None
    elif sys.stdin.isatty():
        text = getpass.getpass(f"value of {args.name} (not echoed): ")
    else:
        text = sys.stdin.read()
    # `echo TOKEN | ...` and files end with a newline that is not part of the value.
    return text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text


async def secrets(ctl: Controller, args: argparse.Namespace) -> int:
    store = ctl.secrets
    if args.secrets_verb == "set":
        check_name(args.name)  # before a prompt asks for a value that would be refused
        store.set(args.name, _value(args))
        say(f"secret {args.name} set in {store.path} (mode 0600); use it as ${{{{ secrets.{args.name} }}}} in env:")
        return ExitCode.OK
    if args.secrets_verb == "rm":
        if not store.remove(args.name):
            raise UsageError(f"no secret named {args.name!r}: `app headless secrets list` shows them")
        say(f"secret {args.name} removed")
        return ExitCode.OK
    names = store.names()
    if args.json:
        print(json.dumps(names))
    elif names:
        print("\n".join(names))
    else:
        say("no secrets: `app headless secrets set NAME` adds one")
    return ExitCode.OK
