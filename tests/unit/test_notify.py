"""app/notify.py: which desktop notification a machine offers, and what a notification may say."""

import pytest

from lanpool.app.errors import UsageError
from lanpool.app.notify import JobEnd, desktop_command, notify_command, notify_job_end


def _which(*found: str):
    return lambda name: f"/usr/bin/{name}" if name in found else None


def test_the_desktop_decides():
    linux = dict(platform="linux", which=_which("notify-send"))
    assert desktop_command("t", "b", env={"DISPLAY": ":0"}, **linux) == ["notify-send", "--app-name=lanpool", "t", "b"]
    assert desktop_command("t", "b", env={"WAYLAND_DISPLAY": "wayland-0"}, **linux) is not None
    assert desktop_command("t", "b", env={}, **linux) is None  # a server, ssh without X: nothing
    assert desktop_command("t", "b", env={"DISPLAY": ":0"}, platform="linux", which=_which()) is None
    mac = desktop_command('a" & do shell script "rm', "b", env={}, platform="darwin", which=_which("osascript"))
    assert mac is not None and mac[-2:] == ['a" & do shell script "rm', "b"]  # arguments, never script text
    assert "do shell" not in mac[2]


def test_a_notification_says_one_printable_line_and_the_env_holds_the_rest():
    end = JobEnd("run\x1b]52;c;AAAA\x07-1", "abc123", "train\nx", "FAILED", 3)
    assert "\x1b" not in end.title() and "\x07" not in end.title() and "\n" not in end.body()
    assert end.body().endswith(", exit 3")
    assert (
        end.env()["LANPOOL_EXIT_CODE"] == "3" and JobEnd("r", "j", "w", "LOST", None).env()["LANPOOL_EXIT_CODE"] == ""
    )
    assert len(JobEnd("r" * 500, "j", "w", "DONE", 0).title()) <= 120


def test_the_command_is_split_once_and_checked(tmp_path):
    assert notify_command("sh -c 'echo $LANPOOL_RUN_NAME'") == ["sh", "-c", "echo $LANPOOL_RUN_NAME"]
    for bad, says in [("", "needs a command"), ("'open", "No closing quotation"), ("no-such-thing-x", "no program")]:
        with pytest.raises(UsageError, match=says):
            notify_command(bad)


def test_a_failing_command_is_a_line_never_an_exception(tmp_path, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    out = tmp_path / "env"
    ok = notify_job_end(JobEnd("r", "j", "w", "DONE", 0), ["sh", "-c", f'echo "$LANPOOL_JOB_STATE" > {out}'])
    assert ok == [] and out.read_text() == "DONE\n"
    failed = notify_job_end(JobEnd("r", "j", "w", "DONE", 0), ["sh", "-c", "echo nope >&2; exit 7"])
    assert failed == ["notification command sh exited 7: nope"]
