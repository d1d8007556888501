"""`run`'s and `plan`'s command-line options as the Controller takes them (app/cli/run_verbs.py, and
app/cli/sweep_verbs.py for each point of a sweep)."""

import argparse
from typing import Any

from lanpool.app.runs.env_overrides import parse_env_args, read_env_file


def options_of_run(args: argparse.Namespace) -> dict[str, Any]:
    """Controller.run's options as the command line gives them (`run` and a sweep's points)."""
    return {
        "runner_spec": args.runner,
        "overrides": args.overrides,
        "follow": not args.detach,
        "no_cache": args.no_cache,
        "reuse": args.reuse,
        "tag": args.tag,
        "nodes": args.nodes,
        "resume": args.resume,
        "ports": args.ports,
        "env": env_of(args),
        "max_duration_s": args.max_duration,
        "queue_timeout": args.queue_timeout,
        "resources": resources_of(args),
        "run_name": args.run_name,
    }


def resources_of(args: argparse.Namespace) -> dict[str, int | str]:
    """`--gpu`, `--cpu`, `--memory` as one map (each already checked by the parser)."""
    out: dict[str, int | str] = {}
    for given in (args.gpu, args.cpu, args.memory):
        out.update(given or {})
    return out


def env_of(args: argparse.Namespace) -> dict[str, str]:
    """--env-file FILEs in order, then each --env: the later wins (app/runs/env_overrides.py)."""
    env: dict[str, str] = {}
    for path in args.env_file:
        env.update(read_env_file(path))
    env.update(parse_env_args(args.env))
    return env
