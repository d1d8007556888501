"""The transfer messages: code up as content-addressed blobs, artifacts down as streamed files.

Controller -> agent: HaveBlobs, PutBlob, GetArtifacts; agent -> controller: MissingBlobs,
BlobStored, ArtifactData, ArtifactEnd, ArtifactsSent. FileEntry (part of SubmitJob) and
ArtifactRange (part of GetArtifacts) are their records. Registered in protocol/messages.py.
"""

from dataclasses import field
from pathlib import PurePosixPath
from typing import ClassVar

from lanpool.protocol.message_base import Message, record

# A container job's absolute artifact `/opt/x` comes back as one file, the tar of it, named
# `.lanpool-abs/opt/x.tar` in its workspace and its artifact list (agent/workspace/abs_artifacts.py).
ABS_ARTIFACTS_DIR = ".lanpool-abs"
ABS_ARTIFACT_SUFFIX = ".tar"


CONTAINER_WORKSPACE = "/workspace"  # where a container job sees its workspace (agent/executors/docker.py)


def abs_artifact_problem(path: str) -> str | None:
    """Why the absolute artifact path `path` may not be one, or None if it may: the one rule the
    controller (when it reads a workflow) and the runner (when it takes a job) both apply."""
    pure = PurePosixPath(path)
    if "\0" in path or "\\" in path:
        return f"artifact path {path[:200]!r} holds a NUL or a backslash"
    if ".." in pure.parts or "//" in path or str(pure) != path.rstrip("/") or len(pure.parts) < 2:
        return f"absolute artifact path {path[:200]!r} must be a normalised path below / (no '..', '.' or '//')"
    if pure.is_relative_to(CONTAINER_WORKSPACE):
        rel = pure.relative_to(CONTAINER_WORKSPACE).as_posix()
        return f"artifact path {path!r} is in the workspace: write it relative ({rel!r})"
    return None


def abs_artifact_name(path: str) -> str:
    """The workspace-relative name the absolute artifact `path` comes back under."""
    return f"{ABS_ARTIFACTS_DIR}/{PurePosixPath(path).relative_to('/').as_posix()}{ABS_ARTIFACT_SUFFIX}"


# Hello.features: this agent answers GetArtifacts(direct=True) with a DirectOffer (see DirectOffer).
ARTIFACT_DIRECT = "artifact-direct"
# Bytes of DirectOffer.token: what the controller sends first on the offered connection.
DIRECT_TOKEN_BYTES = 32


@record
class FileEntry(Message):
    """One entry of a job's workspace as the controller sends it, by content.

    A regular file names the blob holding its bytes (`sha256`, `size`), which the
    runner has in its blob cache or was sent with PutBlob; a symlink has `link`
    (its target) and no blob. Only the permission bits of `mode` & 0o755 apply.
    """

    path: str
    sha256: str = ""
    size: int = 0
    mode: int = 0o644
    link: str = ""


@record
class ArtifactRange(Message):
    """Part of GetArtifacts: send `path` from byte `offset` (a resumed pull) to its end.
    (Older controllers also sent `length`, only to agents that named "artifact-ranges" in
    Hello.features; unknown fields are ignored.)"""

    path: str
    offset: int = 0


# -- controller -> agent ----------------------------------------------------


@record
class HaveBlobs(Message):
    """Which of these blobs does the runner lack? Replied with MissingBlobs."""

    TAG: ClassVar[str] = "have_blobs"
    sha256s: list[str]


@record
class PutBlob(Message):
    """Part of a blob: `data` at `offset` of a blob of `size` bytes in all. Parts come
    in order; the one that completes it is answered with BlobStored (or an Error)."""

    TAG: ClassVar[str] = "put_blob"
    sha256: str
    offset: int
    size: int
    data: bytes


@record
class GetArtifacts(Message):
    """Stream a finished job's artifact files: ArtifactData parts and an ArtifactEnd
    per file, then ArtifactsSent. No `files`: all of them, from the start."""

    TAG: ClassVar[str] = "get_artifacts"
    job_id: str
    files: list[ArtifactRange] = field(default_factory=list)
    # Ask for the same stream on a connection of its own (a DirectOffer in reply). A runner
    # that cannot offer one (an older one, or at its limit) streams on this channel instead.
    direct: bool = False


# -- agent -> controller ----------------------------------------------------


@record
class MissingBlobs(Message):
    """Reply to HaveBlobs: the ones this runner lacks (send them with PutBlob)."""

    TAG: ClassVar[str] = "missing_blobs"
    sha256s: list[str]


@record
class BlobStored(Message):
    """A blob arrived whole and its content matched `sha256`; reply to its last PutBlob."""

    TAG: ClassVar[str] = "blob_stored"
    sha256: str


@record
class ArtifactData(Message):
    """Bytes of one artifact file from `offset`, in reply to GetArtifacts."""

    TAG: ClassVar[str] = "artifact_data"
    job_id: str
    path: str
    offset: int
    data: bytes


@record
class ArtifactEnd(Message):
    """One artifact file sent whole: `size` bytes in all (from offset 0)."""

    TAG: ClassVar[str] = "artifact_end"
    job_id: str
    path: str
    size: int


@record
class DirectOffer(Message):
    """Reply to GetArtifacts(direct=True): the runner listens once on `port` (the address
    this SSH connection reached) for a TLS connection whose certificate's SHA-256 is
    `cert_sha256`; the controller checks that, then sends `token`; the runner then writes
    the very frames it would have streamed on this channel (ArtifactData, ArtifactEnd,
    Error, ArtifactsSent) and closes. Both secrets travel only inside the SSH connection,
    which is authenticated both ways: a LAN peer that connects first gets nothing, and
    nobody else's certificate is sent the token."""

    TAG: ClassVar[str] = "direct_offer"
    job_id: str
    port: int
    cert_sha256: str
    token: bytes


@record
class ArtifactsSent(Message):
    """Every file a GetArtifacts asked for was sent (or refused with an Error)."""

    TAG: ClassVar[str] = "artifacts_sent"
    job_id: str
