"""What the informer and the event stream share: errors, error events, retries."""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from typing import Any, Callable, Dict

import nats.errors

logger = logging.getLogger("kube2nats")

#: The first pause after a failed (re)start of a watch or consumer; it doubles up to
#: :data:`BACKOFF_MAX`.
BACKOFF_MIN = 0.5
BACKOFF_MAX = 30.0


class Kube2natsError(Exception):
    """The base of the errors this package reports."""


class WatchError(Kube2natsError):
    """The watch of the bucket (or the event stream's consumer) failed: a message missing in the
    sequence, heartbeats missed, no initial value in time, an error status from the server. The
    informer starts a fresh watch after it."""


class DecodeError(Kube2natsError):
    """A value that is not a JSON object (or that the ``model`` hook refused). The entry is
    skipped; ``key`` is the mirror key (informer) or the subject (event stream)."""

    def __init__(self, message: str, key: str):
        super().__init__(message)
        self.key = key


class HandlerError(Kube2natsError):
    """An event handler raised; ``__cause__`` is its exception. The informer goes on with the
    next handler and event."""

    def __init__(self, message: str, event_type: str, handler: Any):
        super().__init__(message)
        self.event_type = event_type
        self.handler = handler


def error_event(exc: BaseException) -> Dict[str, Any]:
    """An ``ERROR`` watch event as the Kubernetes API server sends one (the object a ``Status``),
    with the exception itself under ``"error"``."""
    return {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": str(exc) or type(exc).__name__,
            "reason": type(exc).__name__,
        },
        "error": exc,
    }


async def call(fn: Callable[..., Any], *args: Any) -> None:
    """Calls ``fn``, awaiting its result when it is awaitable (sync or async handlers)."""
    result = fn(*args)
    if inspect.isawaitable(result):
        await result


async def wait_connected(nc: Any) -> None:
    """Returns once the client is connected; raises if it is closed for good. A client that is
    reconnecting is waited for, not reported: its own callbacks tell about it."""
    while not nc.is_connected:
        if nc.is_closed:
            raise nats.errors.ConnectionClosedError
        await asyncio.sleep(0.05)


def next_delay(delay: float) -> float:
    """The pause after ``delay``: doubled, capped at :data:`BACKOFF_MAX`."""
    return min(delay * 2, BACKOFF_MAX)


def jittered(delay: float) -> float:
    return delay * random.uniform(0.8, 1.2)
