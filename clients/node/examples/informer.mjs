// An informer of one core-group resource (every namespace, any version), read from kube2nats'
// object mirror with @kube2nats/client.
//
//   node examples/informer.mjs NATS_URL BUCKET RESOURCE     e.g. nats://127.0.0.1:4222 kube-objects pods
//
// Prints `synced N objects` once the initial state is in, then one line per change
// (`ADDED|MODIFIED|DELETED namespace/name resourceVersion`; a cluster-scoped object's namespace
// is empty), including, after a reconnect, the differences the informer found. On SIGTERM it
// prints its cache as sorted JSON lines {"namespace","name","resourceVersion"} and exits 0.
// Errors go to stderr; the informer keeps trying by itself.

import { connect } from "@nats-io/transport-node";
import { makeNatsInformer } from "../dist/index.js";

const say = (line) => process.stdout.write(line + "\n");
const ns = (obj) => obj.metadata?.namespace ?? "";
const rv = (obj) => String(obj.metadata?.resourceVersion ?? "");

const [url, bucket, resource] = process.argv.slice(2);
if (!resource) {
  process.stderr.write("usage: node examples/informer.mjs NATS_URL BUCKET RESOURCE\n");
  process.exit(2);
}

const nc = await connect({ servers: url, maxReconnectAttempts: -1, reconnectTimeWait: 500, waitOnFirstConnect: true });
const informer = makeNatsInformer(nc, { bucket, group: "", version: "*", plural: resource });

// 'connect' comes right after the initial values are applied, before any later change: the
// first one is the sync; the 'add' calls of the initial values come before it and print nothing.
let synced = false;
let finishing = false;
informer.on("connect", () => {
  if (synced) return;
  synced = true;
  say(`synced ${informer.list().length} objects`);
});
const show = (what) => (obj) => {
  if (synced && !finishing) say(`${what} ${ns(obj)}/${obj.metadata?.name} ${rv(obj)}`);
};
informer.on("add", show("ADDED"));
informer.on("update", show("MODIFIED"));
informer.on("delete", show("DELETED"));
informer.on("error", (err) => process.stderr.write(`informer: ${err?.message ?? err}\n`));

async function finish() {
  if (finishing) return;
  finishing = true;
  // The cache as it is now; stopping the watch first would only delay the exit.
  const objects = informer
    .list()
    .map((o) => [ns(o), o.metadata?.name ?? "", rv(o)])
    .sort((a, b) => (a[0] + "\0" + a[1] < b[0] + "\0" + b[1] ? -1 : 1));
  for (const [namespace, name, resourceVersion] of objects) {
    say(JSON.stringify({ namespace, name, resourceVersion }));
  }
  await Promise.race([informer.stop(), new Promise((r) => setTimeout(r, 1000))]);
  process.exit(0);
}
process.on("SIGTERM", finish);
process.on("SIGINT", finish);

await informer.start();
