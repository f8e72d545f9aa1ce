"""kube2nats' subscriber kit for Python: an informer over the object mirror (a NATS KV bucket)
and the event stream through a durable consumer, on asyncio and nats-py."""

from ._common import DecodeError, HandlerError, Kube2natsError, WatchError
from .informer import DEFAULT_BUCKET, EventIterator, Informer
from .keys import (
    WILDCARD,
    escape_key_token,
    escape_subject_token,
    event_subject,
    key_filter,
    object_key,
    parse_key,
    subject_filter,
    unescape_key_token,
)
from .selector import parse_selector
from .stream import EventStream

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_BUCKET",
    "DecodeError",
    "EventIterator",
    "EventStream",
    "HandlerError",
    "Informer",
    "Kube2natsError",
    "WILDCARD",
    "WatchError",
    "escape_key_token",
    "escape_subject_token",
    "event_subject",
    "key_filter",
    "object_key",
    "parse_key",
    "parse_selector",
    "subject_filter",
    "unescape_key_token",
]
