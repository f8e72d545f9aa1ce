"""The event stream through a durable consumer, against a real nats-server."""

import asyncio
import json

from nats.js import api

from kube2nats import DecodeError, EventStream, event_subject
from support import aio, connect, jetstream_ready, pod


async def setup(server, duplicate_window=120.0):
    nc = await connect(server.url)
    await jetstream_ready(nc)
    js = nc.jetstream()
    await js.add_stream(
        api.StreamConfig(name="KUBE", subjects=["kube.>"], storage=api.StorageType.FILE, duplicate_window=duplicate_window)
    )
    return nc, js


async def publish(js, kind, obj, wrapped=True, msg_id=None, plural="pods"):
    """An event as kube2nats publishes it (docs/messages.md)."""
    meta = obj["metadata"]
    subject = event_subject("", "v1", plural, meta.get("namespace"), meta["name"], kind)
    headers = {
        "Kube-Event-Type": kind,
        "Kube-Resource-Version": meta["resourceVersion"],
        "Kube-Name": meta["name"],
        "Nats-Msg-Id": msg_id or f"pods:{meta['uid']}:{meta['resourceVersion']}" + (":DELETED" if kind == "DELETED" else ""),
    }
    payload = {"type": kind, "object": obj} if wrapped else obj
    await js.publish(subject, json.dumps(payload).encode(), headers=headers)


async def settled(nc, durable, within=10):
    """The consumer's info once nothing is pending or unacknowledged (acknowledgements are
    processed by the server after they are sent)."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        info = await nc.jsm().consumer_info("KUBE", durable)
        if (info.num_ack_pending == 0 and info.num_pending == 0) or asyncio.get_running_loop().time() > deadline:
            return info


def brief(event):
    m = event["object"]["metadata"]
    return f"{event['type']} {m['name']} {m['resourceVersion']}"


async def take(stream, n):
    out = []
    async for event in stream:
        out.append(event)
        if len(out) == n:
            break
    return out


@aio
async def test_it_yields_the_events_as_watch_events(server):
    nc, js = await setup(server)
    await publish(js, "ADDED", pod("ns", "a", 1))
    await publish(js, "MODIFIED", pod("ns", "a", 2), wrapped=False)  # payload = "object"
    await publish(js, "DELETED", pod("ns", "a", 3))
    await publish(js, "ADDED", {"kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "4"}}, plural="configmaps")
    await publish(js, "ADDED", pod("other", "b", 5))
    async with EventStream(nc, "t1", plural="pods") as stream:
        got = await take(stream, 4)
    assert [brief(e) for e in got] == ["ADDED a 1", "MODIFIED a 2", "DELETED a 3", "ADDED b 5"]
    assert set(got[0]) == {"type", "object"} and got[0]["object"]["kind"] == "Pod"
    async with EventStream(nc, "t2", plural="pods", namespace="other") as stream:
        assert [brief(e) for e in await take(stream, 1)] == ["ADDED b 5"]
    info = await nc.jsm().consumer_info("KUBE", "t2")
    assert info.config.filter_subject == "kube.core.*.pods.other.*.*"
    assert info.config.ack_policy == api.AckPolicy.EXPLICIT
    await nc.close()


@aio
async def test_a_restarted_subscriber_resumes_after_the_last_ack(server):
    nc, js = await setup(server)
    for rv in range(1, 6):
        await publish(js, "MODIFIED", pod("ns", "a", rv))
    async with EventStream(nc, "resume", plural="pods") as stream:
        assert [brief(e) for e in await take(stream, 2)] == ["MODIFIED a 1", "MODIFIED a 2"]
    # A loop body that raises leaves its event unacknowledged: delivered again.
    try:
        async with EventStream(nc, "resume", plural="pods") as stream:
            async for event in stream:
                assert brief(event) == "MODIFIED a 3"
                raise RuntimeError("the handler failed")
    except RuntimeError:
        pass
    await nc.close()
    # A new process (connection) resumes there.
    nc = await connect(server.url)
    async with EventStream(nc, "resume", plural="pods") as stream:
        assert [brief(e) for e in await take(stream, 3)] == ["MODIFIED a 3", "MODIFIED a 4", "MODIFIED a 5"]
    info = await settled(nc, "resume")
    assert info.num_ack_pending == 0 and info.num_pending == 0
    await nc.close()


@aio
async def test_a_repeated_msg_id_is_dropped(server):
    # A short duplicate window: JetStream stores the same id twice, as after a republish
    # outside the window.
    nc, js = await setup(server, duplicate_window=0.1)
    await publish(js, "ADDED", pod("ns", "a", 1))
    await asyncio.sleep(0.3)
    await publish(js, "ADDED", pod("ns", "a", 1))
    await publish(js, "MODIFIED", pod("ns", "a", 2))
    assert (await nc.jsm().stream_info("KUBE")).state.messages == 3
    async with EventStream(nc, "dedup", plural="pods") as stream:
        assert [brief(e) for e in await take(stream, 2)] == ["ADDED a 1", "MODIFIED a 2"]
    info = await settled(nc, "dedup")
    assert info.num_ack_pending == 0 and info.num_pending == 0, "the duplicate is acknowledged"
    await nc.close()


@aio
async def test_deliver_new_and_bad_payloads(server):
    nc, js = await setup(server)
    await publish(js, "ADDED", pod("ns", "old", 1))
    stream = EventStream(nc, "new", plural="pods", deliver="new")
    async with stream:
        first = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.5)
        await js.publish("kube.core.v1.pods.ns.bad.added", b"{oops", headers={"Nats-Msg-Id": "bad"})
        await publish(js, "ADDED", pod("ns", "new", 2))
        error = await asyncio.wait_for(first, 10)
        assert error["type"] == "ERROR" and isinstance(error["error"], DecodeError)
        assert [brief(e) for e in await take(stream, 1)] == ["ADDED new 2"]
    info = await settled(nc, "new")
    assert info.num_ack_pending == 0 and info.num_pending == 0, "the bad event is terminated"
    await nc.close()


@aio
async def test_a_durable_with_another_filter_is_reported(server):
    nc, js = await setup(server)
    await publish(js, "ADDED", pod("ns", "a", 1))
    async with EventStream(nc, "shared", plural="pods") as stream:
        await take(stream, 1)
    async with EventStream(nc, "shared", plural="configmaps") as stream:
        event = await take(stream, 1)
    assert event[0]["type"] == "ERROR" and "filters" in event[0]["object"]["message"]
    await nc.close()


@aio
async def test_it_goes_on_after_its_connection_is_cut(server):
    from support import Gate

    nc0, js = await setup(server)
    gate = await Gate(server.port).start()
    nc = await connect(gate.url)
    await publish(js, "ADDED", pod("ns", "a", 1))
    async with EventStream(nc, "cut", plural="pods") as stream:
        assert [brief(e) for e in await take(stream, 1)] == ["ADDED a 1"]
        gate.cut()
        await publish(js, "MODIFIED", pod("ns", "a", 2))
        await asyncio.sleep(1)
        gate.restore()
        await publish(js, "MODIFIED", pod("ns", "a", 3))
        got = await asyncio.wait_for(take(stream, 2), 30)
    assert [brief(e) for e in got] == ["MODIFIED a 2", "MODIFIED a 3"]
    await gate.close()
    await nc.close()
    await nc0.close()


@aio
async def test_a_durable_deleted_under_it_is_reported_and_made_again(server):
    nc, js = await setup(server)
    await publish(js, "ADDED", pod("ns", "a", 1))
    async with EventStream(nc, "gone", plural="pods") as stream:
        assert [brief(e) for e in await take(stream, 1)] == ["ADDED a 1"]
        await nc.jsm().delete_consumer("KUBE", "gone")
        await publish(js, "ADDED", pod("ns", "b", 2))
        got = await asyncio.wait_for(take(stream, 2), 30)
    types = [e["type"] for e in got]
    assert "ERROR" in types, types
    # Made again (deliver "all"): from the stream's start, without the event handled already.
    assert [brief(e) for e in got if e["type"] != "ERROR"] == ["ADDED b 2"], got
    await nc.close()
