#!/usr/bin/env python3
"""Time until synced and memory per cached object: the kit on kube2nats' mirror against the
official `kubernetes` client's list on the simulated API server, both served by the harness'
`sim-cluster --pods N` (N pods of a production size, ~2.5 KB of JSON each, in namespace `bench`,
plus the 18 of its workload; default N = 100,000). Not collected by pytest.

    NATS_SERVER_BIN=… python clients/python/bench/measure.py [--pods N] [--rounds R] [--no-wait]

Run it with a Python that has the kit and its test requirements (target/test-tools/kits-venv).
sim-cluster is `K2N_SIM_CLUSTER`, else target/debug/sim-cluster (kube2nats beside it); with
100,000 pods it takes about 3.5 GB and a few minutes to fill, so this waits until no other
`sim-cluster --pods` runs before starting one (`--no-wait`: start at once).

Each side runs in a child process of its own, interleaved kit, direct, kit, direct, … for R
rounds (default 2):
- kit: `kube2nats.Informer(nc, plural="pods")`; the time is from its start until `synced()`;
- direct: one `list_pod_for_all_namespaces` (unpaginated, plain HTTP), its body parsed into dicts
  (`_preload_content=False`, then `json.loads`) and kept by (namespace, name); the time is that
  of the list and the parsing.
RSS (Linux: /proc/self/statm) is read after a `gc.collect()` with the modules loaded and the
client made (before), and again once the objects are in (after); per object is the growth over
the number of objects. The answer of sim-cluster's `requests` before and after shows what the
API server served (the direct side's lists; the kit's side none).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


async def kit(info: dict) -> dict:
    import nats

    import kube2nats

    nc = await nats.connect(info["nats_url"], max_reconnect_attempts=-1)
    informer = kube2nats.Informer(nc, bucket=info["bucket"], plural="pods")
    errors: list = []
    informer.on_error(lambda exc: errors.append(f"{type(exc).__name__}: {exc}"))
    gc.collect()
    before = rss()
    t0 = time.perf_counter()
    async with informer:
        await informer.synced()
        seconds = time.perf_counter() - t0
        count = len(informer)
        gc.collect()
        after = rss()
    await nc.close()
    return {"count": count, "seconds": seconds, "before": before, "after": after, "errors": errors}


def direct(info: dict) -> dict:
    from kubernetes import client

    config = client.Configuration()
    config.host = info["api_url"]
    config.api_key = {"authorization": info["api_token"]}
    config.api_key_prefix = {"authorization": "Bearer"}
    api = client.CoreV1Api(client.ApiClient(config))
    gc.collect()
    before = rss()
    t0 = time.perf_counter()
    resp = api.list_pod_for_all_namespaces(_preload_content=False)
    try:
        body = json.loads(resp.data)
    finally:
        resp.release_conn()
    del resp
    store = {(o["metadata"].get("namespace") or "", o["metadata"]["name"]): o for o in body["items"]}
    del body
    seconds = time.perf_counter() - t0
    gc.collect()
    after = rss()
    return {"count": len(store), "seconds": seconds, "before": before, "after": after, "errors": []}


def child(kind: str, info: dict) -> None:
    result = asyncio.run(kit(info)) if kind == "kit" else direct(info)
    result.update(kind=kind, peak=peak_rss())
    print(json.dumps(result), flush=True)


def run_child(kind: str, info: dict) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, kind, json.dumps(info)], stdout=subprocess.PIPE, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"{kind} exited {out.returncode}: {out.stdout}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def other_sim_clusters() -> list:
    found = subprocess.run(["pgrep", "-f", "sim-cluster --pods"], stdout=subprocess.PIPE, text=True, check=False)
    return found.stdout.split()


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def mib(n: float) -> int:
    return round(n / 2**20)


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=100_000, help="bench pods for sim-cluster (default 100000)")
    parser.add_argument("--rounds", type=int, default=2, help="kit, direct rounds (default 2)")
    parser.add_argument("--no-wait", action="store_true", help="do not wait for other sim-cluster --pods runs")
    args = parser.parse_args()

    from sim_cluster import SimCluster

    waited = 0
    while not args.no_wait and other_sim_clusters():
        if waited % 60 == 0:
            print(f"waiting for another sim-cluster --pods to end ({' '.join(other_sim_clusters())})", file=sys.stderr)
        time.sleep(10)
        waited += 10
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    print(
        f"machine: {os.cpu_count()} CPUs, {mib(total)} MiB; load {load()}; Python {platform.python_version()}, "
        f"kube2nats {version('kube2nats')}, nats-py {version('nats-py')}, kubernetes {version('kubernetes')}",
        flush=True,
    )
    t0 = time.monotonic()
    cluster = SimCluster(pods=args.pods)
    try:
        print(
            f"sim-cluster --pods {args.pods}: the bucket equal to the API server after "
            f"{time.monotonic() - t0:.0f} s; load {load()}",
            flush=True,
        )
        print(f"the API server served before: {cluster.command('requests')}", flush=True)
        results: dict = {"kit": [], "direct": []}
        for _ in range(args.rounds):
            for kind in ("kit", "direct"):
                r = run_child(kind, cluster.info)
                results[kind].append(r)
                per = (r["after"] - r["before"]) / r["count"]
                errors = f"; errors: {'; '.join(r['errors'])}" if r["errors"] else ""
                print(
                    f"{kind:<6} {r['count']} objects in {r['seconds']:.1f} s; RSS {mib(r['before'])} -> "
                    f"{mib(r['after'])} MiB (peak {mib(r['peak'])} MiB): {per / 1000:.1f} KB per object; "
                    f"load {load()}{errors}",
                    flush=True,
                )
        for kind, rs in results.items():
            print(
                f"{kind:<6} median of {len(rs)}: {statistics.median(r['seconds'] for r in rs):.1f} s, "
                f"{statistics.median((r['after'] - r['before']) / r['count'] for r in rs) / 1000:.1f} KB per object, "
                f"peak RSS {mib(statistics.median(r['peak'] for r in rs))} MiB",
                flush=True,
            )
        print(f"the API server served after: {cluster.command('requests')}; load {load()}", flush=True)
    finally:
        cluster.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in ("kit", "direct"):
        child(sys.argv[1], json.loads(sys.argv[2]))
    else:
        sys.exit(main())
