// End to end, against the harness' sim-cluster (the simulated API server, a real nats-server and
// the real kube2nats): one handler implementation runs on client-node's own makeInformer of the
// API server (`direct`) and on this kit's makeNatsInformer of kube2nats' mirror (`nats`); both
// stores must equal the API server's pods after churn, after a `kill -9` of kube2nats with
// changes while it is down, and after the subscriber was cut off NATS while pods were deleted and
// every delete marker expired — each deletion reported by the kit's handler. The scenario of
// tests/kits.rs for the Rust kit. And twenty kit informers cost the API server nothing more.

import { test } from "node:test";
import assert from "node:assert/strict";
import * as k8s from "@kubernetes/client-node";
import { makeNatsInformer } from "../dist/index.js";
import { connectNats, waitFor, sleep } from "./helpers.mjs";
import { startSimCluster, equalToPods, sortedStore, directInformer, SETTLE_MS } from "./sim-cluster.mjs";

const oneLine = (err) => String(err?.message ?? err ?? "unknown error").replace(/\s+/g, " ").trim();
const id = (obj) => `${obj.metadata?.namespace ?? ""}/${obj.metadata?.name}`;
const rv = (obj) => obj.metadata?.resourceVersion ?? "";

/**
 * The handler both informers run, written against client-node's Informer interface: a store
 * `namespace/name -> resourceVersion`, each call a line `{side} ADDED|MODIFIED|DELETED ns/name rv`,
 * once `{side} synced N`, and `{side} ERROR …`.
 */
class Handler {
  constructor(side, informer, lines) {
    this.side = side;
    this.informer = informer;
    this.lines = lines;
    this.store = new Map();
    this.synced = false;
    this.stopping = false;
    this.retry = null;
    const say = (line) => lines.push(`${side} ${line}`);
    this.say = say;
    informer.on(k8s.ADD, (obj) => {
      this.store.set(id(obj), rv(obj));
      say(`ADDED ${id(obj)} ${rv(obj)}`);
    });
    informer.on(k8s.UPDATE, (obj) => {
      this.store.set(id(obj), rv(obj));
      say(`MODIFIED ${id(obj)} ${rv(obj)}`);
    });
    informer.on(k8s.DELETE, (obj) => {
      this.store.delete(id(obj));
      say(`DELETED ${id(obj)} ${rv(obj)}`);
    });
    // client-node's informer stops on an error and is started again by its user, as here; the
    // kit goes on by itself, and its start() on a running informer starts nothing.
    informer.on(k8s.ERROR, (err) => {
      say(`ERROR ${oneLine(err)}`);
      this.restartLater();
    });
  }

  restartLater() {
    if (this.stopping || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = null;
      this.start();
    }, 1000);
  }

  /** Starts the informer; the first start that completes without an error is the sync. */
  async start() {
    if (this.stopping) return;
    let failed = false;
    const onError = () => (failed = true);
    this.informer.on(k8s.ERROR, onError);
    try {
      await this.informer.start();
    } catch (err) {
      failed = true;
      this.say(`ERROR ${oneLine(err)}`);
      this.restartLater();
    } finally {
      this.informer.off(k8s.ERROR, onError);
    }
    if (!failed && !this.synced && !this.stopping) {
      this.synced = true;
      this.say(`synced ${this.store.size}`);
    }
  }

  async stop() {
    this.stopping = true;
    clearTimeout(this.retry);
    await this.informer.stop();
  }
}

/** The pair of handlers, `direct` and `nats`, started. */
async function startPair(info) {
  const lines = [];
  const nc = await connectNats(info.nats_url, { reconnectTimeWait: 250, pingInterval: 5000 });
  const direct = new Handler("direct", directInformer(k8s, info), lines);
  const nats = new Handler("nats", makeNatsInformer(nc, { bucket: info.bucket, group: "", version: "v1", plural: "pods" }), lines);
  direct.start();
  nats.start();
  return {
    lines,
    transcript: () => `lines:\n${lines.join("\n")}`,
    /** `{direct, nats}` stores, once both have synced. */
    async stores() {
      await waitFor(() => direct.synced && nats.synced, "both sides synced", SETTLE_MS).catch((err) => {
        throw new Error(`${err.message}\n${lines.join("\n")}`);
      });
      return { direct: sortedStore(direct.store), nats: sortedStore(nats.store) };
    },
    async stop() {
      await Promise.all([direct.stop(), nats.stop()]);
      await nc.close();
    },
  };
}

/** Each deletion (`DELETED ns/name rv`, the last version) was reported by the kit's handler. */
function reported(pair, deleted, when) {
  for (const d of deleted) {
    assert.ok(pair.lines.includes(`nats ${d}`), `${when}: the kit's handler never reported ${d}\n${pair.transcript()}`);
  }
}

test("the kit equals client-node's own informer: churn, kube2nats killed, the subscriber cut off", async () => {
  const cluster = await startSimCluster();
  let pair;
  try {
    pair = await startPair(cluster.info);
    const equal = (when) =>
      equalToPods(cluster, () => pair.stores(), when, () => `${pair.transcript()}\nsim-cluster:\n${cluster.stderr()}`);
    await equal("at start");
    assert.ok(pair.lines.includes("direct synced 18") && pair.lines.includes("nats synced 18"), pair.transcript());

    let deleted = [];
    for (let i = 0; i < 5; i++) await cluster.update("shop", `web-${i}`, "nginx:1.29");
    deleted.push(await cluster.delete("shop", "web-5"));
    deleted.push(await cluster.delete("default", "db.v2-0"));
    await cluster.create("shop", "web-30");
    // A new pod, not web-5 again: the bucket holds states, and a deletion followed at once by a
    // re-creation under the same key may reach it as one write (the put).
    await cluster.create("shop", "web-31");
    deleted.push(await cluster.delete("shop", "web-6"));
    await cluster.update("default", "db.v2-1", "postgres:17");
    await equal("after churn");
    reported(pair, deleted, "churn");

    // kube2nats killed (-9) while pods are deleted, changed and created, then started again.
    await cluster.kill();
    deleted = [await cluster.delete("shop", "web-9")];
    await cluster.update("shop", "web-1", "nginx:1.33");
    await cluster.create("default", "db.v2-10");
    await cluster.start();
    await equal("after kube2nats' kill -9");
    reported(pair, deleted, "kill -9");

    // The subscriber cut off NATS while pods are deleted, until every delete marker (and the
    // server's marker after it) has expired: nothing in the bucket says they were there.
    await cluster.cut();
    deleted = [await cluster.delete("shop", "web-7"), await cluster.delete("default", "db.v2-3")];
    await cluster.update("shop", "web-8", "nginx:1.31");
    await cluster.create("default", "db.v2-20");
    await cluster.converged(true);
    await cluster.restore();
    await equal("after the subscriber was cut off");
    reported(pair, deleted, "cut off");
  } finally {
    await pair?.stop().catch(() => {});
    await cluster.close();
  }
});

test("twenty kit informers, synced and following changes, cost the API server nothing more", async () => {
  const SERVICES = 20;
  const cluster = await startSimCluster();
  const conns = [];
  const informers = [];
  const errors = [];
  try {
    const before = await cluster.requests();
    for (let i = 0; i < SERVICES; i++) {
      const nc = await connectNats(cluster.info.nats_url);
      conns.push(nc);
      const inf = makeNatsInformer(nc, { bucket: cluster.info.bucket, group: "", version: "v1", plural: "pods" });
      inf.on("error", (err) => errors.push(`kit-${i} ERROR ${oneLine(err)}`));
      informers.push(inf);
      inf.start();
    }
    await waitFor(() => informers.every((inf) => inf.hasSynced()), `${SERVICES} kit informers synced`, SETTLE_MS).catch((err) => {
      throw new Error(`${err.message}\n${errors.join("\n")}`);
    });
    for (let i = 0; i < 5; i++) await cluster.update("shop", `web-${i}`, "nginx:1.29");
    await cluster.delete("shop", "web-5");
    await cluster.create("default", "db.v2-30");
    const stores = async () =>
      Object.fromEntries(informers.map((inf, i) => [`kit-${i}`, sortedStore(inf.list().map((o) => [id(o), rv(o)]))]));
    await equalToPods(cluster, stores, `${SERVICES} kit informers`, () => errors.join("\n"));
    await sleep(200);
    const after = await cluster.requests();
    for (const count of ["pod_lists", "pod_watches"]) {
      assert.equal(after[count], before[count], `${count}: before ${JSON.stringify(before)}, after ${JSON.stringify(after)}`);
    }
  } finally {
    await Promise.all(informers.map((inf) => inf.stop().catch(() => {})));
    await Promise.all(conns.map((nc) => nc.close().catch(() => {})));
    await cluster.close();
  }
});
