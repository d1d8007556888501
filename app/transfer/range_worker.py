"""One range of one artifact file, pulled by a process of its own (see app/transfer/ranges.py).

Started by the controller with `python -m lanpool.app.transfer.range_worker`; reads what to pull
as one JSON object on stdin (nothing secret: the key is read from the controller's key
file, as the controller reads it), connects with that key and the host key the
controller's own connection verified, and writes one JSON line on stdout:
{"kind": "ok" | "refused" | "lost", "message": "..."}.
"""

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import asyncssh

from lanpool.app.errors import ArtifactsRefused, LanpoolError, RunnerProtocolError
from lanpool.app.runners.client import RunnerSession
from lanpool.app.transfer.pull import Writer
from lanpool.app.transfer.ranges import SLOT
from lanpool.protocol import ArtifactRange, Error
from lanpool.protocol.runtime import event_loop


async def pull_range(spec: dict[str, Any]) -> None:
    try:
        key = asyncssh.read_private_key(str(spec["key_path"]))
    except (OSError, asyncssh.KeyImportError) as exc:
        raise LanpoolError(f"cannot read the controller key {spec['key_path']}: {exc}") from None
    path, start, end, slot = str(spec["path"]), int(spec["start"]), int(spec["end"]), int(spec["slot"])
    done_fd = os.open(str(spec["done_file"]), os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)

    def progress(_path: str, at: int) -> None:  # after the bytes it counts were written
        os.pwrite(done_fd, SLOT.pack(at), slot * SLOT.size)

    pinned = str(spec["host_key"])
    if not pinned:  # never trust on first use here: the controller's connection verified this key
        raise LanpoolError("no pinned host key given")
    writer = Writer(
        Path(spec["staging"]), str(spec["prefix"]), {path: int(spec["size"])}, {path: (start, end)}, progress
    )
    try:
        async with await RunnerSession.open(str(spec["host"]), int(spec["port"]), key, pinned) as session:
            async for batch in session.get_artifacts(str(spec["job_id"]), [ArtifactRange(path, start, end - start)]):
                errors = [m for m in batch if isinstance(m, Error)]
                if errors:
                    raise ArtifactsRefused(f"{session.where}: {errors[0].message[:300]}")
                await asyncio.to_thread(writer.take, batch)
            writer.check_complete()
    finally:
        writer.close()
        os.close(done_fd)


def main() -> int:
    try:
        spec = json.loads(sys.stdin.read())
        event_loop.run(pull_range(spec))
        kind, message = "ok", ""
    except (ArtifactsRefused, RunnerProtocolError) as exc:
        kind, message = "refused", exc.message
    except LanpoolError as exc:
        kind, message = "lost", exc.message
    except OSError as exc:
        kind, message = "lost", f"artifact range: {exc.strerror or exc}"
    except (ValueError, KeyError, TypeError) as exc:
        kind, message = "lost", f"bad artifact range request: {exc}"
    sys.stdout.write(json.dumps({"kind": kind, "message": message}) + "\n")
    return 0 if kind == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
