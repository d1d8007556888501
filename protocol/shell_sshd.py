"""A job's shell through a one-time OpenSSH server: the request and the offer, on the exec channel.

Why: every keystroke on the SSH channel costs asyncssh's per-packet Python work on both sides
(~3x OpenSSH's echo on this class of machine: docs/bench/bench-shell.md), while an sshd the
runner starts for this one session, reached by the system's `ssh`, is OpenSSH end to end.

The exec request `lanpool-exec JOB_ID --sshd KEY [-- ARGV]` (KEY: `ssh-ed25519:BASE64`, a
key the controller made for this session only) asks for it on the lanpool SSH connection,
which is the only door: it is authorized, and the agent checks the job runs and logs the
session. The agent answers one line on the channel's stdout before anything else:
`lanpool-sshd PORT USER HOSTKEY_BASE64` (a one-time listener on the address the SSH connection
reached; the user to log in as; the ed25519 host key made for this session, which the
controller pins), or `lanpool-sshd -` when it cannot (no sshd, a container job, ...), and
then the controller opens the shell on the channel instead. The channel stays open for the
session and its exit status says whether the session ran (SSHD_RAN) or not (SSHD_UNUSED:
the controller falls back the same way); the command's own exit code is the `ssh` client's.

A dev offer (`lanpool-exec JOB_ID --dev-sshd KEY`, KEY the controller's own key: the one that
owns the job) is the same exchange for app/shell/ssh_hop.py, the ProxyCommand of an
`ssh-config` Host entry: its sshd keeps the runner's persistent dev host key (Hello.sshd_host_key,
so the entry's known_hosts line holds), runs every session (shell, exec, sftp, scp, rsync)
inside the job and forwards to the job's declared ports only (agent/shell/dev_sshd.py).
"""

import base64
import re

# Hello.features: this agent takes `--sshd KEY` in an exec request.
SHELL_SSHD = "shell-sshd"
SSHD_ENV = "LANPOOL_SSHD_SHELLS"  # 0: a runner offers no sshd, a controller asks for none
SSHD_FLAG = "--sshd"
# Hello.features: this agent takes `--dev-sshd KEY` and says its dev sshd's user and host key in Hello.
DEV_SSHD = "dev-sshd"
DEV_SSHD_FLAG = "--dev-sshd"
# Hello.features: its dev sshd takes container jobs too (a `docker exec` per session).
DEV_SSHD_CONTAINERS = "dev-sshd-containers"
# Hello.features: a dev offer's channel can be the connection itself. A controller that cannot
# reach the offer's port (a firewall before the runner's --direct-ports) writes RELAY_LINE first
# on the channel; then the channel carries ssh's bytes both ways, to an sshd the runner starts on
# a socket pair of its own (slower: asyncssh's work per packet on both sides, but it gets through).
DEV_SSHD_RELAY = "dev-sshd-relay"
RELAY_LINE = b"lanpool-sshd relay\n"
KEY_PREFIX = "ssh-ed25519:"
OFFER_PREFIX = b"lanpool-sshd "
NO_OFFER_LINE = b"lanpool-sshd -\n"
MAX_OFFER_LINE = 256
SSHD_RAN = 0
SSHD_UNUSED = 3  # the one-time sshd was offered, but no session ran in it

_ED25519_BLOB = 51  # string "ssh-ed25519" + string of 32 bytes
_B64 = rb"[A-Za-z0-9+/]{68}"
_USER = rb"[a-z_][a-z0-9_.-]{0,31}\$?"
_LINE = re.compile(rb"lanpool-sshd ([0-9]{1,5}) (" + _USER + rb") (" + _B64 + rb")\n")


def key_blob_b64(text: str) -> str | None:
    """The base64 of an ed25519 public key blob as in `ssh-ed25519 BASE64`, or None when `text`
    (`ssh-ed25519:BASE64` in a request, or a bare base64 in an offer) is anything else."""
    b64 = text.removeprefix(KEY_PREFIX)
    if not re.fullmatch(_B64.decode(), b64):
        return None
    try:
        blob = base64.b64decode(b64, validate=True)
    except ValueError:
        return None
    head = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20"
    return b64 if len(blob) == _ED25519_BLOB and blob.startswith(head) else None


def offer_line(port: int, user: str, host_key_b64: str) -> bytes:
    return b"%s%d %s %s\n" % (OFFER_PREFIX, port, user.encode(), host_key_b64.encode())


def parse_offer_line(line: bytes) -> tuple[int, str, str] | None:
    """(port, user, host key base64) from an offer line (with its newline), or None when it is not one."""
    match = _LINE.fullmatch(line)
    if match is None or not 1 <= int(match[1]) <= 65535:
        return None
    host_key = key_blob_b64(match[3].decode())
    return None if host_key is None else (int(match[1]), match[2].decode(), host_key)
