// Test helpers: a real nats-server, a TCP gate in front of it, and a stand-in writer of the
// mirror bucket and the event stream, writing as kube2nats does (tests/common/mirror.rs).

import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { connect } from "@nats-io/transport-node";
import { headers, nanos } from "@nats-io/nats-core";
import { jetstream, jetstreamManager, StorageType, DiscardPolicy } from "@nats-io/jetstream";

export const BUCKET = "kube-objects";
/** How long a delete marker lives, and then the marker the server leaves in its place. */
export const MARKER_TTL_S = 1;

export function natsServerBin() {
  const fromEnv = process.env.NATS_SERVER_BIN;
  if (fromEnv) return fromEnv;
  try {
    return execFileSync("sh", ["-c", "command -v nats-server"], { encoding: "utf8" }).trim();
  } catch {
    throw new Error(
      "nats-server not found: set NATS_SERVER_BIN or put nats-server on PATH (run scripts/install-test-tools nats-server)",
    );
  }
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `fn` until it returns a truthy value; throws after `timeoutMs` with `what`. */
export async function waitFor(fn, what, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

function canConnect(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    s.on("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.on("error", () => resolve(false));
  });
}

/** A nats-server with JetStream on a file store in a temp dir; `restart()` keeps port and store. */
export async function startNats() {
  const bin = natsServerBin();
  const dir = mkdtempSync(path.join(os.tmpdir(), "k2n-node-nats-"));
  const port = await freePort();
  let child = null;
  const launch = async () => {
    child = spawn(bin, ["-js", "-sd", dir, "-a", "127.0.0.1", "-p", String(port)], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (d) => (stderr += d));
    const exited = new Promise((r) => child.once("exit", r));
    await waitFor(async () => {
      if (child.exitCode !== null) throw new Error(`nats-server exited: ${stderr}`);
      return (await canConnect(port)) && stderr.includes("Server is ready");
    }, "nats-server to start", 15_000);
    child.exited = exited;
  };
  const halt = async () => {
    if (!child || child.exitCode !== null) return;
    child.kill("SIGTERM");
    await child.exited;
  };
  await launch();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    async restart() {
      await halt();
      await launch();
    },
    stop: halt,
    async cleanup() {
      await halt();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A TCP gate in front of a port: `cut()` closes every connection and refuses new ones until `open()`. */
export async function startGate(targetPort) {
  const port = await freePort();
  const sockets = new Set();
  let isOpen = true;
  const server = net.createServer((client) => {
    if (!isOpen) {
      client.destroy();
      return;
    }
    const upstream = net.connect(targetPort, "127.0.0.1");
    const pair = [client, upstream];
    for (const s of pair) {
      sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => {
        sockets.delete(s);
        for (const o of pair) o.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise((r) => server.listen(port, "127.0.0.1", r));
  return {
    url: `nats://127.0.0.1:${port}`,
    cut() {
      isOpen = false;
      for (const s of sockets) s.destroy();
    },
    open() {
      isOpen = true;
    },
    close() {
      isOpen = false;
      for (const s of sockets) s.destroy();
      return new Promise((r) => server.close(r));
    },
  };
}

export function connectNats(url, extra = {}) {
  return connect({
    servers: url,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 100,
    reconnectJitter: 0,
    ...extra,
  });
}

/** The bucket as kube2nats creates it: history 1, file storage, per-message TTLs, limit markers. */
export async function createBucket(nc, bucket = BUCKET) {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({
    name: `KV_${bucket}`,
    subjects: [`$KV.${bucket}.>`],
    max_msgs_per_subject: 1,
    storage: StorageType.File,
    discard: DiscardPolicy.New,
    allow_rollup_hdrs: true,
    deny_delete: true,
    allow_direct: true,
    allow_msg_ttl: true,
    subject_delete_marker_ttl: nanos(MARKER_TTL_S * 1000),
    num_replicas: 1,
  });
  return writer(nc, bucket);
}

export function pod(namespace, name, rv, extra = {}) {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { namespace, name, resourceVersion: String(rv), uid: `uid-${namespace}-${name}` },
    ...extra,
  };
}

/** The stand-in writer: puts, deletes and purges as kube2nats (and a purging writer) make them. */
export function writer(nc, bucket = BUCKET) {
  const js = jetstream(nc);
  const subject = (key) => `$KV.${bucket}.${key}`;
  const publish = async (key, h, payload) => {
    await js.publish(subject(key), payload, { headers: h });
  };
  return {
    js,
    async put(key, obj, { ttl } = {}) {
      const m = obj.metadata ?? {};
      const h = headers();
      h.set("Kube-Resource-Version", String(m.resourceVersion ?? ""));
      h.set("Kube-Uid", String(m.uid ?? ""));
      h.set("Kube-Kind", String(obj.kind ?? ""));
      h.set("Kube-Api-Version", String(obj.apiVersion ?? ""));
      if (m.namespace) h.set("Kube-Namespace", m.namespace);
      h.set("Kube-Name", String(m.name ?? ""));
      h.set("Kube-Event-Type", "MODIFIED");
      h.set("Kube2nats-Owner", "test.node");
      if (ttl) h.set("Nats-TTL", ttl);
      await publish(key, h, JSON.stringify(obj));
    },
    async putRaw(key, payload, hdrs = {}) {
      const h = headers();
      for (const [k, v] of Object.entries(hdrs)) h.set(k, v);
      await publish(key, h, payload);
    },
    async del(key, rv = "") {
      const h = headers();
      h.set("KV-Operation", "DEL");
      h.set("Kube-Resource-Version", String(rv));
      h.set("Nats-TTL", `${MARKER_TTL_S}s`);
      await publish(key, h, new Uint8Array());
    },
    async purge(key) {
      const h = headers();
      h.set("KV-Operation", "PURGE");
      h.set("Nats-Rollup", "sub");
      h.set("Nats-TTL", `${MARKER_TTL_S}s`);
      await publish(key, h, new Uint8Array());
    },
    /** How many messages the bucket's stream holds for `key` (0 once its markers expired). */
    async messagesOf(key) {
      const jsm = await jetstreamManager(nc);
      const info = await jsm.streams.info(`KV_${bucket}`, { subjects_filter: subject(key) });
      return info.state.subjects?.[subject(key)] ?? 0;
    },
  };
}

/** Records an informer's handler calls as lines `ADDED ns/name rv`, and its errors. */
export function record(informer) {
  const lines = [];
  const errors = [];
  let connects = 0;
  const line = (what) => (obj) =>
    lines.push(`${what} ${obj.metadata?.namespace ?? ""}/${obj.metadata?.name} ${obj.metadata?.resourceVersion}`);
  informer.on("add", line("ADDED"));
  informer.on("update", line("MODIFIED"));
  informer.on("delete", line("DELETED"));
  informer.on("error", (err) => errors.push(String(err?.message ?? err)));
  informer.on("connect", () => (connects += 1));
  return {
    lines,
    errors,
    get connects() {
      return connects;
    },
    /** Waits until `lines` has at least `n` entries. */
    until(n, timeoutMs) {
      return waitFor(() => lines.length >= n, `${n} handler calls (have ${JSON.stringify(lines)})`, timeoutMs);
    },
  };
}
