"""The end-to-end tests' two informers of all pods with one handler class.

- :class:`Side`: the one handler implementation, instantiated once per informer: a store
  ``ns/name -> resourceVersion``, and a line per event (``{side} ADDED|MODIFIED|DELETED ns/name
  rv``, ``{side} synced N`` once, ``{side} ERROR ...``);
- :class:`Direct`: the official ``kubernetes`` client on the API server: a list, then
  ``watch.Watch().stream(list_pod_for_all_namespaces)`` from the list's resourceVersion, watched
  again from the last resourceVersion when a watch ends, listed again on 410 Gone; in a thread,
  its events handed to the asyncio loop;
- :class:`Pair`: a Side on Direct (``direct``) and a Side on ``kube2nats.Informer`` (``nats``).
"""

import asyncio
import json
import threading
import time

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

import kube2nats


def one_line(exc):
    text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


class Side:
    """The one handler implementation: a store ns/name -> resourceVersion, and its lines."""

    def __init__(self, name, out):
        self.name = name
        self.store = {}
        self.synced = False
        self.say = out

    @staticmethod
    def _ident(obj):
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace') or ''}/{meta.get('name', '')}", str(meta.get("resourceVersion", ""))

    def on_add(self, obj):
        key, rv = self._ident(obj)
        self.store[key] = rv
        self.say(f"{self.name} ADDED {key} {rv}")

    def on_update(self, old, new):
        key, rv = self._ident(new)
        self.store[key] = rv
        self.say(f"{self.name} MODIFIED {key} {rv}")

    def on_delete(self, obj):
        key, rv = self._ident(obj)
        self.store.pop(key, None)
        self.say(f"{self.name} DELETED {key} {rv}")

    def on_synced(self):
        self.synced = True
        self.say(f"{self.name} synced {len(self.store)}")

    def on_error(self, exc):
        self.say(f"{self.name} ERROR {one_line(exc)}")

    def follow(self, informer):
        """Makes this the handler of a ``kube2nats.Informer``: its events, errors and sync."""
        informer.add_event_handler(self)
        informer.on_error(self.on_error)
        informer.on_synced(self.on_synced)


class Direct:
    """The kubernetes client's list and watch, in a thread; events go to ``post`` (thread-safe)
    as ("ADDED"|"MODIFIED"|"DELETED", old, new), ("SYNCED",), ("ERROR", exc)."""

    WATCH_SECONDS = 60

    def __init__(self, url, token, post):
        config = client.Configuration()
        config.host = url
        config.api_key = {"authorization": token}
        config.api_key_prefix = {"authorization": "Bearer"}
        self.api = client.CoreV1Api(client.ApiClient(config))
        self.post = post
        self.objects = {}  # ns/name -> the last object seen (the thread's own view)
        self.stopping = False
        self.watch = None
        self.thread = threading.Thread(target=self.run, name="direct informer", daemon=True)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stopping = True
        w = self.watch
        if w is not None:
            w.stop()
        self.thread.join(5)

    @staticmethod
    def _key(obj):
        meta = obj["metadata"]
        return f"{meta.get('namespace') or ''}/{meta['name']}"

    def relist(self):
        """Lists; reports the difference to what the thread held; the list's resourceVersion."""
        resp = self.api.list_pod_for_all_namespaces(_preload_content=False)
        try:
            body = json.loads(resp.data)
        finally:
            resp.release_conn()
        fresh = {self._key(o): o for o in body.get("items") or []}
        for key, old in self.objects.items():
            if key not in fresh:
                self.post(("DELETED", old, None))
        for key, obj in fresh.items():
            old = self.objects.get(key)
            if old is None:
                self.post(("ADDED", None, obj))
            elif old["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                self.post(("MODIFIED", old, obj))
        self.objects = fresh
        return body["metadata"]["resourceVersion"]

    def run(self):
        synced = False
        delay = 0.5
        while not self.stopping:
            try:
                rv = self.relist()
                if not synced:
                    self.post(("SYNCED",))
                    synced = True
                delay = 0.5
                while not self.stopping:
                    rv = self.follow(rv)
            except ApiException as exc:
                if self.stopping:
                    break
                if exc.status != 410:
                    self.post(("ERROR", exc))
                    time.sleep(delay)
                    delay = min(delay * 2, 30)
            except Exception as exc:  # noqa: BLE001 - reported, then listed again
                if self.stopping:
                    break
                self.post(("ERROR", exc))
                time.sleep(delay)
                delay = min(delay * 2, 30)

    def follow(self, rv):
        """One watch from ``rv`` until the server ends it; the last resourceVersion. Raises
        ApiException(410) when ``rv`` is too old (with ``timeout_seconds`` set the client does
        not retry by itself)."""
        # return_type "object": the events' objects as dicts, not the pydantic models.
        self.watch = watch.Watch(return_type="object")
        try:
            for event in self.watch.stream(
                self.api.list_pod_for_all_namespaces,
                resource_version=rv,
                allow_watch_bookmarks=True,
                timeout_seconds=self.WATCH_SECONDS,
            ):
                if self.stopping:
                    break
                obj = event["raw_object"]
                rv = obj["metadata"]["resourceVersion"]
                kind = event["type"]
                if kind == "BOOKMARK":
                    continue
                key = self._key(obj)
                old = self.objects.get(key)
                if kind == "DELETED":
                    # As client-go: the delete handler gets the watch event's object (its final
                    # state, at the deletion's resourceVersion).
                    self.objects.pop(key, None)
                    self.post(("DELETED", obj, None))
                else:
                    self.objects[key] = obj
                    self.post(("MODIFIED", old, obj) if old is not None else ("ADDED", None, obj))
        finally:
            self.watch = None
        return rv


class Pair:
    """Both informers of all pods, each running a :class:`Side`, on the running loop."""

    def __init__(self, api_url, token, nc, bucket, out):
        self.direct_side, self.nats_side = Side("direct", out), Side("nats", out)
        loop = asyncio.get_running_loop()
        self.events = asyncio.Queue()
        self.direct = Direct(api_url, token, lambda item: loop.call_soon_threadsafe(self.events.put_nowait, item))
        self.informer = kube2nats.Informer(nc, bucket=bucket, plural="pods")
        self.nats_side.follow(self.informer)
        self.task = None

    async def _direct_events(self):
        # The direct side's events, handled on the loop as the kit's are.
        side = self.direct_side
        while True:
            item = await self.events.get()
            kind = item[0]
            if kind == "ADDED":
                side.on_add(item[2])
            elif kind == "MODIFIED":
                side.on_update(item[1], item[2])
            elif kind == "DELETED":
                side.on_delete(item[1])
            elif kind == "SYNCED":
                side.on_synced()
            elif kind == "ERROR":
                side.on_error(item[1])

    async def start(self):
        self.task = asyncio.ensure_future(self._direct_events())
        self.direct.start()
        await self.informer.start()

    async def stop(self):
        await self.informer.stop()
        await asyncio.get_running_loop().run_in_executor(None, self.direct.stop)
        if self.task is not None:
            self.task.cancel()
