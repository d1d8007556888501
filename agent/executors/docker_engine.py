"""Calls into the Docker engine: the errors it raises, one line of explanation
for them, and blocking SDK calls run off the event loop in daemon threads."""

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import docker.errors
import requests.exceptions
from docker.models.containers import Container

log = logging.getLogger(__name__)

T = TypeVar("T")

# What a call into the engine raises when it, or the connection to it, fails.
ENGINE_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException, OSError)


def docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def in_thread(fn: Callable[..., T], *args: Any) -> "asyncio.Future[T]":
    """Run a blocking call in a daemon thread (never holds up the agent's exit)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            future.set_result(value) if ok else future.set_exception(value)

    def run() -> None:
        outcome: tuple[bool, Any]
        try:
            result = fn(*args)
        except BaseException as exc:  # all of them: handed to the awaiting coroutine
            outcome = (False, exc)
        else:
            outcome = (True, result)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, daemon=True, name=f"docker-{getattr(fn, '__name__', 'call')}").start()
    return future


def remove_quietly(container: Container) -> None:
    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        pass
    except ENGINE_ERRORS as exc:
        log.warning("cannot remove container %s: %s", container.id[:12], reason(exc))


def remove_when_done(future: "asyncio.Future[Container]") -> None:
    if not future.cancelled() and future.exception() is None:
        threading.Thread(target=remove_quietly, args=(future.result(),), daemon=True).start()


def reason(exc: BaseException) -> str:
    """One line: the engine's explanation when it gave one."""
    text = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return " ".join(str(text).split())
