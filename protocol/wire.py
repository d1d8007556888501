"""Constants of the SSH transport both sides must agree on, and the one way a public key is compared."""

SUBSYSTEM = "lanpool"  # the SSH subsystem that carries lanpool's frames
# A detached gang's barrier (agent/gang/hub.py): members' agents to node 0's, with the gang's token only.
GANG_SUBSYSTEM = "lanpool-gang"
GANG_USER_PREFIX = "gang-"  # the SSH username of a gang member: gang-<gang id>, password = the gang token
DEFAULT_PORT = 7422
# The one grammar of an exec request into a job: `lanpool-exec JOB_ID [FLAGS] [-- ARGV]` (agent/shell/into_job.py).
EXEC_VERB = "lanpool-exec"
# aes128-gcm first: it streamed 2-2.4x faster than chacha20 (SSH's default) on the
# developers' 2-core machines, and made SFTP ~45% faster.
ENCRYPTION_ALGS = ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com", "aes128-ctr"]


def key_text(key: str) -> str:
    """An OpenSSH public key as "type base64": comments are not part of the key."""
    return " ".join(key.split()[:2])
