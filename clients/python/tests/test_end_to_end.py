"""The kit against the real kube2nats, through the harness' sim-cluster (the simulated API
server, nats-server, kube2nats mirroring pods into the bucket, and a TCP gate in front of NATS for
subscribers; see sim_cluster.py).

- The scenario of tests/kits.rs: the same handler class (pair.Side) runs on the official
  client's informer and on the kit; both stores must equal the API server's pods after churn,
  after a `kill -9` of kube2nats with changes while it is down, and after the subscriber was cut
  off NATS for longer than the delete markers live while pods were deleted — each deletion
  reported by the kit's handler.
- The point of the mirror: 20 kit informers, synced and following changes, cost the API server
  no pod list or watch (kube2nats' one list and watch serve them all)."""

import asyncio
import time

import kube2nats
from pair import Pair, Side
from sim_cluster import stores_equal_pods
from support import aio, connect

#: How many informers read the bucket at once.
INFORMERS = 20


async def eventually_async(get, ok, what, within=10):
    """Polls ``await get()`` until ``ok`` of it; fails after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        value = await get()
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what} ({value})")
        await asyncio.sleep(0.1)


@aio
async def test_the_kit_equals_the_official_clients_informer(cluster):
    lines = []
    nc = await connect(cluster.info["nats_url"], reconnect_time_wait=0.5)
    pair = Pair(cluster.info["api_url"], cluster.info["api_token"], nc, cluster.info["bucket"], out=lines.append)
    try:
        await pair.start()

        async def equal(when):
            sides = (pair.direct_side, pair.nats_side)
            await stores_equal_pods(
                cluster,
                lambda: {s.name: s.store if s.synced else None for s in sides},
                when,
                lambda: "lines:\n" + "\n".join(lines),
            )

        def reported(deleted, when):
            for deletion in deleted:
                assert f"nats {deletion}" in lines, f"{when}: the kit never reported {deletion!r}\n" + "\n".join(lines)

        await equal("at start")

        deleted = []
        for i in range(5):
            await cluster.run(f"update shop web-{i} nginx:1.29")
        deleted.append(await cluster.line("delete shop web-5"))
        deleted.append(await cluster.line("delete default db.v2-0"))
        await cluster.run("create shop web-30")
        await cluster.run("create shop web-31")
        deleted.append(await cluster.line("delete shop web-6"))
        await cluster.run("update default db.v2-1 postgres:17")
        await equal("after churn")
        reported(deleted, "churn")

        # kube2nats killed (-9) while pods are created, changed and deleted, then started again.
        await cluster.run("kill")
        deleted = [await cluster.line("delete shop web-9")]
        await cluster.run("update shop web-1 nginx:1.33")
        await cluster.run("create default db.v2-10")
        await cluster.run("start")
        await equal("after kube2nats' kill -9")
        reported(deleted, "kill -9")

        # The subscriber cut off NATS while pods are deleted, until every delete marker (and the
        # server's marker after it) has expired: nothing in the bucket says they were there.
        await cluster.run("cut")
        deleted = [await cluster.line("delete shop web-7"), await cluster.line("delete default db.v2-3")]
        await cluster.run("update shop web-8 nginx:1.31")
        await cluster.run("create default db.v2-20")
        await cluster.run("converged markers")
        await cluster.run("restore")
        await equal("after the subscriber was cut off")
        reported(deleted, "cut off")

        errors = [line for line in lines if " ERROR " in line]
        assert errors == [], "\n".join(lines)
    finally:
        await pair.stop()
        await nc.close()


@aio
async def test_informers_through_the_mirror_cost_the_api_server_nothing(cluster):
    def pod_requests(answer):
        return {k: answer[k] for k in ("pod_lists", "pod_watches")}

    # kube2nats' own list and watch: its watch begins once its list is in the bucket, which is
    # when sim-cluster is ready, so it may come a moment later.
    before = await eventually_async(lambda: cluster.run("requests"), lambda r: r["pod_watches"] >= 1, "kube2nats' watch")
    lines = []
    nc = await connect(cluster.info["nats_url"])
    sides = [Side(f"kit-{i}", out=lines.append) for i in range(INFORMERS)]
    informers = [kube2nats.Informer(nc, bucket=cluster.info["bucket"], plural="pods") for _ in sides]
    for side, informer in zip(sides, informers):
        side.follow(informer)
    try:
        for informer in informers:
            await informer.start()
        await asyncio.gather(*(informer.synced(timeout=30) for informer in informers))
        assert sorted(line for line in lines if " synced " in line) == sorted(f"{s.name} synced 18" for s in sides)

        def stores():
            return {s.name: s.store if s.synced else None for s in sides}

        def transcript():
            return "lines:\n" + "\n".join(lines)

        await stores_equal_pods(cluster, stores, "synced", transcript)
        changes = [
            await cluster.line("update shop web-0 nginx:1.29"),
            await cluster.line("delete shop web-5"),
            await cluster.line("create shop web-30"),
            await cluster.line("update default db.v2-1 postgres:17"),
        ]
        await stores_equal_pods(cluster, stores, "after the changes", transcript)
        for side in sides:
            for change in changes:
                assert f"{side.name} {change}" in lines, f"{side.name} never reported {change!r}\n{transcript()}"
        assert [line for line in lines if " ERROR " in line] == [], transcript()

        after = await cluster.run("requests")
        assert pod_requests(after) == pod_requests(before), (
            f"{INFORMERS} informers made the API server serve pods: before {before}, after {after}"
        )
    finally:
        for informer in informers:
            await informer.stop()
        await nc.close()
