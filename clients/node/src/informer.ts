// An informer of one resource read from kube2nats' object mirror (a JetStream KV bucket), with
// the interface of @kubernetes/client-node's `makeInformer`.
//
// The watch is the one a KV client makes, written out because the KV libraries hide what the
// contract needs (the headers: @nats-io/kv 3.3 reads a server marker with reason `Remove` as a
// put; and the exact end of the initial values): an ordered push consumer on the bucket's stream,
// `deliver_policy: last_per_subject`, flow control and idle heartbeats, with consumer sequences
// checked for gaps. Any failure of it (a gap, missed heartbeats, the consumer or stream gone, a
// reconnect of the NATS client) ends it, and a fresh one (a new consumer) is started whose initial
// values are compared with the cache: a deletion whose marker expired while the watch was away
// is found missing and reported.

import type {
  ErrorCallback,
  Informer,
  KubernetesObject,
  ObjectCache,
  ObjectCallback,
} from "@kubernetes/client-node";
import type { Msg, NatsConnection, Status, Subscription } from "@nats-io/nats-core";
import { createInbox, nanos, nuid } from "@nats-io/nats-core";
import { AckPolicy, DeliverPolicy, jetstreamManager, ReplayPolicy } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import { keyFilter, parseKey } from "./keys.js";
import { Store, type Change } from "./store.js";

/** The verbs of client-node's informer, with the same values. */
export const ADD = "add";
export const UPDATE = "update";
export const CHANGE = "change";
export const DELETE = "delete";
export const CONNECT = "connect";
export const ERROR = "error";

/** Which objects, and how the watch behaves. */
export interface NatsInformerOptions {
  /** The mirror's bucket; default `kube-objects`. */
  bucket?: string;
  /** kube2nats' `publish.cluster`, when set: the first token of every key. */
  cluster?: string;
  /** API group; "" is the core group. */
  group: string;
  /** API version, or `*` for whichever version kube2nats follows (a CRD's preferred version). */
  version: string;
  /** The resource's plural name, e.g. `pods`. */
  plural: string;
  /** One namespace; absent: every namespace (and the cluster-scoped objects). */
  namespace?: string;
  /** Longest wait for the next initial value before the watch is started again; default 5000 ms. */
  initialTimeoutMs?: number;
  /** The consumer's idle heartbeat; three missed end the watch. Default 5000 ms. */
  heartbeatMs?: number;
  /** First delay after a failure, doubling up to `maxBackoffMs`; default 500 ms. */
  minBackoffMs?: number;
  /** Longest delay between two attempts; default 30000 ms. */
  maxBackoffMs?: number;
}

/** A watch ended to be started again at once (a reconnect), not a failure. */
class Restart extends Error {}

/** Where the message's consumer sequence and pending count are: its reply subject. */
function ackInfo(reply: string | undefined): { dseq: number; pending: number } | null {
  if (!reply) return null;
  const t = reply.split(".");
  if (t[0] !== "$JS" || t[1] !== "ACK") return null;
  // $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>, or with
  // <domain>.<account hash> after ACK (and a random token at the end).
  const base = t.length === 9 ? 2 : 4;
  if (t.length < base + 7) return null;
  return { dseq: Number(t[base + 4]), pending: Number(t[base + 6]) };
}

/** A KV delete or purge, or a marker the server placed (every object is a JSON document). */
export function isDeletion(m: Pick<Msg, "headers" | "data">): boolean {
  const op = m.headers?.get("KV-Operation");
  return op === "DEL" || op === "PURGE" || !!m.headers?.has("Nats-Marker-Reason") || m.data.length === 0;
}

const decoder = new TextDecoder();

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * The informer: `Informer<T> & ObjectCache<T>` of @kubernetes/client-node, fed by the mirror.
 *
 * Differences from client-node's informer, chosen so that code written against `makeInformer`
 * runs unchanged and keeps working:
 * - `await start()` resolves once the cache holds the initial state.
 * - After an error it does not stop: it reports the error ('error') and starts the watch again
 *   by itself (500 ms doubling to 30 s), forever, until `stop()`. A caller that restarts the
 *   informer from its error handler, as client-node requires, is harmless: `start()` on a
 *   running informer returns the promise of its first sync and starts nothing.
 * - 'connect' is called after each (re)start of the watch once its initial values are applied
 *   (client-node calls it before its list), so a 'connect' handler sees a cache in step.
 */
export class NatsInformer<T extends KubernetesObject> implements Informer<T>, ObjectCache<T> {
  private store = new Store<T>();
  private readonly callbacks: Record<string, ((arg: any) => void)[]> = {
    [ADD]: [],
    [UPDATE]: [],
    [DELETE]: [],
    [ERROR]: [],
    [CONNECT]: [],
  };
  private readonly stream: string;
  private readonly prefix: string;
  private readonly filter: string;
  private readonly initialTimeoutMs: number;
  private readonly heartbeatMs: number;
  private readonly minBackoffMs: number;
  private readonly maxBackoffMs: number;

  private running = false;
  /** Increased by every start and stop: a loop of an older generation ends. */
  private generation = 0;
  private everSynced = false;
  private loop: Promise<void> = Promise.resolve();
  private synced: Promise<void> = Promise.resolve();
  private resolveSynced: () => void = () => {};
  private wake: (() => void) | null = null;
  private endWatch: ((err: Error) => void) | null = null;

  constructor(
    private readonly nc: NatsConnection,
    opts: NatsInformerOptions,
  ) {
    const bucket = opts.bucket ?? "kube-objects";
    if (!/^[A-Za-z0-9_-]+$/.test(bucket)) throw new Error(`invalid bucket name: ${JSON.stringify(bucket)}`);
    this.stream = `KV_${bucket}`;
    this.prefix = `$KV.${bucket}.`;
    this.filter = this.prefix + keyFilter(opts);
    this.initialTimeoutMs = opts.initialTimeoutMs ?? 5000;
    this.heartbeatMs = opts.heartbeatMs ?? 5000;
    this.minBackoffMs = opts.minBackoffMs ?? 500;
    this.maxBackoffMs = opts.maxBackoffMs ?? 30000;
  }

  /** The subject filter of the watch, `$KV.{bucket}.{key filter}`. */
  get subjectFilter(): string {
    return this.filter;
  }

  /** Whether the cache has held a complete initial state (it stays true across restarts of the watch). */
  hasSynced(): boolean {
    return this.everSynced;
  }

  on(verb: "add" | "update" | "delete" | "change", cb: ObjectCallback<T>): void;
  on(verb: "error" | "connect", cb: ErrorCallback): void;
  on(verb: string, cb: (arg: any) => void): void {
    if (verb === CHANGE) {
      this.on(ADD, cb);
      this.on(UPDATE, cb);
      this.on(DELETE, cb);
      return;
    }
    const list = this.callbacks[verb];
    if (!list) throw new Error(`Unknown verb: ${verb}`);
    list.push(cb);
  }

  off(verb: "add" | "update" | "delete" | "change", cb: ObjectCallback<T>): void;
  off(verb: "error" | "connect", cb: ErrorCallback): void;
  off(verb: string, cb: (arg: any) => void): void {
    if (verb === CHANGE) {
      this.off(ADD, cb);
      this.off(UPDATE, cb);
      this.off(DELETE, cb);
      return;
    }
    const list = this.callbacks[verb];
    if (!list) throw new Error(`Unknown verb: ${verb}`);
    const i = list.indexOf(cb);
    if (i !== -1) list.splice(i, 1);
  }

  get(name: string, namespace?: string): T | undefined {
    return this.store.get(name, namespace || "");
  }

  list(namespace?: string): ReadonlyArray<T> {
    return this.store.list(namespace);
  }

  /**
   * Starts the watch; resolves once the cache holds the initial state (or when `stop()` is
   * called first, or the connection is closed). Never rejects: failures go to the 'error' handlers and the watch is tried
   * again. On a running informer it returns the same promise and starts nothing.
   */
  start(): Promise<void> {
    if (this.running) return this.synced;
    this.running = true;
    const gen = ++this.generation;
    let resolve!: () => void;
    this.synced = new Promise((r) => (resolve = r));
    this.resolveSynced = resolve;
    // A stop() not awaited may still be cleaning up: the new loop begins after it.
    this.loop = this.loop.then(() => this.run(gen, resolve));
    return this.synced;
  }

  /** Stops the watch and deletes its consumer; the cache keeps its objects, and `start()` resumes. */
  async stop(): Promise<void> {
    const resolve = this.resolveSynced;
    if (this.running) {
      this.running = false;
      this.generation += 1;
      this.endWatch?.(new Restart("stopped"));
      this.wake?.();
    }
    await this.loop;
    resolve();
  }

  private call(verb: string, arg: unknown): void {
    for (const cb of this.callbacks[verb].slice()) {
      try {
        cb(arg);
      } catch (err) {
        this.reportError(err);
      }
    }
  }

  private reportError(err: unknown): void {
    const handlers = this.callbacks[ERROR].slice();
    if (handlers.length === 0) {
      // Surfaced even with no handler, as a process warning on stderr.
      process.emitWarning(`kube2nats informer of ${this.filter}: ${describe(err)}`, "Kube2natsInformerError");
      return;
    }
    for (const cb of handlers) {
      try {
        cb(err);
      } catch (thrown) {
        process.emitWarning(
          `an 'error' handler of the kube2nats informer threw: ${describe(thrown)}`,
          "Kube2natsInformerError",
        );
      }
    }
  }

  private report(change: Change<T>): void {
    if (!change) return;
    this.call(change.kind, change.obj);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = () => {
        this.wake = null;
        done();
      };
    });
  }

  private async run(gen: number, resolveSynced: () => void): Promise<void> {
    const alive = () => this.generation === gen;
    if (!alive()) return;
    // The iterator is the client's queued iterator, which has a stop() its type does not show.
    const statusIter = this.nc.status() as AsyncIterable<Status> & { stop?: () => void };
    (async () => {
      for await (const s of statusIter) {
        if (!alive()) break;
        if (s.type === "disconnect") {
          this.reportError(new Error(`NATS connection lost (${s.server}); the cache is not updated until it is back`));
        } else if (s.type === "reconnect") {
          // Markers of deletions made while away may have expired: watch afresh.
          this.endWatch?.(new Restart("reconnected"));
          this.wake?.();
        }
      }
    })().catch(() => {});
    // A closed connection never comes back (the caller closed it, or its reconnect attempts ran
    // out): the informer stops, saying so, rather than retrying on it forever.
    this.nc.closed().then(() => {
      this.endWatch?.(new Restart("closed"));
      this.wake?.();
    });
    let failures = 0;
    try {
      while (alive()) {
        if (this.nc.isClosed()) {
          this.reportError(new Error("the NATS connection is closed; the informer stops"));
          this.running = false;
          this.generation += 1;
          resolveSynced();
          break;
        }
        let restartAtOnce = false;
        try {
          await this.watchOnce(alive, () => {
            failures = 0;
            resolveSynced();
          });
        } catch (err) {
          if (!alive()) break;
          if (err instanceof Restart) restartAtOnce = true;
          else this.reportError(err);
        }
        if (!alive()) break;
        if (restartAtOnce) continue;
        const base = Math.min(this.maxBackoffMs, this.minBackoffMs * 2 ** Math.min(failures, 16));
        failures += 1;
        await this.sleep(base / 2 + Math.random() * (base / 2));
      }
    } finally {
      statusIter.stop?.();
    }
  }

  /**
   * One watch: subscribes, creates the consumer, reads the initial values into a fresh store,
   * reports its difference to the cache, then applies every change until it fails or is ended.
   * Rejects with the reason it ended.
   */
  private async watchOnce(alive: () => boolean, onSynced: () => void): Promise<void> {
    let finished = false;
    let fail!: (err: Error) => void;
    const ended = new Promise<never>((_, reject) => {
      fail = (err: Error) => {
        if (finished) return;
        finished = true;
        reject(err);
      };
    });
    ended.catch(() => {});
    this.endWatch = fail;

    const inbox = createInbox();
    const name = `k2n_${nuid.next()}`;
    let jsm: JetStreamManager | null = null;
    let sub: Subscription | null = null;
    let initialTimer: ReturnType<typeof setTimeout> | null = null;
    let heartbeatTimer: ReturnType<typeof setInterval> | null = null;

    // Messages that arrive before the consumer's creation is answered wait here.
    let queue: Msg[] | null = [];
    let lastDseq = 0;
    let lastActivity = Date.now();
    let initialLeft = 0; // initial values still expected, by the creation's num_pending
    let fresh: Store<T> | null = new Store<T>(); // null once the initial values are in

    const armInitialTimer = () => {
      if (initialTimer) clearTimeout(initialTimer);
      initialTimer = setTimeout(
        () =>
          fail(
            new Error(
              `no initial value of ${this.filter} for ${this.initialTimeoutMs} ms (${initialLeft} expected); watching again`,
            ),
          ),
        this.initialTimeoutMs,
      );
    };

    const finishInitial = () => {
      if (initialTimer) clearTimeout(initialTimer);
      initialTimer = null;
      const next = fresh!;
      fresh = null;
      const changes = this.store.diff(next);
      this.store = next;
      for (const c of changes) this.report(c);
      this.everSynced = true;
      onSynced();
      this.call(CONNECT, undefined);
    };

    const apply = (m: Msg, into: Store<T> | null) => {
      if (!m.subject.startsWith(this.prefix)) return;
      const key = m.subject.slice(this.prefix.length);
      let id: { namespace: string | null; name: string };
      try {
        id = parseKey(key);
      } catch (err) {
        this.reportError(err);
        return;
      }
      const ns = id.namespace ?? "";
      if (isDeletion(m)) {
        const change = (into ?? this.store).delete(key, ns, id.name);
        if (!into) this.report(change);
        return;
      }
      let obj: T;
      try {
        obj = JSON.parse(decoder.decode(m.data));
      } catch (err) {
        this.reportError(new Error(`the value of ${key} is not JSON (${describe(err)}); skipped`));
        return;
      }
      if (obj === null || typeof obj !== "object" || Array.isArray(obj)) {
        this.reportError(new Error(`the value of ${key} is not a JSON object; skipped`));
        return;
      }
      const change = (into ?? this.store).put(key, ns, id.name, obj);
      if (!into) this.report(change);
    };

    const handle = (m: Msg) => {
      if (finished) return;
      const info = ackInfo(m.reply);
      if (!info) {
        fail(new Error(`unexpected message on the watch's inbox: ${m.subject}`));
        return;
      }
      if (info.dseq !== lastDseq + 1) {
        fail(new Error(`the watch of ${this.filter} skipped messages (consumer sequence ${info.dseq} after ${lastDseq})`));
        return;
      }
      lastDseq = info.dseq;
      if (fresh) {
        apply(m, fresh);
        initialLeft -= 1;
        if (info.pending === 0 || initialLeft <= 0) finishInitial();
        else armInitialTimer();
      } else {
        apply(m, null);
      }
    };

    const onMessage = (err: Error | null, m: Msg) => {
      if (finished) return;
      if (err) {
        fail(err);
        return;
      }
      lastActivity = Date.now();
      const h = m.headers;
      if (h && h.code > 0 && !m.reply?.startsWith("$JS.ACK.")) {
        // A status message of the consumer.
        if (h.code === 100) {
          if (m.reply) m.respond(); // flow control request
          const stalled = h.get("Nats-Consumer-Stalled");
          if (stalled) this.nc.publish(stalled);
          const lastConsumer = Number(h.get("Nats-Last-Consumer") || "0");
          if (!queue && lastConsumer > lastDseq) {
            fail(new Error(`the watch of ${this.filter} missed messages (the consumer is at ${lastConsumer}, the watch at ${lastDseq})`));
          }
          return;
        }
        fail(new Error(`the watch's consumer reported ${h.code} ${h.description}`));
        return;
      }
      if (queue) queue.push(m);
      else handle(m);
    };

    try {
      jsm = await jetstreamManager(this.nc, { checkAPI: false });
      sub = this.nc.subscribe(inbox, { callback: onMessage });
      const created = jsm.consumers.add(this.stream, {
        name,
        deliver_subject: inbox,
        filter_subject: this.filter,
        deliver_policy: DeliverPolicy.LastPerSubject,
        ack_policy: AckPolicy.None,
        replay_policy: ReplayPolicy.Instant,
        flow_control: true,
        idle_heartbeat: nanos(this.heartbeatMs),
        mem_storage: true,
        num_replicas: 1,
        inactive_threshold: nanos(30_000),
      });
      created.catch(() => {}); // its failure, if the race is already over, is of no interest
      const info = await Promise.race([created, ended]);
      initialLeft = info.num_pending;
      const waiting = queue;
      queue = null;
      if (initialLeft === 0) finishInitial();
      else armInitialTimer();
      for (const m of waiting) handle(m);
      heartbeatTimer = setInterval(() => {
        if (Date.now() - lastActivity > 3 * this.heartbeatMs) {
          fail(new Error(`missed heartbeats of the watch of ${this.filter} for ${Date.now() - lastActivity} ms`));
        }
      }, this.heartbeatMs);
      await ended;
    } finally {
      finished = true;
      this.endWatch = null;
      if (initialTimer) clearTimeout(initialTimer);
      if (heartbeatTimer) clearInterval(heartbeatTimer);
      sub?.unsubscribe();
      if (jsm && !this.nc.isClosed()) {
        // An ephemeral consumer also goes by itself, 30 s after its subscription.
        const deleting = jsm.consumers.delete(this.stream, name).catch(() => false);
        if (!alive()) await Promise.race([deleting, new Promise((r) => setTimeout(r, 1000))]);
      }
    }
  }
}

/**
 * An informer of one resource read from kube2nats' mirror, used as client-node's `makeInformer`
 * is: `on(...)`, `await start()`, `get`/`list`, `stop()`.
 */
export function makeNatsInformer<T extends KubernetesObject>(
  nc: NatsConnection,
  opts: NatsInformerOptions,
): Informer<T> & ObjectCache<T> & NatsInformer<T> {
  return new NatsInformer<T>(nc, opts);
}
