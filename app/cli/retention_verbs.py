"""`app headless rm` and `prune`: old runs, their logs and artifacts off this controller."""

import argparse
import json

from lanpool.app.cli.render import say
from lanpool.app.controller import Controller, Removal
from lanpool.app.errors import ExitCode
from lanpool.app.views.formatting import size


async def rm(ctl: Controller, args: argparse.Namespace) -> int:
    removal = ctl.retention.remove(args.refs, dry_run=args.dry_run)
    _report(removal, args.json)
    return ExitCode.OK


async def prune(ctl: Controller, args: argparse.Namespace) -> int:
    removal = ctl.retention.prune(args.older_than, keep_tagged=args.keep_tagged, dry_run=args.dry_run)
    _report(removal, args.json)
    return ExitCode.OK


def _report(removal: Removal, as_json: bool) -> None:
    if as_json:
        print(json.dumps(removal.to_json(), indent=2))
        return
    for run, why in removal.kept:
        say(f"kept run {run}: {why}")
    verb = "would remove" if removal.dry_run else "removed"
    if not removal.jobs and not removal.runs and not removal.orphans:
        say(f"{verb} nothing")
        return
    runs = f"{len(removal.runs)} run(s) ({', '.join(removal.runs)}), " if removal.runs else ""
    orphans = f", {len(removal.orphans)} leftover(s) of jobs no longer stored" if removal.orphans else ""
    say(
        f"{verb} {runs}{len(removal.jobs)} job(s){orphans}, {removal.files} artifact file(s): "
        f"{'would free' if removal.dry_run else 'freed'} {size(removal.freed)} "
        f"({size(removal.artifact_bytes)} of artifacts, {size(removal.log_bytes)} of logs)"
    )
