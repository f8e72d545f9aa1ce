#!/usr/bin/env python3
"""An informer of one Kubernetes resource, read from kube2nats' object mirror with the kube2nats kit.

    informer.py NATS_URL BUCKET RESOURCE        e.g. nats://127.0.0.1:4222 kube-objects pods

RESOURCE is a plural of the core group (any version, all namespaces). It prints
`synced N objects` once the objects are in, then one line per change
(`ADDED|MODIFIED|DELETED namespace/name resourceVersion`, namespace empty when cluster-scoped),
and after a reconnect the difference the fresh watch found. On SIGTERM it prints its store,
sorted by namespace and name, as JSON lines `{"name": …, "namespace": …, "resourceVersion": …}`
and exits 0. Errors go to stderr.
"""

import asyncio
import json
import signal
import sys

import nats

import kube2nats


def say(line):
    print(line, flush=True)


def ident(obj):
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name", ""), str(meta.get("resourceVersion", ""))


async def main(url, bucket, plural):
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)

    async def on_nats_error(err):
        print(f"nats: {err}", file=sys.stderr, flush=True)

    nc = await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.5, error_cb=on_nats_error)
    informer = kube2nats.Informer(nc, bucket=bucket, plural=plural)

    printing = False

    def change(kind, obj):
        # The initial objects make the `synced` line; the changes after it one line each.
        if printing:
            ns, name, rv = ident(obj)
            say(f"{kind} {ns}/{name} {rv}")

    @informer.on_synced
    def synced():
        nonlocal printing
        say(f"synced {len(informer)} objects")
        printing = True

    informer.add_event_handler(
        on_add=lambda obj: change("ADDED", obj),
        on_update=lambda old, new: change("MODIFIED", new),
        on_delete=lambda obj: change("DELETED", obj),
    )
    informer.on_error(lambda exc: print(f"informer: {exc}", file=sys.stderr, flush=True))

    async with informer:
        await stop.wait()
    for ns, name, rv in sorted(ident(obj) for obj in informer.list()):
        say(json.dumps({"namespace": ns, "name": name, "resourceVersion": rv}, sort_keys=True))
    await nc.close()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print("usage: informer.py NATS_URL BUCKET RESOURCE", file=sys.stderr)
        sys.exit(2)
    asyncio.run(main(*sys.argv[1:]))
