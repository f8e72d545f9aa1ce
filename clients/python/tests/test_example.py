"""examples/informer.py as tests/informers.rs runs it: `informer.py NATS_URL BUCKET RESOURCE`,
its lines, its store on SIGTERM; on a bucket of the stand-in writer and on kube2nats' own mirror
(the harness' sim-cluster)."""

import json
import signal

from support import KIT, Mirror, Process, aio, connect, pod

EXAMPLE = str(KIT / "examples" / "informer.py")


@aio
async def test_the_example_informer(server):
    nc = await connect(server.url)
    mirror = await Mirror(nc).create()
    await mirror.put(pod("shop", "web-0", 1))
    await mirror.put(pod("shop", "web.1", 2))
    gone = await mirror.put(pod("shop", "gone", 3))
    await mirror.delete(gone, "4")
    p = Process([EXAMPLE, server.url, "kube-objects", "pods"])
    try:
        await p.wait_for("synced 2 objects")
        await mirror.put(pod("shop", "web-0", 5))
        await mirror.purge(mirror.key(pod("shop", "web.1", 2)))
        await mirror.put(pod("other", "x", 6))
        await p.wait_for("ADDED other/x 6")
        assert p.lines == ["synced 2 objects", "MODIFIED shop/web-0 5", "DELETED shop/web.1 2", "ADDED other/x 6"]
        p.proc.send_signal(signal.SIGTERM)
        assert await p.exit_code() == 0, p.transcript()
        dump = p.lines[4:]
        assert dump == [
            '{"name": "x", "namespace": "other", "resourceVersion": "6"}',
            '{"name": "web-0", "namespace": "shop", "resourceVersion": "5"}',
        ]
        assert [json.loads(line)["name"] for line in dump] == ["x", "web-0"]
    finally:
        p.kill()
    await nc.close()


@aio
async def test_the_example_informer_on_kube2nats_mirror(cluster):
    p = Process([EXAMPLE, cluster.info["nats_url"], cluster.info["bucket"], "pods"])
    try:
        await p.wait_for("synced 18 objects", within=30)
        deleted = await cluster.line("delete shop web-5")
        assert deleted.startswith("DELETED shop/web-5 "), deleted
        await p.wait_for(deleted, within=30)
        await cluster.run("converged")
        pods = await cluster.pods()
        assert p.lines == ["synced 18 objects", deleted], p.transcript()
        p.proc.send_signal(signal.SIGTERM)
        assert await p.exit_code() == 0, p.transcript()
        want = [
            json.dumps({"namespace": ns, "name": name, "resourceVersion": rv}, sort_keys=True)
            for (ns, name), rv in sorted((tuple(key.split("/", 1)), rv) for key, rv in pods.items())
        ]
        assert p.lines[2:] == want, p.transcript()
    finally:
        p.kill()


@aio
async def test_the_example_informer_without_arguments():
    p = Process([EXAMPLE])
    try:
        assert await p.exit_code() == 2, p.transcript()
        assert p.errors == ["usage: informer.py NATS_URL BUCKET RESOURCE"], p.transcript()
    finally:
        p.kill()
