"""`run --env KEY=VALUE` and `--env-file FILE`: env for a run's jobs, over the workflow's `env:`.

Order (later wins): the workflow's variables as env, its `env:`, the env file,
then each `--env`. lanpool's own names (LANPOOL_*, MASTER_ADDR, MASTER_PORT,
NODE_RANK) are set by lanpool after all of these and cannot be overridden, so
naming one is refused rather than silently ignored. The values are inputs of
each job (its cache key sees them); a `${{ secrets.NAME }}` in a value is a
secret, kept out of the key (app/secret_store.py).

The env file is the usual dotenv subset: `KEY=VALUE` lines, an optional
`export ` before the key, blank lines and `#` comments, values bare (an inline
` #` starts a comment), in single quotes (taken as written) or in double quotes
(`\\n`, `\\"`, `\\\\` and `\\$` read as escapes). No variable expansion, no
multi-line values: a line that is none of these is one error naming FILE:LINE.
"""

import re
from collections.abc import Iterable
from pathlib import Path

from lanpool.app.errors import UsageError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LANPOOLS = frozenset({"MASTER_ADDR", "MASTER_PORT", "NODE_RANK"})
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "$": "$"}
MAX_FILE_BYTES = 1024 * 1024


def check_env_name(name: str, where: str) -> str:
    if not _NAME.fullmatch(name):
        raise UsageError(f"{where}: {name[:60]!r} is not an environment variable name (letters, digits, '_')")
    if name.startswith("LANPOOL_") or name in _LANPOOLS:
        raise UsageError(
            f"{where}: {name} is set by lanpool for every job and cannot be overridden "
            "(docs/workflows.md, 'Environment and secrets')"
        )
    return name


def parse_env_args(pairs: Iterable[str]) -> dict[str, str]:
    """`--env KEY=VALUE` words, in order (a key given twice: the last wins, as in docker run -e)."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq:
            raise UsageError(f"--env {pair[:60]!r}: expected KEY=VALUE (e.g. --env WANDB_MODE=offline)")
        env[check_env_name(key, f"--env {key[:60]}")] = value
    return env


def read_env_file(path: Path) -> dict[str, str]:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"--env-file {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise UsageError(f"--env-file {path}: over {MAX_FILE_BYTES // 1024} KiB: is this an env file?")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"--env-file {path}: not UTF-8 text (byte {exc.start})") from None
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{path}:{number}"
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("export "):
            stripped = stripped[len("export ") :].lstrip()
        key, eq, rest = stripped.partition("=")
        key = key.rstrip()
        if not eq or not _NAME.fullmatch(key):
            # The line itself is not shown: an env file often holds tokens, and this goes to CI logs.
            raise UsageError(f"{where}: expected KEY=VALUE (a name of letters, digits and '_', then '=')")
        env[check_env_name(key, where)] = _value(rest.lstrip(), where)
    return env


def _value(text: str, where: str) -> str:
    if text[:1] == "'":
        end = text.find("'", 1)
        if end < 0:
            raise UsageError(f"{where}: the single quote is not closed (values are one line)")
        _only_comment_after(text[end + 1 :], where)
        return text[1:end]
    if text[:1] == '"':
        out, i = [], 1
        while i < len(text):
            c = text[i]
            if c == "\\" and i + 1 < len(text):
                out.append(_ESCAPES.get(text[i + 1], "\\" + text[i + 1]))
                i += 2
                continue
            if c == '"':
                _only_comment_after(text[i + 1 :], where)
                return "".join(out)
            out.append(c)
            i += 1
        raise UsageError(f"{where}: the double quote is not closed (values are one line)")
    value = re.split(r"\s#", text, maxsplit=1)[0]
    return value.rstrip()


def _only_comment_after(rest: str, where: str) -> None:
    rest = rest.strip()
    if rest and not rest.startswith("#"):
        raise UsageError(f"{where}: text after the closing quote (only a # comment may follow)")
