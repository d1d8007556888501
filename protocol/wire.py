"""Constants of the SSH transport both sides must agree on, the exec request's grammar, and the one way
a public key is compared."""

import shlex
from collections.abc import Sequence

from lanpool.protocol.shell_sshd import DEV_SSHD_FLAG, SSHD_FLAG

SUBSYSTEM = "lanpool"  # the SSH subsystem that carries lanpool's frames
# A detached gang's barrier (agent/gang/hub.py): members' agents to node 0's, with the gang's token only.
GANG_SUBSYSTEM = "lanpool-gang"
GANG_USER_PREFIX = "gang-"  # the SSH username of a gang member: gang-<gang id>, password = the gang token
DEFAULT_PORT = 7422
# The one grammar of an exec request into a job: `lanpool-exec JOB_ID [FLAGS] [-- ARGV]` (agent/shell/into_job.py).
EXEC_VERB = "lanpool-exec"
# FLAGS: `--node K` names node K of a job its runner runs on several nodes (a Slurm allocation);
# `--sshd KEY` asks for a one-time sshd (protocol/shell_sshd.py).
NODE_FLAG = "--node"
MAX_EXEC_NODE = 4096
# aes128-gcm first: it streamed 2-2.4x faster than chacha20 (SSH's default) on the
# developers' 2-core machines, and made SFTP ~45% faster.
ENCRYPTION_ALGS = ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com", "aes128-ctr"]


def exec_command(
    job_id: str, argv: Sequence[str], node: int | None = None, sshd_key: str = "", dev_sshd_key: str = ""
) -> str:
    """The exec request for `argv` (none: a shell) in job `job_id`, on its node `node` where its
    runner runs every node (None: the runner's own part), through a one-time sshd for `sshd_key`
    (`ssh-ed25519:BASE64`) when given, or the job's dev sshd for `dev_sshd_key` (the controller's
    own key, same form: protocol/shell_sshd.py)."""
    flags = [
        *([NODE_FLAG, str(node)] if node is not None else []),
        *([SSHD_FLAG, sshd_key] if sshd_key else []),
        *([DEV_SSHD_FLAG, dev_sshd_key] if dev_sshd_key else []),
    ]
    return shlex.join([EXEC_VERB, job_id, *flags, *(["--", *argv] if argv else [])])


def key_text(key: str) -> str:
    """An OpenSSH public key as "type base64": comments are not part of the key."""
    return " ".join(key.split()[:2])
