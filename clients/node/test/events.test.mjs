// The event stream through a durable consumer, against a real nats-server.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { headers, nanos } from "@nats-io/nats-core";
import { jetstream, jetstreamManager, StorageType } from "@nats-io/jetstream";
import { natsEvents, eventSubject } from "../dist/index.js";
import { startNats, connectNats, pod, sleep } from "./helpers.mjs";

let server;
let nc;
let js;
let jsm;

before(async () => {
  server = await startNats();
  nc = await connectNats(server.url);
  js = jetstream(nc);
  jsm = await jetstreamManager(nc);
});

after(async () => {
  await nc?.close();
  await server?.cleanup();
});

/** An event stream as kube2nats creates one; a short duplicate window lets a test repeat an id. */
async function eventStream(name, prefix) {
  await jsm.streams.add({
    name,
    subjects: [`${prefix}.>`],
    storage: StorageType.File,
    duplicate_window: nanos(100),
  });
}

/** Publishes one event as kube2nats does: subject, Kube-* headers, Nats-Msg-Id, the watch event as payload. */
async function publish(prefix, type, obj, { wrapped = true, msgId, plural = "pods" } = {}) {
  const m = obj.metadata;
  const subject = eventSubject({
    prefix,
    group: "",
    version: "v1",
    plural,
    namespace: m.namespace,
    name: m.name,
    type,
  });
  const h = headers();
  h.set("Kube-Event-Type", type);
  h.set("Kube-Resource-Version", m.resourceVersion);
  h.set("Kube-Uid", m.uid);
  h.set("Kube-Name", m.name);
  h.set("Nats-Msg-Id", msgId ?? `pods:${m.uid}:${m.resourceVersion}${type === "DELETED" ? ":DELETED" : ""}`);
  await js.publish(subject, JSON.stringify(wrapped ? { type, object: obj } : obj), { headers: h });
}

const line = (e) => `${e.type} ${e.object.metadata.namespace}/${e.object.metadata.name} ${e.object.metadata.resourceVersion}`;

/** Takes `count` events from a fresh iteration, then leaves the loop. */
async function take(conn, opts, count, onEach = () => {}) {
  const got = [];
  if (count === 0) return got;
  for await (const e of natsEvents(conn, opts)) {
    got.push(line(e));
    onEach(e);
    if (got.length === count) {
      e.nats.ack(); // handled: acknowledged before leaving the loop
      break;
    }
  }
  return got;
}

test("yields the events of its resource, wrapped or not, as watch events", async () => {
  await eventStream("EV1", "ev1");
  await publish("ev1", "ADDED", pod("shop", "web-0", 1));
  await publish("ev1", "MODIFIED", pod("shop", "web-0", 2), { wrapped: false });
  await publish("ev1", "ADDED", pod("shop", "cm", 3), { plural: "configmaps" }); // another resource
  await publish("ev1", "DELETED", pod("other", "db", 4));
  const errors = [];
  const opts = {
    stream: "EV1",
    prefix: "ev1",
    durable: "d1",
    group: "",
    version: "v1",
    plural: "pods",
    onError: (e) => errors.push(e.message),
  };
  const events = [];
  await take(nc, opts, 3, (e) => events.push(e));
  assert.deepEqual(events.map(line), ["ADDED shop/web-0 1", "MODIFIED shop/web-0 2", "DELETED other/db 4"]);
  assert.equal(events[0].object.kind, "Pod");
  assert.equal(events[0].nats.msgId, "pods:uid-shop-web-0:1");
  assert.match(events[2].nats.subject, /^ev1\.core\.v1\.pods\.other\.db\.deleted$/);
  assert.deepEqual(errors, []);
  // One namespace only.
  const shop = await take(nc, { ...opts, durable: "d1-shop", namespace: "shop" }, 2);
  assert.deepEqual(shop, ["ADDED shop/web-0 1", "MODIFIED shop/web-0 2"]);
});

test("a restart of the subscriber resumes where it stopped", async () => {
  await eventStream("EV2", "ev2");
  for (let i = 1; i <= 5; i++) await publish("ev2", "ADDED", pod("ns", `p${i}`, i));
  const opts = { stream: "EV2", prefix: "ev2", durable: "resume", group: "", version: "v1", plural: "pods" };
  // The first run handles three events, then stops on the fourth before handling it.
  const conn1 = await connectNats(server.url);
  const first = [];
  for await (const e of natsEvents(conn1, opts)) {
    if (first.length === 3) break;
    first.push(line(e));
  }
  await conn1.close();
  assert.deepEqual(first, ["ADDED ns/p1 1", "ADDED ns/p2 2", "ADDED ns/p3 3"]);
  // Another process, the same durable: the fourth event (never finished) and on.
  await publish("ev2", "MODIFIED", pod("ns", "p1", 6));
  const conn2 = await connectNats(server.url);
  const second = await take(conn2, opts, 3);
  await conn2.close();
  assert.deepEqual(second, ["ADDED ns/p4 4", "ADDED ns/p5 5", "MODIFIED ns/p1 6"]);
  // Everything handled is acknowledged.
  const ci = await jsm.consumers.info("EV2", "resume");
  assert.equal(ci.num_ack_pending, 0);
  assert.equal(ci.num_pending, 0);
  // deliver: new starts a new durable after what the stream holds.
  const conn3 = await connectNats(server.url);
  const fresh = [];
  const iter = natsEvents(conn3, { ...opts, durable: "only-new", deliver: "new" });
  const next = iter.next();
  await sleep(300);
  await publish("ev2", "DELETED", pod("ns", "p2", 7));
  fresh.push(line((await next).value));
  await iter.return();
  await conn3.close();
  assert.deepEqual(fresh, ["DELETED ns/p2 7"]);
});

test("a repeated Nats-Msg-Id is acknowledged and not yielded again", async () => {
  await eventStream("EV3", "ev3");
  await publish("ev3", "ADDED", pod("ns", "a", 1));
  await sleep(250); // past the stream's duplicate window: the server stores the repeat
  await publish("ev3", "ADDED", pod("ns", "a", 1));
  await publish("ev3", "MODIFIED", pod("ns", "a", 2));
  const info = await jsm.streams.info("EV3");
  assert.equal(info.state.messages, 3, "the stream holds the repeat");
  const opts = { stream: "EV3", prefix: "ev3", durable: "dedup", group: "", version: "v1", plural: "pods" };
  const got = await take(nc, opts, 2);
  assert.deepEqual(got, ["ADDED ns/a 1", "MODIFIED ns/a 2"]);
  const ci = await jsm.consumers.info("EV3", "dedup");
  assert.equal(ci.num_ack_pending, 0, "the repeat is acknowledged");
  assert.equal(ci.num_pending, 0);
});

test("a payload that is not JSON is reported and skipped; an abort signal ends the iteration", async () => {
  await eventStream("EV4", "ev4");
  await publish("ev4", "ADDED", pod("ns", "a", 1));
  const h = headers();
  h.set("Kube-Event-Type", "MODIFIED");
  await js.publish("ev4.core.v1.pods.ns.a.modified", "not json", { headers: h });
  await publish("ev4", "DELETED", pod("ns", "a", 2));
  const errors = [];
  const ac = new AbortController();
  const opts = {
    stream: "EV4",
    prefix: "ev4",
    durable: "bad",
    group: "",
    version: "v1",
    plural: "pods",
    onError: (e) => errors.push(e.message),
    signal: ac.signal,
  };
  const got = [];
  const t = setTimeout(() => ac.abort(), 1500);
  for await (const e of natsEvents(nc, opts)) got.push(line(e));
  clearTimeout(t);
  assert.deepEqual(got, ["ADDED ns/a 1", "DELETED ns/a 2"]);
  assert.equal(errors.length, 1);
  assert.match(errors[0], /stream sequence 2: .*terminated/);
});

test("a deleted durable is created again and the iteration goes on", async () => {
  await eventStream("EV5", "ev5");
  await publish("ev5", "ADDED", pod("ns", "a", 1));
  const errors = [];
  const opts = {
    stream: "EV5",
    prefix: "ev5",
    durable: "gone",
    group: "",
    version: "v1",
    plural: "pods",
    deliver: "new",
    onError: (e) => errors.push(e.message),
    minBackoffMs: 100,
  };
  const iter = natsEvents(nc, opts);
  const first = iter.next();
  await sleep(300);
  await publish("ev5", "MODIFIED", pod("ns", "a", 2));
  assert.equal(line((await first).value), "MODIFIED ns/a 2");
  const second = iter.next(); // acknowledges the first
  await sleep(200);
  await jsm.consumers.delete("EV5", "gone");
  await sleep(1500);
  await publish("ev5", "MODIFIED", pod("ns", "a", 3));
  assert.equal(line((await second).value), "MODIFIED ns/a 3");
  await iter.return();
  assert.ok(errors.length >= 1, "the deletion is reported");
});

test("a closed connection ends the iteration, saying so", async () => {
  await eventStream("EV6", "ev6");
  const conn = await connectNats(server.url);
  const errors = [];
  const opts = { stream: "EV6", prefix: "ev6", durable: "c", group: "", version: "v1", plural: "pods", onError: (e) => errors.push(e.message) };
  setTimeout(() => conn.close(), 500);
  for await (const e of natsEvents(conn, opts)) assert.fail(`no event expected: ${e.type}`);
  assert.ok(errors.some((m) => /connection is closed/.test(m)), errors.join("; "));
});
