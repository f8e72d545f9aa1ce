"""kube2nats' event stream (every change) through a JetStream durable pull consumer."""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from typing import Any, Dict, List, Optional

import nats.errors
import nats.js.errors
from nats.js import api

from ._common import (
    BACKOFF_MIN,
    logger,
    DecodeError,
    Kube2natsError,
    error_event,
    jittered,
    next_delay,
    wait_connected,
)
from .keys import WILDCARD, subject_filter

__all__ = ["EventStream"]

_TYPES = {"added": "ADDED", "modified": "MODIFIED", "deleted": "DELETED"}


class EventStream:
    """Every change of one resource, from kube2nats' event stream, through a durable consumer.

    ::

        async with EventStream(nc, durable="billing", plural="pods") as stream:
            async for event in stream:           # {"type": "ADDED"|"MODIFIED"|"DELETED", "object": {...}}
                handle(event)                    # acknowledged once the loop asks for the next

    **Acknowledgement**: an event is acknowledged when the loop asks for the next one, or when
    the ``async with`` block exits without an exception (a ``break``). An event whose loop body
    raised is not acknowledged: leaving the ``async with`` block (or :meth:`close`) gives it
    back to JetStream at once (a negative acknowledgement), without it JetStream delivers it
    again after ``ack_wait``. Delivery is at least once; a restart resumes after the last
    acknowledged event.

    **Duplicates**: an event whose ``Nats-Msg-Id`` was already handled in this run (the last
    ``dedup_window`` ids) is acknowledged and not yielded again.

    The consumer is created when missing: ``durable`` on ``stream`` (``KUBE``), filter
    ``{prefix}.[{cluster}.]{group}.{version|*}.{plural}.{namespace|*}.*.*``, explicit acks,
    ``deliver="all"`` (from the stream's first event) or ``"new"`` (from now on). An existing
    durable is used as it is (its deliver policy kept), unless its filter differs: that is
    reported.

    **Errors** come out of the loop as ``{"type": "ERROR", "object": <a Status>, "error": exc}``
    events (no acknowledgement needed); the stream retries by itself, backing off 0.5 s doubling
    to 30 s. A value that is not JSON is reported so and terminated (not delivered again).
    """

    def __init__(
        self,
        nc: Any,
        durable: str,
        *,
        plural: str,
        group: str = "",
        version: str = WILDCARD,
        namespace: Optional[str] = None,
        stream: str = "KUBE",
        prefix: str = "kube",
        cluster: Optional[str] = None,
        deliver: str = "all",
        batch: int = 100,
        ack_wait: Optional[float] = None,
        dedup_window: int = 10_000,
    ) -> None:
        if deliver not in ("all", "new"):
            raise ValueError(f"deliver must be 'all' or 'new', not {deliver!r}")
        if not durable:
            raise ValueError("durable (the consumer's name) is required")
        self._nc = nc
        self._jsm = nc.jsm()
        self._js = nc.jetstream()
        self.durable = durable
        self.stream = stream
        self.filter = subject_filter(plural, group=group, version=version, namespace=namespace, prefix=prefix, cluster=cluster)
        self._deliver = api.DeliverPolicy.ALL if deliver == "all" else api.DeliverPolicy.NEW
        self._batch = batch
        self._ack_wait = ack_wait
        self._dedup_window = dedup_window
        self._seen: "OrderedDict[str, None]" = OrderedDict()
        self._sub: Any = None
        self._buffer: List[Any] = []
        self._last: Any = None
        self._delay = 0.0
        self._closed = False

    def __aiter__(self) -> "EventStream":
        return self

    async def __anext__(self) -> Dict[str, Any]:
        try:
            await self._ack_last()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the event comes again: reported, not raised
            return error_event(exc)
        while True:
            if self._closed:
                raise StopAsyncIteration
            try:
                if self._buffer:
                    event = await self._event(self._buffer.pop(0))
                    if event is not None:
                        return event
                    continue
                if self._delay:
                    await asyncio.sleep(jittered(self._delay))
                await wait_connected(self._nc)
                if self._sub is None:
                    self._sub = await self._bind()
                try:
                    self._buffer = await self._sub.fetch(self._batch, timeout=5)
                except asyncio.TimeoutError:  # nats-py raises nats' or asyncio's
                    continue  # no event in 5 s: ask again
                self._delay = 0.0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reported as an ERROR event, then retried
                if not self._nc.is_closed and not self._nc.is_connected:
                    continue  # the connection's outage, not the consumer's: wait for it
                self._delay = next_delay(self._delay) if self._delay else BACKOFF_MIN
                # Bound again next time (the consumer is created again if it went away).
                await self._unbind()
                return error_event(exc)

    async def _unbind(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None and not self._nc.is_closed:
            try:
                await sub.unsubscribe()
            except Exception as exc:  # noqa: BLE001 - a subscription of a failed consumer
                logger.debug("unsubscribing from a failed consumer: %r", exc)

    async def _bind(self) -> Any:
        try:
            info = await self._jsm.consumer_info(self.stream, self.durable)
        except nats.js.errors.NotFoundError:
            config = api.ConsumerConfig(
                durable_name=self.durable,
                filter_subject=self.filter,
                ack_policy=api.AckPolicy.EXPLICIT,
                deliver_policy=self._deliver,
                ack_wait=self._ack_wait,
            )
            info = await self._jsm.add_consumer(self.stream, config=config)
        have = info.config.filter_subject
        if have != self.filter:
            raise Kube2natsError(
                f"the durable consumer {self.durable} of {self.stream} filters {have!r}, not {self.filter!r}"
            )
        return await self._js.pull_subscribe_bind(self.durable, stream=self.stream)

    async def _event(self, msg: Any) -> Optional[Dict[str, Any]]:
        headers = msg.headers or {}
        msg_id = headers.get("Nats-Msg-Id")
        if msg_id is not None and msg_id in self._seen:
            await msg.ack()
            return None
        try:
            payload = json.loads(msg.data)
            if not isinstance(payload, dict):
                raise ValueError(f"a JSON {type(payload).__name__}, not an object")
        except ValueError as exc:
            await msg.term()
            err = DecodeError(f"the event on {msg.subject} is not a JSON object: {exc}", msg.subject)
            err.__cause__ = exc
            return error_event(err)
        obj = payload
        kind = headers.get("Kube-Event-Type")
        if "object" in payload and "type" in payload and isinstance(payload["object"], dict):
            obj = payload["object"]
            kind = kind or payload["type"]
        if not kind:
            kind = _TYPES.get(msg.subject.rpartition(".")[2], "")
        self._last = (msg, msg_id)
        return {"type": kind, "object": obj}

    async def _ack_last(self) -> None:
        last, self._last = self._last, None
        if last is None:
            return
        msg, msg_id = last
        await msg.ack()
        if msg_id is not None:
            self._seen[msg_id] = None
            if len(self._seen) > self._dedup_window:
                self._seen.popitem(last=False)

    async def close(self) -> None:
        """Stops reading. The event last yielded, if not acknowledged (its loop body raised),
        and the events fetched but not yet yielded go back to JetStream at once (a negative
        acknowledgement), to be delivered again in order; the durable consumer stays.
        Acknowledgements are flushed."""
        self._closed = True
        unread, self._buffer = self._buffer, []
        last, self._last = self._last, None
        if last is not None:
            unread.insert(0, last[0])
        if self._nc.is_connected:
            for msg in unread:
                await msg.nak()
            await self._nc.flush()
        await self._unbind()

    async def __aenter__(self) -> "EventStream":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            await self._ack_last()
        await self.close()
