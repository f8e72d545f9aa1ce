// The informer against a real nats-server, the bucket written by a stand-in writer as kube2nats
// writes it.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { makeNatsInformer, objectKey } from "../dist/index.js";
import {
  startNats,
  startGate,
  connectNats,
  createBucket,
  writer,
  pod,
  record,
  sleep,
  waitFor,
  MARKER_TTL_S,
} from "./helpers.mjs";

let server;
let nc; // the writer's connection
let n = 0;
const fresh = () => `b${++n}`; // a bucket per test

before(async () => {
  server = await startNats();
  nc = await connectNats(server.url);
});

after(async () => {
  await nc?.close();
  await server?.cleanup();
});

const podKey = (ns, name, version = "v1") => objectKey({ group: "", version, plural: "pods", namespace: ns, name });
const store = (inf) =>
  inf
    .list()
    .map((o) => `${o.metadata.namespace ?? ""}/${o.metadata.name} ${o.metadata.resourceVersion}`)
    .sort();

async function informerOn(bucket, opts = {}, url = server.url, connOpts = {}) {
  const conn = await connectNats(url, connOpts);
  const inf = makeNatsInformer(conn, { bucket, group: "", version: "*", plural: "pods", ...opts });
  const rec = record(inf);
  return {
    inf,
    rec,
    conn,
    async close() {
      await inf.stop();
      await conn.close();
    },
  };
}

test("an empty bucket reports synced", async () => {
  const bucket = fresh();
  await createBucket(nc, bucket);
  const { inf, rec, close } = await informerOn(bucket);
  const t0 = Date.now();
  await inf.start();
  assert.ok(Date.now() - t0 < 3000, "synced at once");
  assert.deepEqual(inf.list(), []);
  assert.deepEqual(rec.lines, []);
  assert.equal(rec.connects, 1);
  assert.equal(inf.hasSynced(), true);
  await close();
});

test("initial values, then changes: add, update with the new object, a same-version put is nothing", async () => {
  const bucket = fresh();
  const w = await createBucket(nc, bucket);
  await w.put(podKey("shop", "web-0"), pod("shop", "web-0", 10));
  await w.put(podKey("shop", "web.1"), pod("shop", "web.1", 11));
  await w.put(podKey("other", "db"), pod("other", "db", 12));
  // Outside the filter: another resource.
  await w.put(objectKey({ group: "", version: "v1", plural: "configmaps", namespace: "shop", name: "cm" }), {
    kind: "ConfigMap",
    metadata: { namespace: "shop", name: "cm", resourceVersion: "13" },
  });
  const { inf, rec, close } = await informerOn(bucket);
  const changes = [];
  inf.on("change", (o) => changes.push(o.metadata.name));
  const updates = [];
  inf.on("update", (...args) => updates.push(args));
  await inf.start();
  // The cache holds the initial state when start() resolves.
  assert.deepEqual(store(inf), ["other/db 12", "shop/web-0 10", "shop/web.1 11"]);
  assert.deepEqual([...rec.lines].sort(), ["ADDED other/db 12", "ADDED shop/web-0 10", "ADDED shop/web.1 11"]);
  assert.equal(inf.get("web.1", "shop").metadata.resourceVersion, "11");
  assert.equal(inf.get("web.1"), undefined);
  assert.deepEqual(inf.list("other").map((o) => o.metadata.name), ["db"]);
  assert.deepEqual(inf.list("nowhere"), []);

  await w.put(podKey("shop", "web-0"), pod("shop", "web-0", 20));
  await w.put(podKey("shop", "web-0"), pod("shop", "web-0", 20)); // a repair writing the same version
  await w.put(podKey("shop", "web-2"), pod("shop", "web-2", 21));
  await rec.until(5);
  await sleep(200);
  assert.deepEqual(rec.lines.slice(3), ["MODIFIED shop/web-0 20", "ADDED shop/web-2 21"]);
  // client-node passes the new object alone to 'update'.
  assert.equal(updates.length, 1);
  assert.equal(updates[0].length, 1);
  assert.equal(updates[0][0].metadata.resourceVersion, "20");
  assert.equal(changes.length, 5);
  assert.equal(inf.get("web-0", "shop").metadata.resourceVersion, "20");

  // start() on a running informer starts nothing and resolves.
  await inf.start();
  await w.put(podKey("shop", "web-2"), pod("shop", "web-2", 22));
  await rec.until(6);
  await sleep(200);
  assert.deepEqual(rec.lines.slice(5), ["MODIFIED shop/web-2 22"]);
  assert.deepEqual(rec.errors, []);
  await close();
});

test("DEL, PURGE and server markers are deletions; a marker for an unknown key reports nothing", async () => {
  const bucket = fresh();
  const w = await createBucket(nc, bucket);
  for (let i = 0; i < 5; i++) await w.put(podKey("ns", `p${i}`), pod("ns", `p${i}`, 100 + i));
  await w.del(podKey("ns", "gone-before")); // a marker the watch starts with
  const { inf, rec, close } = await informerOn(bucket);
  const deleted = [];
  inf.on("delete", (o) => deleted.push(o));
  await inf.start();
  assert.equal(inf.list().length, 5);
  assert.equal(rec.lines.length, 5);

  await w.del(podKey("ns", "p0"), "200");
  await w.purge(podKey("ns", "p1"));
  // A marker the server writes when a put's TTL runs out (Nats-Marker-Reason: MaxAge).
  await w.put(podKey("ns", "short"), pod("ns", "short", 150), { ttl: "1s" });
  // A marker as @nats-io/kv 3.3 misreads it: reason Remove, no KV-Operation.
  await w.putRaw(podKey("ns", "p2"), new Uint8Array(), { "Nats-Marker-Reason": "Remove" });
  // Deletions of keys the cache does not hold.
  await w.del(podKey("ns", "never"));
  await w.purge(podKey("ns", "never-2"));
  await rec.until(10, 10_000);
  assert.deepEqual(rec.lines.slice(5), [
    "DELETED ns/p0 100",
    "DELETED ns/p1 101",
    "ADDED ns/short 150",
    "DELETED ns/p2 102",
    "DELETED ns/short 150",
  ]);
  // 'delete' gets the last known object.
  assert.equal(deleted[0].metadata.uid, "uid-ns-p0");
  // The markers of those deletions expire, each replaced by the server's, which expires too.
  await waitFor(async () => (await w.messagesOf(podKey("ns", "p0"))) === 0, "the markers of p0 to expire", 10_000);
  await waitFor(async () => (await w.messagesOf(podKey("ns", "never"))) === 0, "the markers of never to expire", 10_000);
  await sleep(300);
  assert.equal(rec.lines.length, 10, `nothing more: ${JSON.stringify(rec.lines)}`);
  assert.deepEqual(store(inf), ["ns/p3 103", "ns/p4 104"]);
  assert.deepEqual(rec.errors, []);
  await close();
});

test("a value that is not JSON is an error surfaced, and the informer goes on", async () => {
  const bucket = fresh();
  const w = await createBucket(nc, bucket);
  await w.put(podKey("ns", "a"), pod("ns", "a", 1));
  await w.putRaw(podKey("ns", "broken-initial"), "{not json");
  const { inf, rec, close } = await informerOn(bucket);
  await inf.start();
  assert.deepEqual(store(inf), ["ns/a 1"]);
  assert.equal(rec.errors.length, 1);
  assert.match(rec.errors[0], /broken-initial is not JSON/);
  await w.putRaw(podKey("ns", "broken"), "garbage");
  await w.putRaw(podKey("ns", "array"), "[1,2]");
  await w.put(podKey("ns", "b"), pod("ns", "b", 2));
  await rec.until(2);
  assert.deepEqual(rec.lines, ["ADDED ns/a 1", "ADDED ns/b 2"]);
  assert.equal(rec.errors.length, 3);
  assert.match(rec.errors[1], /ns\.broken is not JSON/);
  assert.match(rec.errors[2], /not a JSON object/);
  // A handler that throws is an error reported too; the informer goes on.
  inf.on("add", () => {
    throw new Error("handler failed");
  });
  await w.put(podKey("ns", "c"), pod("ns", "c", 3));
  await rec.until(3);
  await waitFor(() => rec.errors.length === 4, "the handler's error");
  assert.match(rec.errors[3], /handler failed/);
  await w.put(podKey("ns", "d"), pod("ns", "d", 4));
  await rec.until(4);
  await close();
});

test("any version: a move to another version's key is one update, no delete", async () => {
  const bucket = fresh();
  const w = await createBucket(nc, bucket);
  const key = (version, name) =>
    objectKey({ group: "example.com", version, plural: "widgets", namespace: "team", name });
  const widget = (name, rv, version) => ({
    apiVersion: `example.com/${version}`,
    kind: "Widget",
    metadata: { namespace: "team", name, resourceVersion: String(rv) },
  });
  await w.put(key("v1beta1", "w1"), widget("w1", 1, "v1beta1"));
  await w.put(key("v1beta1", "w2"), widget("w2", 2, "v1beta1"));
  const conn = await connectNats(server.url);
  const inf = makeNatsInformer(conn, { bucket, group: "example.com", version: "*", plural: "widgets" });
  const rec = record(inf);
  await inf.start();
  assert.equal(rec.lines.length, 2);
  // kube2nats' repair after the move: put under v1, then delete under v1beta1.
  await w.put(key("v1", "w1"), widget("w1", 5, "v1"));
  await w.put(key("v1", "w2"), widget("w2", 2, "v1")); // the same resourceVersion: nothing
  await w.del(key("v1beta1", "w1"));
  await w.del(key("v1beta1", "w2"));
  await w.put(key("v1", "w3"), widget("w3", 6, "v1"));
  await rec.until(4);
  await sleep(300);
  assert.deepEqual(rec.lines.slice(2), ["MODIFIED team/w1 5", "ADDED team/w3 6"]);
  assert.equal(inf.get("w1", "team").apiVersion, "example.com/v1");
  assert.equal(inf.list().length, 3);
  // A fresh watch now agrees with the cache: nothing to report.
  await inf.stop();
  await inf.start();
  await sleep(200);
  assert.equal(rec.lines.length, 4);
  await w.del(key("v1", "w1"));
  await rec.until(5);
  assert.equal(rec.lines[4], "DELETED team/w1 5");
  // A watch of one version sees that version's keys only.
  const only = makeNatsInformer(conn, { bucket, group: "example.com", version: "v1beta1", plural: "widgets" });
  await only.start();
  assert.equal(only.list().length, 0);
  await only.stop();
  await inf.stop();
  await conn.close();
});

test("one namespace, and cluster-scoped objects", async () => {
  const bucket = fresh();
  const w = await createBucket(nc, bucket);
  await w.put(podKey("a", "x"), pod("a", "x", 1));
  await w.put(podKey("b", "y"), pod("b", "y", 2));
  const nodeKey = objectKey({ group: "", version: "v1", plural: "nodes", namespace: null, name: "system:node:w1" });
  await w.put(nodeKey, { kind: "Node", metadata: { name: "system:node:w1", resourceVersion: "3" } });
  const conn = await connectNats(server.url);
  const inA = makeNatsInformer(conn, { bucket, group: "", version: "v1", plural: "pods", namespace: "a" });
  await inA.start();
  assert.deepEqual(inA.list().map((o) => o.metadata.name), ["x"]);
  const nodes = makeNatsInformer(conn, { bucket, group: "", version: "v1", plural: "nodes" });
  await nodes.start();
  assert.equal(nodes.get("system:node:w1").metadata.resourceVersion, "3");
  assert.equal(nodes.list().length, 1);
  await inA.stop();
  await nodes.stop();
  await conn.close();
});

test("no bucket yet: errors reported, retried, synced once the bucket exists", async () => {
  const bucket = fresh();
  const { inf, rec, close } = await informerOn(bucket, { minBackoffMs: 100, maxBackoffMs: 400 });
  let synced = false;
  const starting = inf.start().then(() => (synced = true));
  await waitFor(() => rec.errors.length >= 2, "errors while the bucket is missing");
  assert.equal(synced, false);
  assert.match(rec.errors[0], /stream not found/i);
  const w = await createBucket(nc, bucket);
  await w.put(podKey("ns", "a"), pod("ns", "a", 1));
  await starting;
  await waitFor(() => inf.list().length === 1, "the object");
  await close();
});

test("stop() ends the watch; start() again reports what changed meanwhile", async () => {
  const bucket = fresh();
  const w = await createBucket(nc, bucket);
  await w.put(podKey("ns", "a"), pod("ns", "a", 1));
  await w.put(podKey("ns", "b"), pod("ns", "b", 2));
  const { inf, rec, close } = await informerOn(bucket);
  await inf.start();
  await inf.stop();
  await w.put(podKey("ns", "a"), pod("ns", "a", 3));
  await w.del(podKey("ns", "b"));
  await w.put(podKey("ns", "c"), pod("ns", "c", 4));
  await sleep(200);
  assert.equal(rec.lines.length, 2, "nothing while stopped");
  assert.equal(inf.list().length, 2, "the cache is kept while stopped");
  await inf.start();
  assert.deepEqual(rec.lines.slice(2), ["DELETED ns/b 2", "MODIFIED ns/a 3", "ADDED ns/c 4"]);
  assert.throws(() => inf.on("nonsense", () => {}), /Unknown verb/);
  await close();
});

test("reconnect: deletions made while away, their markers expired, are reported; so are other changes", async () => {
  const own = await startNats();
  const gate = await startGate(own.port);
  const wconn = await connectNats(own.url);
  const bucket = "kube-objects";
  let w = await createBucket(wconn, bucket);
  for (let i = 0; i < 6; i++) await w.put(podKey("ns", `p${i}`), pod("ns", `p${i}`, 10 + i));
  const { inf, rec, close } = await informerOn(bucket, {}, gate.url, { reconnectTimeWait: 200 });
  await inf.start();
  assert.equal(rec.lines.length, 6);
  const connectsBefore = rec.connects;

  // The subscriber is cut off; meanwhile nats-server restarts (the bucket is on disk) and
  // objects change; the deletions' markers and then the server's expire.
  gate.cut();
  await own.restart();
  await wconn.flush().catch(() => {});
  await waitFor(() => !wconn.isClosed() && wconn.info, "the writer to reconnect", 15_000);
  w = writer(wconn, bucket);
  await waitFor(
    async () => {
      try {
        await w.del(podKey("ns", "p0"), "30");
        return true;
      } catch {
        return false;
      }
    },
    "JetStream after the restart",
    15_000,
  );
  await w.del(podKey("ns", "p1"), "31");
  await w.purge(podKey("ns", "p2"));
  await w.put(podKey("ns", "p3"), pod("ns", "p3", 40));
  await w.put(podKey("ns", "new"), pod("ns", "new", 41));
  for (const p of ["p0", "p1", "p2"]) {
    await waitFor(async () => (await w.messagesOf(podKey("ns", p))) === 0, `the markers of ${p} to expire`, 15_000);
  }
  assert.equal(rec.lines.length, 6, "nothing while cut off");
  gate.open();
  await rec.until(11, 20_000);
  assert.deepEqual(rec.lines.slice(6), [
    "DELETED ns/p0 10",
    "DELETED ns/p1 11",
    "DELETED ns/p2 12",
    "MODIFIED ns/p3 40",
    "ADDED ns/new 41",
  ]);
  assert.deepEqual(store(inf), ["ns/new 41", "ns/p3 40", "ns/p4 14", "ns/p5 15"]);
  await waitFor(() => rec.connects > connectsBefore, "'connect' after the new watch");
  assert.ok(rec.errors.some((e) => /connection lost/.test(e)), `the disconnection is reported: ${rec.errors}`);
  // Changes after the reconnect are followed.
  await w.del(podKey("ns", "p4"));
  await rec.until(12);
  assert.equal(rec.lines[11], "DELETED ns/p4 14");
  await close();
  await wconn.close();
  await gate.close();
  await own.cleanup();
});

test("a watch whose messages stop (no heartbeats) is started again", async () => {
  const own = await startNats();
  const gate = await startGate(own.port);
  const wconn = await connectNats(own.url);
  const w = await createBucket(wconn, "kube-objects");
  await w.put(podKey("ns", "a"), pod("ns", "a", 1));
  // Pings far apart: the client does not notice the connection is gone; the heartbeats do.
  const { inf, rec, close } = await informerOn("kube-objects", { heartbeatMs: 300 }, gate.url, {
    pingInterval: 60_000,
  });
  await inf.start();
  // Deleting the watch's consumer stops its messages without the connection noticing anything.
  const jsm = await (await import("@nats-io/jetstream")).jetstreamManager(wconn);
  const names = [];
  for await (const ci of jsm.consumers.list("KV_kube-objects")) names.push(ci.name);
  assert.equal(names.length, 1);
  await jsm.consumers.delete("KV_kube-objects", names[0]);
  await w.del(podKey("ns", "a"));
  await rec.until(2, 10_000);
  assert.equal(rec.lines[1], "DELETED ns/a 1");
  assert.ok(rec.errors.length >= 1, "the failure is reported");
  await close();
  await wconn.close();
  await gate.close();
  await own.cleanup();
});

test("a closed connection stops the informer, saying so", async () => {
  const bucket = fresh();
  const w = await createBucket(nc, bucket);
  await w.put(podKey("ns", "a"), pod("ns", "a", 1));
  const { inf, rec, conn } = await informerOn(bucket);
  await inf.start();
  await conn.close();
  await waitFor(() => rec.errors.some((e) => /connection is closed; the informer stops/.test(e)), "the error");
  await inf.stop(); // returns at once
  assert.deepEqual(store(inf), ["ns/a 1"], "the cache is kept");
});
