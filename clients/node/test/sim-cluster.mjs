// The harness' `sim-cluster` (tests/harness/src/bin/sim_cluster.rs) driven from node: the
// simulated API server, a real nats-server and the real kube2nats mirroring every namespace's
// pods into bucket `kube-objects` (delete markers of 1 s), with a TCP gate in front of NATS for
// subscribers. And the helpers of the end-to-end scenario run against it.

import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { isDeepStrictEqual } from "node:util";
import { natsServerBin, sleep } from "./helpers.mjs";

const REPO = fileURLToPath(new URL("../../../", import.meta.url));
const BUILD_HINT = "build it: cargo build -p kube2nats-harness --bin sim-cluster && cargo build";

/** How long the stores may take to equal the API server after the last change. */
export const SETTLE_MS = 30_000;

/** The binary: `K2N_SIM_CLUSTER`, else `<repo>/target/debug/sim-cluster`, with kube2nats beside it. */
export function simClusterBin() {
  const bin = process.env.K2N_SIM_CLUSTER || path.join(REPO, "target", "debug", "sim-cluster");
  if (!existsSync(bin)) throw new Error(`sim-cluster not found at ${bin}: ${BUILD_HINT}`);
  const daemon = path.join(path.dirname(bin), "kube2nats");
  if (!existsSync(daemon)) throw new Error(`kube2nats not found beside sim-cluster (${daemon}): ${BUILD_HINT}`);
  return bin;
}

/**
 * Starts sim-cluster (`pods`: that many more pods of a production size in namespace `bench`) and
 * resolves once the bucket equals the API server, with its first line
 * `{api_url, api_token, nats_url, bucket}` as `info`.
 */
export async function startSimCluster({ pods = 0, startTimeoutMs = 120_000 } = {}) {
  const bin = simClusterBin();
  const args = pods > 0 ? ["--pods", String(pods)] : [];
  const child = spawn(bin, args, {
    env: { ...process.env, NATS_SERVER_BIN: natsServerBin() },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (d) => {
    stderr = (stderr + d).slice(-20_000);
  });
  child.stdin.on("error", () => {}); // a write after it exited: reported by the pending answer

  const waiting = []; // resolvers of lines not yet read, in order
  const failAll = (err) => {
    for (const w of waiting.splice(0)) w.reject(err);
  };
  let buf = "";
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      const w = waiting.shift();
      if (w) w.resolve(line);
    }
  });
  const exited = new Promise((resolve) =>
    child.on("exit", (code, signal) => {
      failAll(new Error(`sim-cluster exited (${signal ?? code})\n${stderr}`));
      resolve({ code, signal });
    }),
  );
  child.on("error", (err) => failAll(err));
  const nextLine = () => new Promise((resolve, reject) => waiting.push({ resolve, reject }));

  let timer;
  const first = await Promise.race([
    nextLine(),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`sim-cluster did not start within ${startTimeoutMs} ms\n${stderr}`)), startTimeoutMs);
    }),
  ]).catch((err) => {
    child.kill("SIGKILL");
    throw err;
  }).finally(() => clearTimeout(timer));
  const info = JSON.parse(first);

  // One command at a time: each answer is the next line.
  let queue = Promise.resolve();
  const send = (command) => {
    const run = queue.then(async () => {
      const answer = nextLine();
      child.stdin.write(command + "\n");
      const value = JSON.parse(await answer);
      if (value.error) throw new Error(`sim-cluster ${command}: ${value.error}`);
      return value;
    });
    queue = run.catch(() => {});
    return run;
  };

  return {
    info,
    child,
    send,
    stderr: () => stderr,
    /** `{"ns/name": rv}`: the API server's pods. */
    async pods() {
      return (await send("pods")).pods;
    },
    /** The line a handler prints for the change (`ADDED|MODIFIED|DELETED ns/name rv`). */
    async create(ns, name) {
      return (await send(`create ${ns} ${name}`)).line;
    },
    async update(ns, name, image) {
      return (await send(`update ${ns} ${name} ${image}`)).line;
    },
    async delete(ns, name) {
      return (await send(`delete ${ns} ${name}`)).line;
    },
    /** Waits until the bucket equals the API server (`markers`: and no delete marker is left). */
    async converged(markers = false) {
      await send(markers ? "converged markers" : "converged");
    },
    kill: () => send("kill"),
    start: () => send("start"),
    cut: () => send("cut"),
    restore: () => send("restore"),
    /** `{pod_lists, pod_watches, requests, response_bytes}`: what the API server served. */
    requests: () => send("requests"),
    /** Stops it all (end of input: sim-cluster stops kube2nats and nats-server). */
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.stdin.end();
      const within = async (ms) => {
        let timer;
        const late = new Promise((r) => (timer = setTimeout(() => r(false), ms)));
        const done = await Promise.race([exited.then(() => true), late]);
        clearTimeout(timer);
        return done;
      };
      if (await within(15_000)) return;
      child.kill("SIGTERM");
      if (await within(5_000)) return;
      child.kill("SIGKILL");
      await exited;
    },
  };
}

/**
 * Waits until `stores()` (resolving to `{side: {"ns/name": rv}}`) has every side equal to the
 * cluster's pods; throws after SETTLE_MS with the stores, the API server's pods and `transcript()`.
 */
export async function equalToPods(cluster, stores, when, transcript = () => "") {
  const deadline = Date.now() + SETTLE_MS;
  for (;;) {
    const want = await cluster.pods();
    const have = await stores();
    if (Object.values(have).every((s) => isDeepStrictEqual(s, want))) return;
    if (Date.now() > deadline) {
      const lines = [`${when}: the stores differ from the API server after ${SETTLE_MS} ms`, `api    ${JSON.stringify(want)}`];
      for (const [side, s] of Object.entries(have)) lines.push(`${side.padEnd(6)} ${JSON.stringify(s)}`);
      throw new Error(`${lines.join("\n")}\n${transcript()}`);
    }
    await sleep(200);
  }
}

/** Sorts `{"ns/name": rv}` by key, as sim-cluster prints its pods. */
export function sortedStore(entries) {
  return Object.fromEntries([...entries].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/**
 * client-node's own informer of every namespace's pods on the simulated API server (plain HTTP,
 * a bearer token), the direct side the kit is compared with. `k8s` is the
 * `@kubernetes/client-node` module.
 */
export function directInformer(k8s, info) {
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    // client-node refuses a plain http:// server unless TLS verification is "skipped".
    clusters: [{ name: "sim", server: info.api_url, skipTLSVerify: true }],
    users: [{ name: "sim", token: info.api_token }],
    contexts: [{ name: "sim", cluster: "sim", user: "sim" }],
    currentContext: "sim",
  });
  const core = kc.makeApiClient(k8s.CoreV1Api);
  return k8s.makeInformer(kc, "/api/v1/pods", () => core.listPodForAllNamespaces());
}
