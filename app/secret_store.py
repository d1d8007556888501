"""Secrets: values a job needs (tokens, passwords) that lanpool must never keep in clear.

They live in one JSON file in the controller's home, mode 0600, and nowhere
else on the controller. A workflow names one as `${{ secrets.NAME }}` in its
`env:` only; the resolved job, its stored spec and its cache key keep that
placeholder, and the real value is put in only when the SubmitJob for a node
is built (`reveal`). The same values go along as the job's `masked` list: the
runner writes `***` for them in its journal and its log spool, and the
controller does the same to every log chunk before storing or printing it
(`mask`), so a job that echoes its token shows `***`.

Limits: a value shorter than MIN_MASKED characters is not masked (masking
"1" would garble every log); a value the job transforms (base64, reversed) is
not recognised; a Docker job's container keeps its env in Docker's own
records, as every Docker env does.
"""

import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from lanpool.app.errors import UsageError
from lanpool.app.home import ControllerHome

log = logging.getLogger(__name__)

MIN_MASKED = 3  # shorter values are sent but not masked: `secrets set` says so
MAX_VALUE = 64 * 1024
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# `${{ secrets.NAME }}`: the form `substitute._VAR` reads as the name `secrets.NAME`.
SECRET_REF = re.compile(r"\$\{\{\s*secrets\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
PREFIX = "secrets."
MASK = b"***"


class SecretError(UsageError):
    pass


def check_name(name: str) -> str:
    """A secret's name: letters, digits and `_`, as an env name (never a path: no `/`, `.`)."""
    if not _NAME.fullmatch(name):
        raise SecretError(
            f"secret name {name[:80]!r} is not valid: use letters, digits and '_' (not starting with a digit), "
            "e.g. HF_TOKEN"
        )
    return name


def placeholder(name: str) -> str:
    """What the job's stored spec, and its cache key, hold in place of the value."""
    return f"${{{{ secrets.{name} }}}}"


def secret_refs(env: Mapping[str, str]) -> set[str]:
    """The secret names an env's values refer to."""
    return {m.group("name") for value in env.values() for m in SECRET_REF.finditer(value)}


def reveal(env: Mapping[str, str], values: Mapping[str, str]) -> dict[str, str]:
    """The env with each `${{ secrets.NAME }}` replaced by its value (for the SubmitJob only)."""
    return {k: SECRET_REF.sub(lambda m: values[m.group("name")], v) for k, v in env.items()}


def caller_values(names: Iterable[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's own values of the names a workflow passes (`env: [- NAME]`, dstack 2022),
    read when the job is sent. Like a secret's, the value is masked in logs and never stored:
    the stored spec lists the names only."""
    environ = os.environ if environ is None else environ
    values = {}
    for name in names:
        if name not in environ:
            raise SecretError(
                f"env {name}: the workflow passes your {name} (`- {name}` in its env), which is not set here: "
                f"export {name}=... and run again"
            )
        if len(environ[name]) > MAX_VALUE:
            raise SecretError(f"env {name}: your value is over {MAX_VALUE} characters: pass a shorter one")
        values[name] = environ[name]
    return values


def masked_values(values: Iterable[str]) -> list[str]:
    """What is masked in logs for these values: each line of each value (a value of several lines
    is masked line by line, so a log line count never changes), longest first so a shorter one
    never leaves part of a longer one visible. Lines under MIN_MASKED characters are not masked."""
    out: set[str] = set()
    for value in values:
        for line in value.split("\n"):
            line = line.strip("\r")
            if len(line) >= MIN_MASKED:
                out.add(line)
    return sorted(out, key=len, reverse=True)


def mask(data: bytes, masks: Iterable[str]) -> bytes:
    for value in masks:
        raw = value.encode()
        if raw in data:
            data = data.replace(raw, MASK)
    return data


class SecretStore:
    """The secrets file of one controller home: NAME -> value."""

    def __init__(self, home: ControllerHome) -> None:
        self.path = home.root / "secrets.json"

    def _read(self) -> dict[str, str]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise SecretError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        with os.fdopen(fd, "r", encoding="utf-8") as fh:
            if os.fstat(fh.fileno()).st_mode & 0o077:  # someone loosened it: tighten it again
                log.warning("%s was readable by others: mode set back to 0600", self.path)
                os.fchmod(fh.fileno(), 0o600)
            try:
                data = json.load(fh)
            except ValueError:
                raise SecretError(f"{self.path} is not a secrets file lanpool wrote: fix or remove it") from None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise SecretError(f"{self.path} is not a secrets file lanpool wrote: fix or remove it")
        return data

    def _write(self, data: dict[str, str]) -> None:
        # A new file made 0600 from the start (mkstemp), then renamed over the old one:
        # never a moment where the values are readable by others, or half written.
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".secrets-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def names(self) -> list[str]:
        return sorted(self._read())

    def set(self, name: str, value: str) -> None:
        check_name(name)
        if len(value.strip()) < MIN_MASKED:
            raise SecretError(
                f"secret {name}: the value is empty or under {MIN_MASKED} characters, too short to mask in logs"
            )
        if len(value) > MAX_VALUE:
            raise SecretError(f"secret {name}: {len(value)} characters, at most {MAX_VALUE}")
        if "\0" in value:
            raise SecretError(f"secret {name}: the value holds a NUL character, which no environment can carry")
        data = self._read()
        data[name] = value
        self._write(data)

    def remove(self, name: str) -> bool:
        check_name(name)
        data = self._read()
        if data.pop(name, None) is None:
            return False
        self._write(data)
        return True

    def values_for(self, names: Iterable[str]) -> dict[str, str]:
        """name -> value for each name; an unknown one is one line naming it and `secrets set`."""
        data = self._read()
        out = {}
        for name in sorted(set(names)):
            if name not in data:
                raise SecretError(
                    f"secret {name!r} is not set on this controller: `app headless secrets set {name}` "
                    "(the value is read from stdin)"
                )
            out[name] = data[name]
        return out

    def masks_for_spec(self, env: Mapping[str, str], passed: Iterable[str] = ()) -> list[str]:
        """What to mask in the log of a job whose stored env is `env` (placeholders): the values
        its secrets have now, and the caller's values of the names it passes (`- NAME`); one unset
        since is simply not masked here (the runner masks too)."""
        data = self._read()
        mine = [os.environ[n] for n in passed if isinstance(n, str) and n in os.environ]
        return masked_values([*(data[n] for n in secret_refs(env) if n in data), *mine])
