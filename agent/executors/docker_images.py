"""A job's image on the engine: looked up, and pulled as its pull policy says
(never, missing, always), with the pull's progress as the job's log lines."""

import time
from collections.abc import Callable

import docker
import docker.errors

from lanpool.agent.executors.base import ExecutorError
from lanpool.agent.executors.docker_engine import ENGINE_ERRORS, reason

_PULL_PROGRESS_EVERY_S = 2.0


def ensure_image(client: docker.DockerClient, image: str, pull: str, say: Callable[[str], None]) -> None:
    if pull != "always":
        try:
            client.images.get(image)
            return
        except docker.errors.ImageNotFound:
            if pull == "never":
                raise ExecutorError(f"image {image!r} not found locally and the job's pull policy is 'never'") from None
        except ENGINE_ERRORS as exc:
            raise ExecutorError(f"cannot look up image {image!r}: {reason(exc)}") from None
    try:
        _pull(client, image, say)
    except ENGINE_ERRORS as exc:
        if pull == "always":
            raise ExecutorError(f"could not pull image {image!r} (pull: always): {reason(exc)}") from None
        raise ExecutorError(f"image {image!r} not found locally and could not be pulled: {reason(exc)}") from None


def _pull(client: docker.DockerClient, image: str, say: Callable[[str], None]) -> None:
    """Pull with progress as log lines: each layer's status changes, and its bytes every few seconds."""
    say(f"lanpool: pulling image {image}")
    seen: dict[str, tuple[str, float]] = {}
    for event in client.api.pull(image, stream=True, decode=True):
        if "error" in event:
            raise docker.errors.APIError(str(event["error"]))
        status, layer = event.get("status", ""), event.get("id", "")
        now = time.monotonic()
        last_status, last_time = seen.get(layer, ("", 0.0))
        if status == last_status and now - last_time < _PULL_PROGRESS_EVERY_S:
            continue
        seen[layer] = (status, now)
        detail = event.get("progressDetail") or {}
        progress = ""
        if detail.get("total"):
            progress = f" {detail.get('current', 0) / 1e6:.1f}/{detail['total'] / 1e6:.1f} MB"
        say(f"lanpool: pull: {layer + ': ' if layer else ''}{status}{progress}")
    say(f"lanpool: pulled image {image}")
