"""The informer against a real nats-server, the bucket written as kube2nats writes it."""

import asyncio
import json

import pytest

from kube2nats import DecodeError, HandlerError, Informer, Kube2natsError, WatchError
from support import MARKER_TTL, Gate, Mirror, Recorder, aio, connect, eventually, jetstream_ready, pod


async def setup(server, **informer_options):
    nc = await connect(server.url)
    mirror = await Mirror(nc).create()
    informer = Informer(nc, plural="pods", **informer_options)
    rec = Recorder()
    informer.add_event_handler(rec)
    informer.on_error(rec.on_error)
    return nc, mirror, informer, rec


async def quiet(seconds=0.3):
    """Lets what is in flight arrive (for asserting that nothing more happens)."""
    await asyncio.sleep(seconds)


@aio
async def test_an_empty_bucket_reports_synced(server):
    nc, mirror, informer, rec = await setup(server)
    async with informer:
        await informer.synced(timeout=5)
        assert informer.has_synced and len(informer) == 0 and informer.list() == []
        key = await mirror.put(pod("shop", "web-0", 1))
        await eventually(lambda: rec.lines == ["ADDED shop/web-0 1"])
        assert key == "core.v1.pods.shop.web-0"
    assert rec.errors == []
    await nc.close()


@aio
async def test_initial_values_then_changes(server):
    nc, mirror, informer, rec = await setup(server)
    await mirror.put(pod("shop", "web-0", 1, {"app": "web", "tier": "front"}))
    await mirror.put(pod("shop", "web-1", 2, {"app": "web"}))
    await mirror.put(pod("kube-system", "kube-root-ca.crt", 3, {"app": "ca"}))
    await mirror.put(pod("shop", "web-1", 4, {"app": "web"}))  # the last value of a key counts
    # Outside the filter: another resource, and a cluster-scoped node.
    await mirror.put({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "c", "namespace": "shop", "resourceVersion": "5"}}, plural="configmaps")
    await mirror.put({"kind": "Node", "apiVersion": "v1", "metadata": {"name": "system:node:w1", "resourceVersion": "6"}}, plural="nodes")
    async with informer:
        events = informer.events()
        await informer.synced(timeout=5)
        assert sorted(rec.lines) == ["ADDED kube-system/kube-root-ca.crt 3", "ADDED shop/web-0 1", "ADDED shop/web-1 4"]
        assert informer.get("shop", "web-1")["metadata"]["resourceVersion"] == "4"
        assert informer.get("shop", "nope") is None
        assert sorted(informer.keys()) == ["kube-system/kube-root-ca.crt", "shop/web-0", "shop/web-1"]
        assert len(informer.list(namespace="shop")) == 2
        assert [p["metadata"]["name"] for p in informer.list(label_selector="app=web,tier")] == ["web-0"]
        assert len(informer.list(label_selector="app in (web,ca)")) == 3
        assert len(informer.list(label_selector="tier!=front")) == 2
        assert len(informer.list(namespace="shop", label_selector={"app": "web"})) == 2
        rec.lines.clear()

        await mirror.put(pod("shop", "web-0", 7, {"app": "web", "tier": "front"}))
        await mirror.put(pod("shop", "web-0", 7, {"app": "web", "tier": "front"}))  # a repair: same version
        await mirror.put(pod("shop", "web-2", 8))
        await eventually(lambda: len(rec.lines) >= 2)
        await quiet()
        assert rec.lines == ["MODIFIED shop/web-0 7 (was 1)", "ADDED shop/web-2 8"]

        seen = []
        async for event in events:
            seen.append((event["type"], event["object"]["metadata"]["name"], event["object"]["metadata"]["resourceVersion"]))
            if len(seen) == 5:
                break
        assert sorted(seen[:3]) == [("ADDED", "kube-root-ca.crt", "3"), ("ADDED", "web-0", "1"), ("ADDED", "web-1", "4")]
        assert seen[3:] == [("MODIFIED", "web-0", "7"), ("ADDED", "web-2", "8")]
        # A new iterator starts from the store as it is.
        late = informer.events()
        first = [await late.__anext__() for _ in range(4)]
        assert sorted(e["object"]["metadata"]["resourceVersion"] for e in first) == ["3", "4", "7", "8"]
        assert {e["type"] for e in first} == {"ADDED"}
    assert rec.errors == []
    await nc.close()


@aio
async def test_deletions_del_purge_and_server_markers(server):
    nc, mirror, informer, rec = await setup(server)
    keys = {}
    for i, name in enumerate(["a", "b", "c", "d"]):
        keys[name] = await mirror.put(pod("ns", name, 10 + i))
    # Before the informer starts: a deletion whose marker is still there is not an object.
    gone = await mirror.put(pod("ns", "gone", 9))
    await mirror.delete(gone, "20")
    async with informer:
        await informer.synced(timeout=5)
        assert sorted(informer.keys()) == ["ns/a", "ns/b", "ns/c", "ns/d"]
        rec.lines.clear()

        await mirror.delete(keys["a"], "21")
        await mirror.purge(keys["b"])
        # A put with a TTL: when it expires the server puts a marker (Nats-Marker-Reason: MaxAge).
        await mirror.put(pod("ns", "e", 22), ttl="1s")
        await eventually(lambda: len(rec.lines) >= 3)
        assert rec.lines == ["DELETED ns/a 10", "DELETED ns/b 11", "ADDED ns/e 22"]
        await eventually(lambda: len(rec.lines) >= 4, within=10, what="the server's marker for e")
        assert rec.lines[3] == "DELETED ns/e 22"
        # Any Nats-Marker-Reason is a deletion, even one this kit does not know, value or not.
        await mirror.publish(keys["c"], b'{"not": "an object"}', {"Nats-Marker-Reason": "SomethingNew"})
        # A value-less message is a deletion too.
        await mirror.publish(keys["d"], b"")
        await eventually(lambda: len(rec.lines) >= 6)
        assert rec.lines[4:] == ["DELETED ns/c 12", "DELETED ns/d 13"]
        # The markers of a, b expire and the server's markers that replace them come and go,
        # for keys the informer no longer holds: nothing.
        await asyncio.sleep(3 * MARKER_TTL + 0.5)
        assert len(rec.lines) == 6, rec.lines
        # A deletion of a key never held: nothing.
        await mirror.delete("core.v1.pods.ns.never", "30")
        await quiet()
        assert len(rec.lines) == 6 and len(informer) == 0
    assert rec.errors == []
    await nc.close()


@aio
async def test_a_value_that_is_not_json_is_reported_and_skipped(server):
    nc, mirror, informer, rec = await setup(server)
    await mirror.publish("core.v1.pods.ns.bad0", b"{not json")
    await mirror.put(pod("ns", "ok0", 1))
    async with informer:
        events = informer.events()
        await informer.synced(timeout=5)
        assert rec.lines == ["ADDED ns/ok0 1"]
        assert len(rec.errors) == 1 and isinstance(rec.errors[0], DecodeError)
        assert rec.errors[0].key == "core.v1.pods.ns.bad0"
        await mirror.publish("core.v1.pods.ns.bad1", b"[1, 2]")
        await mirror.put(pod("ns", "ok1", 2))
        await eventually(lambda: len(rec.lines) == 2)
        assert rec.lines[1] == "ADDED ns/ok1 2"
        assert len(rec.errors) == 2 and rec.errors[1].key == "core.v1.pods.ns.bad1"
        # The iterator began before the initial values: it saw the first error too.
        got = [await events.__anext__() for _ in range(4)]
        assert [e["type"] for e in got] == ["ERROR", "ADDED", "ERROR", "ADDED"]
        assert got[2]["object"]["kind"] == "Status" and got[2]["object"]["reason"] == "DecodeError"
        assert isinstance(got[2]["error"], DecodeError)
    await nc.close()


@aio
async def test_a_version_move_is_one_update(server):
    nc, mirror, informer, rec = await setup(server)
    v1 = pod("ns", "w", 5, api_version="example.com/v1beta1")
    key1 = await mirror.put(v1, plural="widgets", group="example.com", version="v1beta1")
    informer = Informer(nc, plural="widgets", group="example.com")
    informer.add_event_handler(rec)
    informer.on_error(rec.on_error)
    async with informer:
        await informer.synced(timeout=5)
        assert rec.lines == ["ADDED ns/w 5"]
        # kube2nats' repair after the move: the object under the new version's key (same
        # resourceVersion), then the old key deleted.
        v2 = pod("ns", "w", 5, api_version="example.com/v1")
        key2 = await mirror.put(v2, plural="widgets", group="example.com", version="v1")
        await mirror.delete(key1, "5")
        await eventually(lambda: len(rec.lines) >= 2)
        await quiet()
        assert rec.lines == ["ADDED ns/w 5", "MODIFIED ns/w 5 (was 5)"]
        assert informer.get("ns", "w")["apiVersion"] == "example.com/v1"
        assert key2.startswith("example_com.v1.widgets.")
        # The move half done (both keys there) as a fresh informer reads it: one object.
        await mirror.put(pod("ns", "w", 6, api_version="example.com/v1beta1"), plural="widgets", group="example.com", version="v1beta1")
        await mirror.put(pod("ns", "w", 6, api_version="example.com/v1"), plural="widgets", group="example.com", version="v1")
        fresh = Informer(nc, plural="widgets", group="example.com")
        async with fresh:
            await fresh.synced(timeout=5)
            assert fresh.keys() == ["ns/w"] and fresh.get("ns", "w")["apiVersion"] == "example.com/v1"
            await mirror.delete(key1, "6")
            await quiet()
            assert fresh.keys() == ["ns/w"]
        # The informer on a fixed version sees its version only.
        only = Informer(nc, plural="widgets", group="example.com", version="v1beta1")
        async with only:
            await only.synced(timeout=5)
            assert only.keys() == []
    assert rec.errors == []
    await nc.close()


@aio
async def test_handlers_sync_async_failing_and_late(server):
    nc, mirror, informer, rec = await setup(server)
    await mirror.put(pod("ns", "a", 1))
    calls = []

    @informer.on_add
    async def added(obj):
        await asyncio.sleep(0)
        calls.append(("add", obj["metadata"]["name"]))

    @informer.on_update
    def updated(old, new):
        calls.append(("update", old["metadata"]["resourceVersion"], new["metadata"]["resourceVersion"]))
        raise RuntimeError("a handler's bug")

    @informer.on_delete
    def deleted(obj):
        calls.append(("delete", obj["metadata"]["name"]))

    async with informer:
        await informer.synced(timeout=5)
        await mirror.put(pod("ns", "a", 2))
        await mirror.delete(mirror.key(pod("ns", "a", 2)))
        await eventually(lambda: len(calls) == 3)
        assert calls == [("add", "a"), ("update", "1", "2"), ("delete", "a")]
        assert len(rec.errors) == 1 and isinstance(rec.errors[0], HandlerError)
        assert isinstance(rec.errors[0].__cause__, RuntimeError) and rec.errors[0].event_type == "MODIFIED"
        # The recorder registered first still saw everything.
        assert rec.lines == ["ADDED ns/a 1", "MODIFIED ns/a 2 (was 1)", "DELETED ns/a 2"]

        # A handler registered while running gets the objects held first, then the changes.
        await mirror.put(pod("ns", "b", 3))
        await eventually(lambda: informer.get("ns", "b") is not None)
        late = Recorder()
        informer.add_event_handler(late)
        await mirror.put(pod("ns", "c", 4))
        await eventually(lambda: len(late.lines) == 2)
        assert late.lines == ["ADDED ns/b 3", "ADDED ns/c 4"]
    await nc.close()


@aio
async def test_a_model_hook_gives_kubernetes_objects(server):
    from kubernetes.client import V1Pod

    nc, mirror, _, _ = await setup(server)
    await mirror.put(pod("ns", "a", 1, {"app": "web"}))
    informer = Informer(nc, plural="pods", model=V1Pod.from_dict)
    got = []
    informer.on_add(got.append)
    async with informer:
        await informer.synced(timeout=5)
        assert isinstance(got[0], V1Pod) and got[0].metadata.resource_version == "1"
        assert informer.list(label_selector="app=web")[0].metadata.name == "a"
    await nc.close()


@aio
async def test_without_the_bucket_it_reports_and_retries_until_it_is_there(server):
    nc = await connect(server.url)
    await jetstream_ready(nc)
    informer = Informer(nc, plural="pods")
    errors = []
    informer.on_error(errors.append)
    async with informer:
        with pytest.raises(asyncio.TimeoutError):
            await informer.synced(timeout=1.5)
        assert errors, "the missing bucket is reported"
        mirror = await Mirror(nc).create()
        await mirror.put(pod("ns", "a", 1))
        await informer.synced(timeout=10)
        assert informer.keys() == ["ns/a"]
    # Stopped: its iterators end, and synced() of a stopped, never-synced informer says so.
    assert [e async for e in informer.events()][0]["type"] == "ADDED"
    never = Informer(nc, plural="pods", bucket="nothing")
    never.on_error(lambda exc: None)
    await never.start()
    await never.stop()
    with pytest.raises(Kube2natsError):
        await never.synced(timeout=1)
    await nc.close()


@aio
async def test_errors_go_to_the_log_when_nobody_listens(server, caplog):
    nc = await connect(server.url)
    mirror = await Mirror(nc).create()
    await mirror.publish("core.v1.pods.ns.bad", b"nope")
    informer = Informer(nc, plural="pods")
    async with informer:
        await informer.synced(timeout=5)
    assert any("core.v1.pods.ns.bad" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
    await nc.close()


@aio
async def test_after_a_reconnect_it_reports_what_changed_while_away(server):
    """nats-server restarts while the informer's connection is cut; deletions are made and their
    markers expire before it is back: the fresh watch's difference reports them."""
    writer = await connect(server.url)
    mirror = await Mirror(writer).create()
    gate = await Gate(server.port).start()
    nc = await connect(gate.url)
    informer = Informer(nc, plural="pods", heartbeat=1.0)
    rec = Recorder()
    informer.add_event_handler(rec)
    informer.on_error(rec.on_error)
    keys = {n: await mirror.put(pod("ns", n, i + 1)) for i, n in enumerate(["a", "b", "c", "d"])}
    async with informer:
        await informer.synced(timeout=5)
        rec.lines.clear()
        gate.cut()
        await eventually(lambda: not nc.is_connected, what="the informer's client notices the cut")
        server.stop()
        server.start()
        await jetstream_ready(writer)
        await mirror.delete(keys["a"], "11")
        await mirror.purge(keys["b"])
        await mirror.put(pod("ns", "c", 12))
        await mirror.put(pod("ns", "e", 13))
        # The deletion markers expire, and then the server's markers in their place.
        for _ in range(100):
            if await mirror.messages() == 3:
                break
            await asyncio.sleep(0.1)
        assert await mirror.messages() == 3, "the markers expired"
        gate.restore()
        await eventually(lambda: len(rec.lines) >= 4, within=20, what="the difference after the reconnect")
        assert sorted(rec.lines) == ["ADDED ns/e 13", "DELETED ns/a 1", "DELETED ns/b 2", "MODIFIED ns/c 12 (was 3)"]
        assert sorted(informer.keys()) == ["ns/c", "ns/d", "ns/e"]
        # And it follows on.
        await mirror.delete(keys["d"], "14")
        await eventually(lambda: len(rec.lines) == 5)
        assert rec.lines[4] == "DELETED ns/d 4"
    # The outage is the connection's (nats-py reports it): not an error of the informer.
    assert rec.errors == []
    await gate.close()
    await nc.close()
    await writer.close()


@aio
async def test_a_watch_that_stops_delivering_is_restarted(server):
    """The watch's consumer deleted under it (as the server does with an idle one): heartbeats
    stop, the informer reports it and starts a fresh watch."""
    nc, mirror, informer, rec = await setup(server, heartbeat=0.5)
    await mirror.put(pod("ns", "a", 1))
    async with informer:
        await informer.synced(timeout=5)
        jsm = nc.jsm()
        for c in (await jsm.consumers_info("KV_kube-objects")):
            await jsm.delete_consumer("KV_kube-objects", c.name)
        await eventually(lambda: any(isinstance(e, WatchError) for e in rec.errors), within=10)
        await mirror.put(pod("ns", "b", 2))
        await eventually(lambda: "ADDED ns/b 2" in rec.lines, within=10)
        assert informer.keys() == ["ns/a", "ns/b"]
    await nc.close()


def test_values_are_parsed_together_unless_one_is_not_an_object_alone():
    from kube2nats.informer import _loads_many

    assert _loads_many([b'{"a": 1}', b'{"b": [2]}']) == [{"a": 1}, {"b": [2]}]
    parsed = _loads_many([b'{"a": 1}', b"{oops}", b'{"c": 3}'])
    assert parsed[0] == {"a": 1} and isinstance(parsed[1], ValueError) and parsed[2] == {"c": 3}
    # Two halves that make an array's elements only when joined are each refused.
    parsed = _loads_many([b'{"x": [1', b'2]}', b'{"y": 0}'])
    assert isinstance(parsed[0], ValueError) and isinstance(parsed[1], ValueError) and parsed[2] == {"y": 0}
    # A top-level comma inside one value makes the count differ: each alone.
    parsed = _loads_many([b'{"a": 1},{"b": 2}', b'{"c": 3}'])
    assert isinstance(parsed[0], ValueError) and parsed[1] == {"c": 3}
    # The parsed objects share their key strings.
    one, two = _loads_many([b'{"metadata": 1}', b'{"metadata": 2}'])
    assert next(iter(one)) is next(iter(two))


@aio
async def test_many_initial_values(server):
    nc, mirror, informer, rec = await setup(server)
    for i in range(2500):
        obj = pod(f"ns{i % 7}", f"p{i}", i + 1)
        await nc.publish(f"$KV.kube-objects.{mirror.key(obj)}", json.dumps(obj).encode())
        if i == 1234:
            await nc.publish("$KV.kube-objects.core.v1.pods.ns.bad", b'{"half": ')
    await nc.flush()
    while await mirror.messages() < 2501:
        await asyncio.sleep(0.05)
    async with informer:
        await informer.synced(timeout=20)
        assert len(informer) == 2500 and len(rec.lines) == 2500
        assert informer.get("ns2", "p1234")["metadata"]["resourceVersion"] == "1235"
        assert [type(e) for e in rec.errors] == [DecodeError] and rec.errors[0].key == "core.v1.pods.ns.bad"
    await nc.close()
