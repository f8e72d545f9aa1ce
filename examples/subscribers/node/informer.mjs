// An informer of one Kubernetes resource, read from kube2nats' object mirror (a NATS KV bucket).
//
//   node informer.mjs NATS_URL BUCKET KEY_FILTER     e.g. nats://127.0.0.1:4222 kube-objects 'core.v1.pods.>'
//
// It builds a local cache of the objects under KEY_FILTER from the bucket's current values,
// prints `synced N objects` once they are all in, then one line per change (`ADDED|MODIFIED|
// DELETED namespace/name resourceVersion`). A KV delete, a purge and a marker the server places
// when a delete's TTL runs out (header `Nats-Marker-Reason`) are all deletions. After a reconnect
// it watches the bucket afresh and prints the difference to its cache: a delete marker whose TTL
// ran out while it was away would otherwise hide a deletion. On SIGTERM it prints its cache as
// sorted JSON lines {"namespace","name","resourceVersion"} and exits 0.
//
// The bucket is opened with @nats-io/kv; the watch is the one `kv.watch()` makes (an ordered push
// consumer on the bucket's stream delivering the last message of each key, then every new one),
// written out here because its entries hide the headers, and this version of the library reads a
// marker with reason `Remove` as a PUT. The key contract is in docs/subscribers.md.

import { connect } from "@nats-io/transport-node";
import { jetstream, DeliverPolicy } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";

/** The inverse of the key contract's escaping: `_` is `.`, `=XX` a byte, `=` alone "". */
export function unescapeToken(token) {
  if (token === "=") return "";
  const out = [];
  for (let i = 0; i < token.length; ) {
    const c = token[i];
    const hex = token.slice(i + 1, i + 3);
    if (c === "_") {
      out.push(0x2e);
      i += 1;
    } else if (c === "=" && /^[0-9A-Fa-f]{2}$/.test(hex)) {
      out.push(parseInt(hex, 16));
      i += 3;
    } else {
      out.push(...Buffer.from(c, "utf8"));
      i += 1;
    }
  }
  return Buffer.from(out).toString("utf8");
}

/** [namespace, name] from a key's last two tokens; namespace "" for a cluster-scoped object. */
export function objectId(key) {
  const tokens = key.split(".");
  if (tokens.length < 2) return null;
  const ns = tokens[tokens.length - 2];
  return [ns === "_" ? "" : unescapeToken(ns), unescapeToken(tokens[tokens.length - 1])];
}

function resourceVersion(data) {
  try {
    const rv = JSON.parse(Buffer.from(data).toString("utf8"))?.metadata?.resourceVersion;
    return rv === undefined ? "" : String(rv);
  } catch {
    return "";
  }
}

// A KV delete or purge, or a server marker; a value-less message can only be a marker, since
// every object is a JSON document.
function isDeletion(m) {
  const op = m.headers?.get("KV-Operation");
  return op === "DEL" || op === "PURGE" || !!m.headers?.has("Nats-Marker-Reason") || m.data.length === 0;
}

function apply(cache, prefix, m) {
  const key = m.subject.slice(prefix.length);
  if (isDeletion(m)) {
    cache.delete(key);
    return;
  }
  const id = objectId(key);
  if (id) cache.set(key, [id[0], id[1], resourceVersion(m.data)]);
}

const same = (a, b) => a[0] === b[0] && a[1] === b[1] && a[2] === b[2];
const say = (line) => process.stdout.write(line + "\n");
const show = (what, [ns, name, rv]) => say(`${what} ${ns}/${name} ${rv}`);

function printDifference(old, fresh) {
  for (const [key, o] of old) if (!fresh.has(key)) show("DELETED", o);
  for (const [key, o] of fresh) {
    const before = old.get(key);
    if (!before) show("ADDED", o);
    else if (!same(before, o)) show("MODIFIED", o);
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const [url, bucket, filter] = process.argv.slice(2);
  if (!filter) {
    process.stderr.write("usage: node informer.mjs NATS_URL BUCKET KEY_FILTER\n");
    process.exit(2);
  }
  const nc = await connect({ servers: url, maxReconnectAttempts: -1, reconnectTimeWait: 500 });
  const js = jetstream(nc);
  const prefix = `$KV.${bucket}.`;
  let cache = new Map();
  let synced = false;
  let current = null; // the consumer's message iterator
  let stopping = false;

  const finish = async () => {
    stopping = true;
    const objects = [...cache.values()].sort((a, b) => (a[0] + "\0" + a[1] < b[0] + "\0" + b[1] ? -1 : 1));
    for (const [namespace, name, rv] of objects) {
      say(JSON.stringify({ namespace, name, resourceVersion: rv }));
    }
    process.exit(0);
  };
  process.on("SIGTERM", finish);
  process.on("SIGINT", finish);

  // On a reconnect the current watch ends, and the loop below watches afresh.
  (async () => {
    for await (const s of nc.status()) {
      if (s.type === "reconnect" && current) current.stop();
    }
  })();

  while (!stopping) {
    let messages;
    let it;
    const fresh = new Map();
    try {
      const kv = await new Kvm(nc).open(bucket);
      const { streamInfo } = await kv.status();
      const oc = await js.consumers.getPushConsumer(streamInfo.config.name, {
        filter_subjects: [prefix + filter],
        deliver_policy: DeliverPolicy.LastPerSubject,
      });
      let pending = (await oc.info(true)).num_pending;
      messages = await oc.consume();
      current = messages;
      it = messages[Symbol.asyncIterator]();
      while (pending > 0) {
        // A bound per message: a watch begun as NATS goes away must not hang.
        const next = await Promise.race([it.next(), sleep(5000).then(() => null)]);
        if (!next || next.done) throw new Error("the watch ended during its initial values");
        pending = next.value.info.pending;
        apply(fresh, prefix, next.value);
      }
    } catch (err) {
      process.stderr.write(`watch: ${err}\n`);
      messages?.stop();
      await sleep(500);
      continue;
    }
    if (synced) printDifference(cache, fresh);
    else {
      say(`synced ${fresh.size} objects`);
      synced = true;
    }
    cache = fresh;
    for (;;) {
      const next = await it.next();
      if (next.done) break;
      const m = next.value;
      const key = m.subject.slice(prefix.length);
      const before = cache.get(key);
      apply(cache, prefix, m);
      const after = cache.get(key);
      if (before && !after) show("DELETED", before);
      else if (!before && after) show("ADDED", after);
      else if (before && after && !same(before, after)) show("MODIFIED", after);
    }
  }
}

main().catch((err) => {
  process.stderr.write(`informer: ${err}\n`);
  process.exit(1);
});
