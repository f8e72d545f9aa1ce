// examples/informer.mjs as tests/informers.rs runs it: its command line and its output, on a
// bucket written by the stand-in writer and on kube2nats' mirror (the harness' sim-cluster).

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { startNats, connectNats, createBucket, pod, waitFor } from "./helpers.mjs";
import { startSimCluster } from "./sim-cluster.mjs";
import { objectKey } from "../dist/index.js";

const EXAMPLE = fileURLToPath(new URL("../examples/informer.mjs", import.meta.url));

/** Runs the example with `args`; its stdout as lines, its stderr, its exit code. */
function runExample(args) {
  const child = spawn(process.execPath, [EXAMPLE, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (err += d));
  const exited = new Promise((r) => child.on("exit", (code) => r(code)));
  return {
    child,
    exited,
    lines: () => out.split("\n").filter(Boolean),
    transcript: () => `${out}\n--- stderr\n${err}`,
  };
}

test("the example informer: synced, change lines, markers print nothing, the cache on SIGTERM", async () => {
  const nats = await startNats();
  const nc = await connectNats(nats.url);
  const w = await createBucket(nc, "kube-objects");
  const key = (ns, name, plural = "pods") => objectKey({ group: "", version: "v1", plural, namespace: ns, name });
  await w.put(key("shop", "web-0"), pod("shop", "web-0", 1));
  await w.put(key("shop", "web.1"), pod("shop", "web.1", 2));
  await w.put(key("default", "db"), pod("default", "db", 3));
  await w.put(key("shop", "cm", "configmaps"), { kind: "ConfigMap", metadata: { namespace: "shop", name: "cm", resourceVersion: "4" } });
  await w.del(key("shop", "old"));
  const { child, exited, lines, transcript } = runExample([nats.url, "kube-objects", "pods"]);
  try {
    await waitFor(() => lines().includes("synced 3 objects"), `synced (${transcript()})`);
    await w.put(key("shop", "web-0"), pod("shop", "web-0", 10));
    await w.del(key("default", "db"), "11");
    await w.purge(key("shop", "web.1"));
    await w.put(key("shop", "web-2"), pod("shop", "web-2", 12));
    await waitFor(() => lines().length >= 5, `the change lines (${transcript()})`);
    assert.deepEqual(lines(), [
      "synced 3 objects",
      "MODIFIED shop/web-0 10",
      "DELETED default/db 3",
      "DELETED shop/web.1 2",
      "ADDED shop/web-2 12",
    ]);
    // The markers expire (the server's in their place, then those): nothing printed.
    await waitFor(async () => (await w.messagesOf(key("default", "db"))) === 0, "the markers to expire", 15_000);
    assert.equal(lines().length, 5);
    child.kill("SIGTERM");
    assert.equal(await exited, 0, transcript());
    assert.deepEqual(lines().slice(5), [
      '{"namespace":"shop","name":"web-0","resourceVersion":"10"}',
      '{"namespace":"shop","name":"web-2","resourceVersion":"12"}',
    ]);
  } finally {
    child.kill("SIGKILL");
    await nc.close();
    await nats.cleanup();
  }
});

test("the example informer on kube2nats' mirror: synced 18 objects, a deletion, the pods on SIGTERM", async () => {
  const cluster = await startSimCluster();
  const { child, exited, lines, transcript } = runExample([cluster.info.nats_url, cluster.info.bucket, "pods"]);
  try {
    await waitFor(() => lines().includes("synced 18 objects"), `synced (${transcript()})`, 30_000);
    const deleted = await cluster.delete("shop", "web-5");
    assert.match(deleted, /^DELETED shop\/web-5 \d+$/);
    await waitFor(() => lines().includes(deleted), `${deleted} (${transcript()})`, 30_000);
    await cluster.converged();
    const pods = await cluster.pods();
    const printed = lines().length;
    child.kill("SIGTERM");
    assert.equal(await exited, 0, transcript());
    const want = Object.entries(pods)
      .map(([key, resourceVersion]) => {
        const [namespace, name] = key.split("/");
        return { namespace, name, resourceVersion };
      })
      .sort((a, b) => (a.namespace + "\0" + a.name < b.namespace + "\0" + b.name ? -1 : 1))
      .map((o) => JSON.stringify(o));
    assert.deepEqual(lines().slice(printed), want, transcript());
    assert.deepEqual(lines().slice(0, printed), ["synced 18 objects", deleted], transcript());
  } finally {
    child.kill("SIGKILL");
    await cluster.close();
  }
});

test("the example informer: a usage line and exit 2 without arguments", async () => {
  const child = spawn(process.execPath, [fileURLToPath(new URL("../examples/informer.mjs", import.meta.url))], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr.on("data", (d) => (err += d));
  const code = await new Promise((r) => child.on("exit", r));
  assert.equal(code, 2);
  assert.match(err, /usage: node examples\/informer.mjs NATS_URL BUCKET RESOURCE/);
});
