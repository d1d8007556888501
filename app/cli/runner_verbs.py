"""`app headless runners` (list, add, remove, pair) and `key`: the runners this controller trusts."""

import argparse
import json
import socket

from lanpool.app.cli import render
from lanpool.app.cli.render import say
from lanpool.app.controller import Controller, parse_address
from lanpool.app.errors import ExitCode, UsageError
from lanpool.app.views.formatting import RUNNER_HEADERS, clip, gpu_util_text, runner_cells

HELD_BY_SHOWN = 80  # the table's column; --json has it whole


async def runners(ctl: Controller, args: argparse.Namespace) -> int:
    if args.runners_verb == "remove":
        if not ctl.pool.forget(args.name):
            raise UsageError(f"no runner named {args.name!r}: `app headless runners` lists them")
        say(f"forgot runner {args.name}")
        return ExitCode.OK
    if args.runners_verb == "pair":
        name = await ctl.pool.pair(args.name, args.code, label=socket.gethostname())
        say(f"paired with runner {name}: it accepts this controller's key from now on")
        return ExitCode.OK
    if args.runners_verb == "add":
        host, port = parse_address(args.address, ctl.DEFAULT_PORT)
        name = await ctl.add_runner(host, port)
        say(f"added runner {name} at {host}:{port}: its host key is pinned and it takes jobs from now on")
        return ExitCode.OK
    views = await ctl.pool.refresh(wait_s=max(0.0, args.wait))
    for view in views:
        if view.problem:  # one line each; the other runners are listed as usual
            say(f"app: {view.problem}")
    if args.json:
        print(json.dumps([v.to_json() for v in views], indent=2))
    elif not views:
        print("no runners found: start `app agent serve` on a GPU machine, or `app headless runners add HOST[:PORT]`")
    else:
        # GPU UTIL after GPUS FREE and who holds it last: here only, the TUI's Runners table has its own columns
        headers = [*RUNNER_HEADERS[:4], "GPU UTIL", *RUNNER_HEADERS[4:]]
        rows = [[*cells[:4], gpu_util_text(v), *cells[4:]] for v in views for cells in [runner_cells(v)]]
        if any(v.held_by for v in views):
            headers.append("HELD BY")
            rows = [[*row, clip(v.held_by or "-", HELD_BY_SHOWN)] for row, v in zip(rows, views, strict=True)]
        print(render.table(headers, rows))
    return ExitCode.OK


async def key(ctl: Controller, args: argparse.Namespace) -> int:
    print(ctl.public_key_file)
    return ExitCode.OK
