"""An informer over kube2nats' object mirror (a NATS JetStream KV bucket), on asyncio.

The watch is the one a KV client makes, written out on the raw messages (the headers decide what
a deletion is, and the consumer's ``num_pending`` at creation says when the initial values are
in, even for an empty bucket): an ordered push consumer on ``KV_{bucket}`` delivering the last
message of each key, then every new one, with flow control and idle heartbeats.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union

import nats.errors
from nats.js import api

from ._common import (
    BACKOFF_MIN,
    DecodeError,
    HandlerError,
    Kube2natsError,
    WatchError,
    call,
    error_event,
    jittered,
    logger,
    next_delay,
    wait_connected,
)
from .keys import WILDCARD, key_filter, parse_key
from .selector import parse_selector

__all__ = ["Informer", "EventIterator", "DEFAULT_BUCKET"]

DEFAULT_BUCKET = "kube-objects"

# A cached object: (namespace, name, resourceVersion, object, labels). Namespace "" for a
# cluster-scoped object; labels are the object's metadata.labels (None when it has none), kept
# apart so that label selectors work whatever the model hook makes of the object.
_Entry = Tuple[str, str, str, Any, Optional[Mapping[str, str]]]

# How often a wait for the next message looks at the connection (reconnects, disconnections).
_POLL = 0.25
# How many initial values are decoded together.
_BATCH = 1000


class _Reconnected(Exception):
    """The client reconnected: the watch starts afresh (not an error)."""


class _State:
    """Objects by mirror key, and the index (namespace, name) -> current key.

    When a resource's version moves, kube2nats puts each object under the new version's key,
    then deletes the old key: the object's current key is the one last put, and a deletion of a
    key that is not current removes that key only."""

    __slots__ = ("by_key", "index")

    def __init__(self) -> None:
        self.by_key: Dict[str, _Entry] = {}
        self.index: Dict[Tuple[str, str], str] = {}

    def put(self, key: str, entry: _Entry) -> Tuple[Optional[str], Optional[_Entry]]:
        """Stores ``entry``; returns the change (``"ADDED"``, ``"MODIFIED"`` or ``None``) and the
        object it replaces in the store by (namespace, name)."""
        ident = (entry[0], entry[1])
        previous = self.by_key.get(key)
        self.by_key[key] = entry
        current = self.index.get(ident)
        if current is None:
            self.index[ident] = key
            return "ADDED", None
        if current == key:
            # A repair re-writing the same version is no change.
            if previous is not None and previous[2] == entry[2]:
                return None, previous
            return "MODIFIED", previous
        # Put under another version's key: the object moved (its apiVersion changed).
        self.index[ident] = key
        return "MODIFIED", self.by_key[current]

    def delete(self, key: str) -> Optional[_Entry]:
        """Removes ``key``; returns the object deleted from the store, if it was current."""
        entry = self.by_key.pop(key, None)
        if entry is None:
            return None
        ident = (entry[0], entry[1])
        if self.index.get(ident) == key:
            del self.index[ident]
            return entry
        return None

    def visible(self) -> Iterator[_Entry]:
        by_key = self.by_key
        for key in self.index.values():
            yield by_key[key]


class _Handler:
    __slots__ = ("on_add", "on_update", "on_delete", "source")

    def __init__(self, on_add: Any, on_update: Any, on_delete: Any, source: Any) -> None:
        self.on_add = on_add
        self.on_update = on_update
        self.on_delete = on_delete
        self.source = source


class EventIterator:
    """``async for event in informer.events()``: the informer's changes as watch events
    ``{"type": "ADDED"|"MODIFIED"|"DELETED", "object": obj}`` (and ``{"type": "ERROR", ...}``
    for errors), starting with an ``ADDED`` for every object the store holds. It ends when the
    informer stops or :meth:`aclose` is called; an iterator no longer referenced stops
    receiving events."""

    _END = object()

    def __init__(self) -> None:
        self._queue: asyncio.Queue = asyncio.Queue()
        self._closed = False

    def _put(self, event: Any) -> None:
        if not self._closed:
            self._queue.put_nowait(event)

    def __aiter__(self) -> "EventIterator":
        return self

    async def __anext__(self) -> Dict[str, Any]:
        if self._closed and self._queue.empty():
            raise StopAsyncIteration
        event = await self._queue.get()
        if event is EventIterator._END:
            self._closed = True
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        """Stops receiving events; those already queued are dropped."""
        self._closed = True
        while not self._queue.empty():
            self._queue.get_nowait()
        self._queue.put_nowait(EventIterator._END)

    def _end(self) -> None:
        if not self._closed:
            self._queue.put_nowait(EventIterator._END)


class _Watch:
    """One ordered push consumer on the bucket's stream and its subscription."""

    def __init__(self, informer: "Informer") -> None:
        self._inf = informer
        self._nc = informer._nc
        self._queue: asyncio.Queue = asyncio.Queue()
        self._sub: Any = None
        self._dseq = 0
        self._reconnects = informer._nc.stats["reconnects"]

    async def open(self) -> int:
        """Subscribes, then creates the consumer; the number of initial values."""
        inf = self._inf
        inbox = self._nc.new_inbox()
        queue = self._queue

        async def deliver(msg: Any) -> None:
            queue.put_nowait(msg)

        self._sub = await self._nc.subscribe(inbox, cb=deliver)
        config = api.ConsumerConfig(
            deliver_subject=inbox,
            filter_subject=inf._subject_filter,
            deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
            ack_policy=api.AckPolicy.NONE,
            max_deliver=1,
            flow_control=True,
            idle_heartbeat=inf._heartbeat,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=30.0,
        )
        info = await inf._jsm.add_consumer(inf._stream, config=config)
        return int(info.num_pending or 0)

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None and not self._nc.is_closed:
            try:
                await sub.unsubscribe()
            except nats.errors.ConnectionClosedError:
                pass
            # Any other failure to unsubscribe is the connection's: its consumer goes away
            # by itself once idle (inactive_threshold), so it is logged, not raised.
            except Exception as exc:  # noqa: BLE001
                logger.debug("unsubscribing a finished watch: %r", exc)

    async def receive(self, limit: float, data_resets: bool) -> Tuple[Any, int]:
        """The next message of the bucket and the consumer's pending count after it. Answers
        flow control and checks heartbeats on the way. Raises :class:`_Reconnected` after a
        reconnect, :class:`WatchError` when ``limit`` seconds pass connected without a message
        (any message, or a data message only when ``data_resets``)."""
        loop = asyncio.get_running_loop()
        queue = self._queue
        since = loop.time()
        nc = self._nc
        while True:
            if nc.stats["reconnects"] != self._reconnects:
                raise _Reconnected()
            if queue.empty():
                try:
                    msg = await asyncio.wait_for(queue.get(), _POLL)
                except asyncio.TimeoutError:
                    now = loop.time()
                    if nc.is_closed:
                        raise nats.errors.ConnectionClosedError
                    if not nc.is_connected:
                        since = now  # time away is not the consumer's silence
                    elif now - since > limit:
                        what = "initial value" if data_resets else "message or heartbeat"
                        raise WatchError(f"no {what} from the bucket's watch within {limit:g}s")
                    continue
            else:
                msg = queue.get_nowait()
            if nc.stats["reconnects"] != self._reconnects:
                # A message of the consumer from before the reconnect: the fresh watch reads
                # the state anew, this one included.
                raise _Reconnected()
            reply = msg.reply
            if reply and reply.startswith("$JS.ACK."):
                tokens = reply.split(".")
                if len(tokens) == 9:
                    dseq, pending = int(tokens[6]), int(tokens[8])
                else:  # $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>...
                    dseq, pending = int(tokens[8]), int(tokens[10])
                if dseq != self._dseq + 1:
                    raise WatchError(f"the watch skipped from message {self._dseq} to {dseq}")
                self._dseq = dseq
                return msg, pending
            await self._control(msg)
            if not data_resets:
                since = loop.time()

    async def _control(self, msg: Any) -> None:
        headers = msg.headers or {}
        status = headers.get("Status")
        if status == "100":
            if msg.reply:  # flow control request: every message before it is handled
                await self._nc.publish(msg.reply, b"")
                return
            stalled = headers.get("Nats-Consumer-Stalled")
            if stalled:
                await self._nc.publish(stalled, b"")
            last = headers.get("Nats-Last-Consumer")
            if last is not None and int(last) != self._dseq:
                raise WatchError(
                    f"the watch's heartbeat says {last} messages were sent, {self._dseq} arrived"
                )
        elif status is not None:
            description = headers.get("Description", "")
            raise WatchError(f"the watch's consumer reported {status} {description}".rstrip())


class Informer:
    """A cache of one resource's objects read from kube2nats' mirror, with event handlers.

    ::

        informer = Informer(nc, plural="pods")            # core group, any version, all namespaces

        @informer.on_add
        def added(pod): ...

        async with informer:
            await informer.synced()
            pod = informer.get("shop", "web-0")

    ``nc`` is a connected ``nats.aio.client.Client``. Config: ``plural`` (the resource),
    ``group`` (``""``: the core group), ``version`` (``"*"``: any version, following a CRD's
    preferred version), ``namespace`` (``None``: all), ``bucket`` and ``cluster``
    (kube2nats' ``mirror.bucket`` and ``publish.cluster``). ``model``: a callable applied to
    each object (a dict, the JSON as kube2nats wrote it) before it is stored and handed out,
    e.g. ``kubernetes.client.V1Pod.from_dict``.

    Handlers are called one at a time, in order, on the informer's task: ``on_add(obj)``,
    ``on_update(old, new)``, ``on_delete(obj)`` (the last object the store held), sync or
    async. Errors (a watch that failed, a value that is not JSON, a handler that raised) go to
    the ``on_error`` handlers and to the :meth:`events` iterators as ``ERROR`` events, or to the
    ``kube2nats`` logger when there is neither; the informer goes on by itself (a fresh watch
    after a failure or a reconnect, backing off 0.5 s doubling to 30 s while it cannot start
    one) until :meth:`stop`.
    """

    def __init__(
        self,
        nc: Any,
        *,
        plural: str,
        group: str = "",
        version: str = WILDCARD,
        namespace: Optional[str] = None,
        bucket: str = DEFAULT_BUCKET,
        cluster: Optional[str] = None,
        model: Optional[Callable[[Dict[str, Any]], Any]] = None,
        heartbeat: float = 5.0,
        initial_timeout: float = 5.0,
    ) -> None:
        if not plural:
            raise ValueError("plural (the resource, e.g. 'pods') is required")
        self._nc = nc
        self._jsm = nc.jsm()
        self.bucket = bucket
        self.key_filter = key_filter(plural, group=group, version=version, namespace=namespace, cluster=cluster)
        self._stream = f"KV_{bucket}"
        self._prefix = f"$KV.{bucket}."
        self._subject_filter = self._prefix + self.key_filter
        self._model = model
        self._heartbeat = heartbeat
        self._initial_timeout = initial_timeout
        self._state = _State()
        self._handlers: List[_Handler] = []
        self._error_handlers: List[Callable[[BaseException], Any]] = []
        self._synced_handlers: List[Callable[[], Any]] = []
        self._iterators: "weakref.WeakSet[EventIterator]" = weakref.WeakSet()
        self._lock = asyncio.Lock()
        self._synced = asyncio.Event()
        self._task: Optional[asyncio.Task] = None
        self._side_tasks: "set[asyncio.Task]" = set()
        self._stopped = False

    # --- the store -------------------------------------------------------------------------

    def get(self, namespace: Optional[str], name: str) -> Any:
        """The object ``namespace/name`` (``None`` or ``""`` for a cluster-scoped one), or
        ``None``."""
        key = self._state.index.get((namespace or "", name))
        return None if key is None else self._state.by_key[key][3]

    def list(
        self,
        namespace: Optional[str] = None,
        label_selector: Union[str, Mapping[str, str], None] = None,
    ) -> List[Any]:
        """The objects, of one namespace or all (``None``), that match ``label_selector``
        (``"app=web,tier!=db,env in (a,b),!legacy"``, or a mapping of equalities)."""
        matches = parse_selector(label_selector)
        return [
            entry[3]
            for entry in self._state.visible()
            if (namespace is None or entry[0] == namespace) and matches(entry[4])
        ]

    def keys(self) -> List[str]:
        """``namespace/name`` of every object (``name`` alone when cluster-scoped), as
        client-go's ``ListKeys``."""
        return [f"{ns}/{name}" if ns else name for ns, name in self._state.index]

    def __len__(self) -> int:
        return len(self._state.index)

    @property
    def has_synced(self) -> bool:
        """Whether the initial values are in the store and the handlers have seen them."""
        return self._synced.is_set()

    # --- handlers --------------------------------------------------------------------------

    def add_event_handler(
        self,
        handler: Any = None,
        *,
        on_add: Optional[Callable[[Any], Any]] = None,
        on_update: Optional[Callable[[Any, Any], Any]] = None,
        on_delete: Optional[Callable[[Any], Any]] = None,
    ) -> Any:
        """Registers a handler: an object with any of the methods ``on_add``, ``on_update``,
        ``on_delete`` (client-go's ResourceEventHandler), or the callables as keywords.
        Registered once the informer runs, it is first given an ``on_add`` for every object the
        store holds, as client-go does. Returns a registration for
        :meth:`remove_event_handler`."""
        reg = _Handler(
            on_add or getattr(handler, "on_add", None),
            on_update or getattr(handler, "on_update", None),
            on_delete or getattr(handler, "on_delete", None),
            handler,
        )
        if self._task is None or self._task.done():
            self._handlers.append(reg)
        else:
            self._spawn(self._replay(reg))
        return reg

    def remove_event_handler(self, registration: Any) -> None:
        self._handlers = [h for h in self._handlers if h is not registration]

    def on_add(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Decorator: ``fn(obj)`` for each object added."""
        self.add_event_handler(on_add=fn)
        return fn

    def on_update(self, fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        """Decorator: ``fn(old, new)`` for each object changed."""
        self.add_event_handler(on_update=fn)
        return fn

    def on_delete(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Decorator: ``fn(obj)`` for each object deleted (the last state the store held)."""
        self.add_event_handler(on_delete=fn)
        return fn

    def on_error(self, fn: Callable[[BaseException], Any]) -> Callable[[BaseException], Any]:
        """Decorator: ``fn(exc)`` for each error (:class:`WatchError`, :class:`DecodeError`,
        :class:`HandlerError`, a ``nats`` error while starting a watch)."""
        self._error_handlers.append(fn)
        return fn

    def on_synced(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """Decorator: ``fn()`` once, on the informer's task, when the initial values are in and
        the handlers have seen them, before any later change is handled (where a line printed
        after :meth:`synced` returns may come after the first changes)."""
        self._synced_handlers.append(fn)
        return fn

    def events(self) -> EventIterator:
        """An iterator of watch events ``{"type", "object"}``: first ``ADDED`` for each object
        held, then every change; ``ERROR`` events for errors."""
        it = EventIterator()
        for entry in self._state.visible():
            it._put({"type": "ADDED", "object": entry[3]})
        if self._stopped:
            it._end()
        else:
            self._iterators.add(it)
        return it

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Starts the informer's task (it returns at once: :meth:`synced` waits for the
        initial values)."""
        if self._task is not None:
            raise RuntimeError("the informer was started already")
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"kube2nats informer {self.key_filter}")
        self._task.add_done_callback(self._ended)

    async def stop(self) -> None:
        """Stops the watch and the handlers; :meth:`events` iterators end."""
        self._stopped = True
        tasks = [t for t in [self._task, *self._side_tasks] if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:  # noqa: BLE001 - reported by _ended / _spawn's callback already
                pass
        for it in list(self._iterators):
            it._end()
        self._iterators = weakref.WeakSet()

    async def synced(self, timeout: Optional[float] = None) -> None:
        """Waits until the initial values are in and the handlers have seen them (at once for an
        empty resource). Raises
        ``asyncio.TimeoutError`` after ``timeout`` seconds, :class:`Kube2natsError` if the
        informer stops first."""
        if self._synced.is_set():
            return
        if self._task is None:
            raise Kube2natsError("the informer is not started")
        waiter = asyncio.ensure_future(self._synced.wait())
        try:
            done, _ = await asyncio.wait({waiter, self._task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if self._synced.is_set():
            return
        if not done:
            raise asyncio.TimeoutError(f"the informer of {self.key_filter} did not sync within {timeout}s")
        raise Kube2natsError("the informer stopped before it synced")

    async def __aenter__(self) -> "Informer":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    # --- the watch loop --------------------------------------------------------------------

    async def _run(self) -> None:
        delay = BACKOFF_MIN
        while True:
            watch: Optional[_Watch] = None
            reconnects = self._nc.stats["reconnects"]
            try:
                await wait_connected(self._nc)
                watch = _Watch(self)
                pending = await watch.open()
                fresh = await self._initial(watch, pending)
                await self._replace(fresh)
                delay = BACKOFF_MIN
                await self._follow(watch)
            except _Reconnected:
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - every failure is reported, then retried
                if not self._nc.is_closed and (
                    not self._nc.is_connected or self._nc.stats["reconnects"] != reconnects
                ):
                    # The connection went away under the watch: nats-py reports that through
                    # its own callbacks, and the informer starts afresh once it is back.
                    continue
                await self._report(exc)
            finally:
                if watch is not None:
                    await watch.close()
            await asyncio.sleep(jittered(delay))
            delay = next_delay(delay)

    async def _initial(self, watch: _Watch, pending: int) -> _State:
        """The state the fresh watch's initial values make: they end with the message after
        which the consumer reports nothing pending, or after ``pending`` (the count at the
        consumer's creation) messages, whichever comes first. Values are decoded in batches
        (:func:`_loads_many`)."""
        state = _State()
        expected, received = pending, 0
        batch: List[Tuple[str, Optional[bytes]]] = []
        while pending > 0 and received < expected:
            msg, pending = await watch.receive(self._initial_timeout, data_resets=True)
            received += 1
            key = msg.subject[len(self._prefix):]
            batch.append((key, None if _is_deletion(msg) else msg.data))
            if len(batch) >= _BATCH:
                await self._apply_batch(state, batch)
                batch = []
        await self._apply_batch(state, batch)
        return state

    async def _apply_batch(self, state: _State, batch: List[Tuple[str, Optional[bytes]]]) -> None:
        values = iter(_loads_many([data for _, data in batch if data is not None]))
        for key, data in batch:
            if data is None:
                state.delete(key)
                continue
            try:
                entry = self._entry(key, next(values))
            except DecodeError as err:
                await self._report(err)
                continue
            state.put(key, entry)

    async def _follow(self, watch: _Watch) -> None:
        limit = 2 * self._heartbeat + 1
        state = self._state
        while True:
            msg, _ = await watch.receive(limit, data_resets=False)
            try:
                key, entry = self._decode(msg)
            except DecodeError as err:
                await self._report(err)
                continue
            async with self._lock:
                if entry is None:
                    gone = state.delete(key)
                    if gone is not None:
                        await self._dispatch("DELETED", gone, None)
                else:
                    kind, old = state.put(key, entry)
                    if kind is not None:
                        await self._dispatch(kind, old, entry)

    async def _replace(self, fresh: _State) -> None:
        """Makes ``fresh`` the store, reporting the difference: objects missing are deleted
        (their deletion's marker may have expired while the watch was away), new ones added,
        changed ones (another resourceVersion or key) updated."""
        async with self._lock:
            old = self._state
            changes: List[Tuple[str, Optional[_Entry], Optional[_Entry]]] = []
            for ident, key in old.index.items():
                if ident not in fresh.index:
                    changes.append(("DELETED", old.by_key[key], None))
            for ident, key in fresh.index.items():
                entry = fresh.by_key[key]
                old_key = old.index.get(ident)
                if old_key is None:
                    changes.append(("ADDED", None, entry))
                else:
                    before = old.by_key[old_key]
                    if old_key != key or before[2] != entry[2]:
                        changes.append(("MODIFIED", before, entry))
            self._state = fresh
            for kind, before, after in changes:
                self._emit(kind, before, after)
            for kind, before, after in changes:
                await self._call_handlers(kind, before, after)
            # Synced once the handlers have seen the initial state.
            if not self._synced.is_set():
                self._synced.set()
                for fn in list(self._synced_handlers):
                    try:
                        await call(fn)
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:  # noqa: BLE001
                        err = HandlerError(f"the synced handler {fn!r} raised {exc!r}", "SYNCED", fn)
                        err.__cause__ = exc
                        await self._report(err)

    def _decode(self, msg: Any) -> Tuple[str, Optional[_Entry]]:
        """``(key, entry)`` of a put, ``(key, None)`` of a deletion. Raises
        :class:`DecodeError` for a value that is not an object."""
        key = msg.subject[len(self._prefix):]
        if _is_deletion(msg):
            return key, None
        try:
            value: Any = json.loads(msg.data)
        except ValueError as exc:
            value = exc
        return key, self._entry(key, value)

    def _entry(self, key: str, value: Any) -> _Entry:
        """The cache entry of ``value`` (parsed JSON, or the exception parsing raised)."""
        try:
            if isinstance(value, Exception):
                raise value
            if not isinstance(value, dict):
                raise ValueError(f"a JSON {type(value).__name__}, not an object")
            namespace, name = parse_key(key)
            meta = value.get("metadata")
            if not isinstance(meta, dict):
                meta = {}
            rv = meta.get("resourceVersion")
            labels = meta.get("labels")
            if not isinstance(labels, dict):
                labels = None
            obj = value if self._model is None else self._model(value)
        except Exception as exc:  # noqa: BLE001 - a bad value is reported and skipped
            raise DecodeError(f"the value of {key} is not a JSON object: {exc}", key) from exc
        return (namespace or "", name, "" if rv is None else str(rv), obj, labels)

    # --- reporting -------------------------------------------------------------------------

    def _emit(self, kind: str, old: Optional[_Entry], new: Optional[_Entry]) -> None:
        if not self._iterators:
            return
        obj = (old if kind == "DELETED" else new)[3]  # type: ignore[index]
        event = {"type": kind, "object": obj}
        for it in list(self._iterators):
            it._put(event)

    async def _dispatch(self, kind: str, old: Optional[_Entry], new: Optional[_Entry]) -> None:
        self._emit(kind, old, new)
        await self._call_handlers(kind, old, new)

    async def _call_handlers(self, kind: str, old: Optional[_Entry], new: Optional[_Entry]) -> None:
        for h in list(self._handlers):
            if kind == "ADDED":
                fn, args = h.on_add, (new[3],)  # type: ignore[index]
            elif kind == "MODIFIED":
                fn, args = h.on_update, (old[3], new[3])  # type: ignore[index]
            else:
                fn, args = h.on_delete, (old[3],)  # type: ignore[index]
            if fn is None:
                continue
            try:
                await call(fn, *args)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reported, and the next handler runs
                err = HandlerError(f"the {kind} handler {fn!r} raised {exc!r}", kind, h.source or fn)
                err.__cause__ = exc
                await self._report(err)

    async def _replay(self, reg: _Handler) -> None:
        async with self._lock:
            if reg.on_add is not None:
                for entry in list(self._state.visible()):
                    try:
                        await call(reg.on_add, entry[3])
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:  # noqa: BLE001
                        err = HandlerError(f"the ADDED handler {reg.on_add!r} raised {exc!r}", "ADDED", reg.source or reg.on_add)
                        err.__cause__ = exc
                        await self._report(err)
            self._handlers.append(reg)

    async def _report(self, exc: BaseException) -> None:
        for it in list(self._iterators):
            it._put(error_event(exc))
        for fn in list(self._error_handlers):
            try:
                await call(fn, exc)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - an error handler's own failure goes to the log
                logger.exception("the on_error handler %r raised while handling %r", fn, exc)
        if not self._error_handlers and not self._iterators:
            logger.error("informer of %s: %s", self.key_filter, exc, exc_info=exc)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_done)

    def _side_done(self, task: asyncio.Task) -> None:
        self._side_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("kube2nats informer: %r", task.exception(), exc_info=task.exception())

    def _ended(self, task: asyncio.Task) -> None:
        # The loop only ends by cancellation; anything else is a bug, and is not lost.
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            logger.error("the informer of %s ended: %r", self.key_filter, exc, exc_info=exc)
            for it in list(self._iterators):
                it._put(error_event(exc))
                it._end()
            for fn in list(self._error_handlers):
                try:
                    result = fn(exc)
                    if asyncio.iscoroutine(result):
                        self._spawn(result)
                except Exception:  # noqa: BLE001
                    logger.exception("the on_error handler %r raised", fn)


def _is_deletion(msg: Any) -> bool:
    """A KV delete or purge, any server marker (``Nats-Marker-Reason``, whatever its value), or
    a value-less message: every object is a JSON document."""
    if not msg.data:
        return True
    headers = msg.headers
    return bool(headers) and (headers.get("KV-Operation") in ("DEL", "PURGE") or "Nats-Marker-Reason" in headers)


def _loads_many(values: List[bytes]) -> List[Any]:
    """Each value parsed, or the exception parsing it raised. Objects are parsed together as one
    JSON array, so that their keys are shared strings (json shares the keys within one
    document): a store of many objects takes a quarter less memory. A value that is not an
    object on its own (it must start with ``{`` and end with ``}``), or an array that does not
    parse into as many objects, is parsed alone."""
    if len(values) > 1 and all(v[:1] == b"{" and v[-1:] == b"}" for v in values):
        try:
            parsed = json.loads(b"[" + b",".join(values) + b"]")
            if len(parsed) == len(values) and all(type(p) is dict for p in parsed):
                return parsed
        except ValueError:
            pass
    out: List[Any] = []
    for v in values:
        try:
            out.append(json.loads(v))
        except ValueError as exc:
            out.append(exc)
    return out
