"""The unit tier's rule, enforced: a test here runs in-process. It opens no network socket
and starts no process but bash, sh or git (the shells and snapshots some units check);
anything more belongs in tests/integration (tests/README.md)."""

import os
import socket
import subprocess

import pytest

ALLOWED_PROGRAMS = {"bash", "sh", "git"}


class NotAUnitTest(AssertionError):
    pass


@pytest.fixture(autouse=True)
def _in_process_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(what: str) -> None:
        raise NotAUnitTest(f"a unit test {what}: move it to tests/integration (tests/README.md)")

    for name in ("connect", "connect_ex", "bind"):
        original = getattr(socket.socket, name)

        def guarded(self: socket.socket, address: object, _original=original, _name=name) -> object:
            if self.family in (socket.AF_INET, socket.AF_INET6):
                refuse(f"calls socket.{_name}({address!r})")
            return _original(self, address)

        monkeypatch.setattr(socket.socket, name, guarded)
    execute = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def child(self: subprocess.Popen, args: object, *rest: object, **kw: object) -> object:
        argv0 = args[0] if isinstance(args, (list, tuple)) else str(args).split()[0]
        if os.path.basename(str(argv0)) not in ALLOWED_PROGRAMS:
            refuse(f"starts {argv0!r}")
        return execute(self, args, *rest, **kw)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", child)
