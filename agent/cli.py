"""`app agent <verb>`: run and manage the runner daemon on this machine."""

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

import platformdirs

from agent.errors import AgentError
from agent.home import AgentHome
from agent.jobs import DEFAULT_GRACE_S
from agent.keys import authorize_key
from agent.server import DEFAULT_PORT


def default_data_dir() -> Path:
    env = os.environ.get("LANPOOL_AGENT_HOME")
    return Path(env) if env else Path(platformdirs.user_data_dir("lanpool")) / "agent"


def build_parser(prog: str = "app agent") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Run and manage a lanpool runner agent.")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    serve = sub.add_parser("serve", help="run the agent (SSH server) in the foreground")
    serve.add_argument("--host", default="0.0.0.0", help="address to listen on (default: all IPv4)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port, 0 for any free one (default {DEFAULT_PORT})")
    serve.add_argument("--name", help="runner name shown to controllers (default: host name)")
    serve.add_argument("--data-dir", type=Path, default=None, help="keys, jobs and logs (default: $LANPOOL_AGENT_HOME or the user data dir)")
    serve.add_argument("--grace", type=float, default=DEFAULT_GRACE_S, help="seconds between SIGTERM and SIGKILL on stop (default 10)")
    serve.add_argument("-v", "--verbose", action="store_true", help="log every connection and job")

    auth = sub.add_parser("authorize", help="allow a controller's public key to connect")
    auth.add_argument("pubkey_file", type=Path, help="the controller's .pub file (app headless key prints its path)")
    auth.add_argument("--data-dir", type=Path, default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    home = AgentHome((args.data_dir or default_data_dir()).expanduser().resolve())
    try:
        if args.verb == "serve":
            logging.basicConfig(
                level=logging.INFO if args.verbose else logging.WARNING,
                format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            )
            asyncio.run(_serve(home, args))
        elif args.verb == "authorize":
            home.create()
            added = authorize_key(home.authorized_keys, args.pubkey_file)
            print(f"{'authorized' if added else 'already authorized'}: {args.pubkey_file} -> {home.authorized_keys}")
    except AgentError as exc:
        print(f"app agent: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"app agent: error: {exc.strerror or exc}: {getattr(exc, 'filename', '') or ''}".rstrip(": "), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


async def _serve(home: AgentHome, args: argparse.Namespace) -> None:
    from agent.server import serve

    await serve(home, args.name, args.host, args.port, args.grace)
