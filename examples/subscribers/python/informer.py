#!/usr/bin/env python3
"""An informer of one Kubernetes resource, read from kube2nats' object mirror (a NATS KV bucket).

    informer.py NATS_URL BUCKET KEY_FILTER        e.g. nats://127.0.0.1:4222 kube-objects 'core.v1.pods.>'

It builds a local cache of the objects under KEY_FILTER from the bucket's current values, prints
`synced N objects` once they are all in, then one line per change (`ADDED|MODIFIED|DELETED
namespace/name resourceVersion`). A KV delete, a purge and a marker the server places when a
delete's TTL runs out (header `Nats-Marker-Reason`) are all deletions. After a reconnect it
watches the bucket afresh and prints the difference to its cache: a delete marker whose TTL ran
out while it was away would otherwise hide a deletion. On SIGTERM it prints its cache as sorted
JSON lines `{"namespace","name","resourceVersion"}` and exits 0.

The key contract (docs/subscribers.md): `[{cluster}.]{group}.{version}.{resource}.{namespace}.{name}`,
each token escaped into the KV key alphabet; `_` as the namespace token is a cluster-scoped object.
"""

import asyncio
import json
import signal
import sys

import nats
from nats.js.kv import KV_DEL, KV_PURGE


def unescape_token(token):
    """The inverse of the key contract's escaping: `_` is `.`, `=XX` a byte, `=` alone ``."""
    if token == "=":
        return ""
    out = bytearray()
    i = 0
    while i < len(token):
        c = token[i]
        if c == "_":
            out += b"."
            i += 1
        elif c == "=" and _is_hex(token[i + 1 : i + 3]):
            out.append(int(token[i + 1 : i + 3], 16))
            i += 3
        else:
            out += c.encode()
            i += 1
    return out.decode("utf-8", errors="replace")


def _is_hex(s):
    return len(s) == 2 and all(ch in "0123456789ABCDEFabcdef" for ch in s)


def object_id(key):
    """(namespace, name) from a key's last two tokens; namespace `` for a cluster-scoped object."""
    tokens = key.split(".")
    if len(tokens) < 2:
        return None
    namespace = "" if tokens[-2] == "_" else unescape_token(tokens[-2])
    return namespace, unescape_token(tokens[-1])


def resource_version(value):
    """The object's metadata.resourceVersion, or `` if the value is not a JSON object."""
    try:
        obj = json.loads(value)
        return str(obj.get("metadata", {}).get("resourceVersion", ""))
    except (ValueError, AttributeError):
        return ""


def is_deletion(entry):
    # nats-py maps the server's markers (Nats-Marker-Reason) to DEL/PURGE; a value-less put can
    # only be a marker a client does not know, since every object is a JSON document.
    return entry.operation in (KV_DEL, KV_PURGE) or not entry.value


def say(line):
    print(line, flush=True)


class Informer:
    def __init__(self, kv, key_filter):
        self.kv = kv
        self.key_filter = key_filter
        # KV key -> (namespace, name, resourceVersion)
        self.cache = {}

    async def initial(self):
        """A fresh watch and the state it starts from: {key: (namespace, name, rv)}."""
        watcher = await self.kv.watch(self.key_filter)
        state = {}
        try:
            while True:
                # A bound per entry: a watch begun as NATS goes away must not hang.
                entry = await watcher.updates(timeout=5)
                if entry is None:  # the initial values are all in
                    return watcher, state
                apply(state, entry)
        except BaseException:
            try:
                await watcher.stop()
            except Exception:
                pass
            raise

    def replace(self, fresh, announce):
        """Makes `fresh` the cache, printing the difference when `announce`."""
        if announce:
            for key, (ns, name, rv) in sorted(self.cache.items()):
                if key not in fresh:
                    say(f"DELETED {ns}/{name} {rv}")
            for key, (ns, name, rv) in sorted(fresh.items()):
                old = self.cache.get(key)
                if old is None:
                    say(f"ADDED {ns}/{name} {rv}")
                elif old != (ns, name, rv):
                    say(f"MODIFIED {ns}/{name} {rv}")
        self.cache = fresh

    async def follow(self, watcher):
        async for entry in watcher:
            if entry is None:
                continue
            before = self.cache.get(entry.key)
            apply(self.cache, entry)
            after = self.cache.get(entry.key)
            if after is None and before is not None:
                say(f"DELETED {before[0]}/{before[1]} {before[2]}")
            elif after is not None and before is None:
                say(f"ADDED {after[0]}/{after[1]} {after[2]}")
            elif after is not None and after != before:
                say(f"MODIFIED {after[0]}/{after[1]} {after[2]}")

    def dump(self):
        for ns, name, rv in sorted(self.cache.values()):
            say(json.dumps({"namespace": ns, "name": name, "resourceVersion": rv}, sort_keys=True))


def apply(state, entry):
    if is_deletion(entry):
        state.pop(entry.key, None)
        return
    ident = object_id(entry.key)
    if ident is not None:
        state[entry.key] = (ident[0], ident[1], resource_version(entry.value))


async def main(url, bucket, key_filter):
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    reconnected = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)

    async def on_reconnect():
        reconnected.set()

    async def on_error(err):
        print(f"nats: {err}", file=sys.stderr, flush=True)

    nc = await nats.connect(
        url, max_reconnect_attempts=-1, reconnect_time_wait=0.5,
        reconnected_cb=on_reconnect, error_cb=on_error,
    )
    js = nc.jetstream()
    informer = None
    synced = False
    while not stop.is_set():
        reconnected.clear()
        try:
            kv = await js.key_value(bucket)
            informer = informer or Informer(kv, key_filter)
            informer.kv = kv
            watcher, fresh = await informer.initial()
        except Exception as err:  # JetStream not ready yet after a restart, a timeout: retry
            print(f"watch: {err!r}", file=sys.stderr, flush=True)
            await wait_any(stop, 0.5)
            continue
        informer.replace(fresh, announce=synced)
        if not synced:
            say(f"synced {len(fresh)} objects")
            synced = True
        follow = asyncio.create_task(informer.follow(watcher))
        waits = [asyncio.create_task(stop.wait()), asyncio.create_task(reconnected.wait())]
        await asyncio.wait([follow, *waits], return_when=asyncio.FIRST_COMPLETED)
        for task in (follow, *waits):
            task.cancel()
        try:
            await watcher.stop()
        except Exception:
            pass
    if informer is not None:
        informer.dump()
    try:
        await nc.close()
    except Exception:
        pass


async def wait_any(event, seconds):
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except asyncio.TimeoutError:
        pass


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print("usage: informer.py NATS_URL BUCKET KEY_FILTER", file=sys.stderr)
        sys.exit(2)
    asyncio.run(main(*sys.argv[1:]))
