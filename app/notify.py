"""Notice when a job ends: a desktop notification where the desktop offers one, and the
user's own command (`--notify-cmd`) for anything else (a chat hook, a sound, a phone).

`run --notify`, `attach --notify` and the TUI (`app --notify`) call `notify_job_end` (it
blocks for at most NOTIFY_WAIT_S: call it from a worker). What a job printed never reaches
a notification: the title and body are made of the run's name, workflow, state and exit
code, and the command gets them in environment variables (LANPOOL_RUN_NAME, LANPOOL_JOB_ID,
LANPOOL_WORKFLOW, LANPOOL_JOB_STATE, LANPOOL_EXIT_CODE), never in a string a shell parses:
the command line is split once, as the user wrote it (shlex), and run without a shell.

Desktops: Linux (and the BSDs) with `notify-send` while $DISPLAY or $WAYLAND_DISPLAY is
set; macOS with `osascript`, the texts passed as arguments of the script, never inside it.
Elsewhere (a server, ssh without X forwarding) nothing is shown and nothing is said.
"""

import logging
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lanpool.app.errors import UsageError

log = logging.getLogger(__name__)

NOTIFY_WAIT_S = 10.0  # a command that takes longer is left running, not waited for
_TEXT_CHARS = 120
# AppleScript that shows its two arguments: they are data there, never code.
_OSASCRIPT = "on run argv\ndisplay notification (item 2 of argv) with title (item 1 of argv)\nend run"


@dataclass(frozen=True)
class JobEnd:
    """What a notification says about a job that ended."""

    run_name: str
    job_id: str
    workflow: str
    state: str
    exit_code: int | None

    def title(self) -> str:
        return _plain(f"lanpool: {self.run_name} {self.state}")

    def body(self) -> str:
        code = "" if self.exit_code is None else f", exit {self.exit_code}"
        return _plain(f"{self.workflow} (job {self.job_id}){code}")

    def env(self) -> dict[str, str]:
        return {
            "LANPOOL_RUN_NAME": self.run_name,
            "LANPOOL_JOB_ID": self.job_id,
            "LANPOOL_WORKFLOW": self.workflow,
            "LANPOOL_JOB_STATE": self.state,
            "LANPOOL_EXIT_CODE": "" if self.exit_code is None else str(self.exit_code),
        }


def _plain(text: str) -> str:
    """One short line of printable text (names come from workflow files and the command line)."""
    text = "".join(c if c.isprintable() else " " for c in text)
    return text if len(text) <= _TEXT_CHARS else text[: _TEXT_CHARS - 3] + "..."


def notify_command(text: str) -> list[str]:
    """`--notify-cmd CMD` as the argv it runs, checked before the run starts (one line if not)."""
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"--notify-cmd {text[:60]!r}: {exc} (quote it as you would in a shell)") from None
    if not argv:
        raise UsageError("--notify-cmd needs a command, e.g. --notify-cmd 'notify-me --run'")
    if shutil.which(argv[0]) is None:
        raise UsageError(f"--notify-cmd: no program {argv[0][:60]!r} (not a file, nor on PATH)")
    return argv


def desktop_command(
    title: str,
    body: str,
    env: Mapping[str, str] | None = None,
    platform: str = sys.platform,
    which: Callable[[str], str | None] = shutil.which,
) -> list[str] | None:
    """The argv that shows a desktop notification here, or None where the desktop offers none."""
    env = os.environ if env is None else env
    if platform == "darwin":
        return ["osascript", "-e", _OSASCRIPT, title, body] if which("osascript") else None
    if (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")) and which("notify-send"):
        return ["notify-send", "--app-name=lanpool", title, body]
    return None


def notify_job_end(end: JobEnd, command: list[str] | None = None, desktop: bool = True) -> list[str]:
    """Show `end` on the desktop (if it offers notifications) and run `command` (from
    `notify_command`) with `end` in its environment. Returns what went wrong, a line each
    (a notification is a courtesy: it never fails the run)."""
    problems = []
    argvs: list[tuple[list[str], dict[str, str] | None]] = []
    shown = desktop_command(end.title(), end.body()) if desktop else None
    if shown:
        argvs.append((shown, None))
    if command:
        argvs.append((command, {**os.environ, **end.env()}))
    for argv, env in argvs:
        try:
            proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
        except OSError as exc:
            problems.append(f"notification not sent: {argv[0]}: {exc.strerror or exc}")
            continue
        try:
            _out, err = proc.communicate(timeout=NOTIFY_WAIT_S)
        except subprocess.TimeoutExpired:
            log.info("%s still runs after %g s: left running", argv[0], NOTIFY_WAIT_S)
            continue
        if proc.returncode:
            last = (err or b"").decode(errors="replace").strip().splitlines()[-1:] or [""]
            # The program's name, not its path: a long path would push the error out of the clipped line.
            name = os.path.basename(argv[0]) or argv[0]
            problems.append(_plain(f"notification command {name} exited {proc.returncode}: {last[0]}"))
    return problems
