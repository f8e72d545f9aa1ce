// Time until synced and memory per cached object: this kit on kube2nats' mirror against
// client-node's makeInformer on the simulated API server, both served by the harness'
// `sim-cluster --pods N` (N pods of a production size, ~2.5 KB of JSON, in namespace `bench`,
// plus the 18 pods of its workload; default N = 100,000). Not part of `npm test`.
//
//   NATS_SERVER_BIN=… node test/measure.mjs [N] [ROUNDS]
//
// sim-cluster with 100,000 pods takes about 3.5 GB; this waits until no other
// `sim-cluster --pods` runs before starting one. Each informer runs in a child process of its
// own (`--expose-gc`), interleaved kit, direct, kit, direct, … for ROUNDS rounds (default 2).
// RSS is read after a GC with the modules loaded and the connection made (before), and once
// start() resolved (after); the time is that of start().

import { spawn, execFileSync } from "node:child_process";
import os from "node:os";
import { fileURLToPath } from "node:url";

const [mode, ...args] = process.argv.slice(2);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const MiB = (b) => Math.round(b / 2 ** 20);

function rss() {
  globalThis.gc?.();
  globalThis.gc?.();
  return process.memoryUsage().rss;
}

/** One informer in this process: `kit` on `nats_url`, `direct` on `api_url` with the token. */
async function child(kind, info) {
  let informer;
  let nc;
  if (kind === "kit") {
    const { connect } = await import("@nats-io/transport-node");
    const { makeNatsInformer } = await import("../dist/index.js");
    nc = await connect({ servers: info.nats_url, maxReconnectAttempts: -1 });
    informer = makeNatsInformer(nc, { bucket: info.bucket, group: "", version: "v1", plural: "pods", initialTimeoutMs: 60_000 });
  } else {
    const k8s = await import("@kubernetes/client-node");
    const { directInformer } = await import("./sim-cluster.mjs");
    informer = directInformer(k8s, info);
  }
  const errors = [];
  informer.on("error", (err) => errors.push(String(err?.message ?? err)));
  // The baseline: modules loaded, the NATS connection made, nothing cached.
  const before = rss();
  const t0 = performance.now();
  await informer.start();
  const ms = performance.now() - t0;
  const count = informer.list().length;
  const after = rss();
  const peak = process.resourceUsage().maxRSS * 1024;
  // Errors until synced; stop() aborts client-node's watch, which it reports as one.
  const result = { kind, count, ms: Math.round(ms), before, after, peak, errors: [...errors] };
  await informer.stop();
  await nc?.close();
  process.stdout.write(JSON.stringify(result) + "\n");
}

function runChild(kind, info) {
  return new Promise((resolve, reject) => {
    const c = spawn(
      process.execPath,
      ["--expose-gc", "--max-old-space-size=8192", fileURLToPath(import.meta.url), kind, JSON.stringify(info)],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    let out = "";
    c.stdout.on("data", (d) => (out += d));
    c.on("exit", (code, signal) =>
      code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`${kind} exited ${signal ?? code}: ${out}`)),
    );
  });
}

function otherSimClusters() {
  try {
    return execFileSync("pgrep", ["-f", "sim-cluster --pods"], { encoding: "utf8" }).trim().split("\n").filter(Boolean);
  } catch {
    return []; // pgrep exits 1 when nothing matches
  }
}

const load = () => os.loadavg().map((l) => l.toFixed(2)).join(" ");
const uptime = () => {
  try {
    return execFileSync("uptime", { encoding: "utf8" }).trim();
  } catch {
    return `load average ${load()}`;
  }
};

async function main() {
  const n = Number(args[0] ?? 100_000);
  const rounds = Number(args[1] ?? 2);
  const { startSimCluster } = await import("./sim-cluster.mjs");
  for (let waited = 0; otherSimClusters().length > 0; waited += 10) {
    if (waited % 60 === 0) process.stderr.write(`waiting for another sim-cluster --pods to end (${otherSimClusters().join(" ")})\n`);
    await sleep(10_000);
  }
  process.stdout.write(`machine: ${os.cpus().length} CPUs, ${MiB(os.totalmem())} MiB; ${uptime()}\n`);
  const t0 = performance.now();
  const cluster = await startSimCluster({ pods: n, startTimeoutMs: 30 * 60_000 });
  try {
    process.stdout.write(
      `sim-cluster --pods ${n}: the bucket equal to the API server after ${Math.round((performance.now() - t0) / 1000)} s; ${uptime()}\n`,
    );
    const results = { kit: [], direct: [] };
    for (let round = 0; round < rounds; round++) {
      for (const kind of ["kit", "direct"]) {
        const r = await runChild(kind, cluster.info);
        results[kind].push(r);
        const per = (r.after - r.before) / r.count;
        process.stdout.write(
          `${kind.padEnd(6)} ${r.count} objects synced in ${r.ms} ms; RSS ${MiB(r.before)} -> ${MiB(r.after)} MiB (peak ${MiB(r.peak)} MiB): ${Math.round(per)} bytes per object; load ${load()}${r.errors.length ? `; errors: ${r.errors.join("; ")}` : ""}\n`,
        );
      }
    }
    const median = (xs) => {
      const s = [...xs].sort((a, b) => a - b);
      return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    };
    for (const kind of ["kit", "direct"]) {
      const rs = results[kind];
      process.stdout.write(
        `${kind.padEnd(6)} median of ${rs.length}: synced in ${Math.round(median(rs.map((r) => r.ms)))} ms, ${Math.round(median(rs.map((r) => (r.after - r.before) / r.count)))} bytes per object, peak RSS ${MiB(median(rs.map((r) => r.peak)))} MiB\n`,
      );
    }
    process.stdout.write(`the API server served: ${JSON.stringify(await cluster.requests())}; ${uptime()}\n`);
  } finally {
    await cluster.close();
  }
}

if (mode === "kit" || mode === "direct") await child(mode, JSON.parse(args[0]));
else {
  if (mode) args.unshift(mode);
  await main();
}
