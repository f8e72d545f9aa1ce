// kube2nats' event stream (every change, docs/messages.md) read through a JetStream durable
// consumer, as an async iterable of watch events `{ type, object }`.

import type { KubernetesObject } from "@kubernetes/client-node";
import type { NatsConnection } from "@nats-io/nats-core";
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, JetStreamApiCodes, JetStreamApiError } from "@nats-io/jetstream";
import type { ConsumerMessages, JetStreamManager, JsMsg } from "@nats-io/jetstream";
import { eventFilter, type EventType } from "./keys.js";

export interface NatsEventsOptions {
  /** The event stream; default `KUBE`. */
  stream?: string;
  /** kube2nats' `publish.subject_prefix`; default `kube`. */
  prefix?: string;
  /** The durable consumer's name: a later run with the same name resumes after the last ack. */
  durable: string;
  /** kube2nats' `publish.cluster`, when set. */
  cluster?: string;
  /** API group; "" is the core group. */
  group: string;
  /** API version, or `*` for any. */
  version: string;
  /** The resource's plural name. */
  plural: string;
  /** One namespace; absent: all of them (and cluster-scoped objects). */
  namespace?: string;
  /** Where a new durable starts: `all` (default) the oldest event the stream holds, `new` the next one. */
  deliver?: "all" | "new";
  /** How many recent `Nats-Msg-Id`s are remembered to drop a redelivery; default 10,000. */
  dedupWindow?: number;
  /** Errors met on the way (the iteration goes on); default: a process warning on stderr. */
  onError?: (err: Error) => void;
  /** Ends the iteration when aborted. */
  signal?: AbortSignal;
  /** Most messages pulled ahead of the loop; default 256. */
  maxMessages?: number;
  /** First delay after a failure, doubling up to `maxBackoffMs`; default 500 ms. */
  minBackoffMs?: number;
  /** Longest delay between two attempts; default 30000 ms. */
  maxBackoffMs?: number;
}

/** One change, shaped as a watch event of the API server, with where it came from. */
export interface NatsWatchEvent<T extends KubernetesObject = KubernetesObject> {
  type: EventType;
  object: T;
  nats: {
    subject: string;
    /** The stream sequence of the event's message. */
    seq: number;
    /** `Nats-Msg-Id`: `{watch}:{uid}:{resourceVersion}[:DELETED]`. */
    msgId?: string;
    /** Delivered before and not acknowledged then. */
    redelivered: boolean;
    /**
     * Acknowledges the event now (it is otherwise acknowledged when the loop asks for the next
     * one): call it before leaving the loop with `break` after handling the event.
     */
    ack(): void;
  };
}

const decoder = new TextDecoder();
const NAK = new TextEncoder().encode("-NAK");
const TYPES = new Set(["ADDED", "MODIFIED", "DELETED"]);

/** A bounded set of the most recent ids, oldest dropped first. */
class RecentIds {
  private readonly ids = new Set<string>();
  constructor(private readonly limit: number) {}
  has(id: string): boolean {
    return this.ids.has(id);
  }
  add(id: string): void {
    if (this.limit <= 0) return;
    this.ids.delete(id);
    this.ids.add(id);
    if (this.ids.size > this.limit) this.ids.delete(this.ids.values().next().value as string);
  }
}

/** The watch event of one message: type from `Kube-Event-Type`, object from the payload. */
export function toWatchEvent<T extends KubernetesObject>(m: Pick<JsMsg, "headers" | "data" | "subject">): {
  type: EventType;
  object: T;
} {
  const payload = JSON.parse(decoder.decode(m.data));
  if (payload === null || typeof payload !== "object" || Array.isArray(payload)) {
    throw new Error(`the payload of ${m.subject} is not a JSON object`);
  }
  const wrapped =
    typeof payload.type === "string" && payload.object !== null && typeof payload.object === "object";
  const object = (wrapped ? payload.object : payload) as T;
  let type = m.headers?.get("Kube-Event-Type") || (wrapped ? payload.type : "");
  if (!TYPES.has(type)) {
    // The subject's last token: added, modified, deleted.
    const last = m.subject.slice(m.subject.lastIndexOf(".") + 1).toUpperCase();
    if (!TYPES.has(last)) throw new Error(`no event type on ${m.subject}`);
    type = last;
  }
  return { type: type as EventType, object };
}

function warn(err: Error): void {
  process.emitWarning(`kube2nats events: ${err.message}`, "Kube2natsEventsError");
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

/** Creates the durable when missing (and sets its filter when it differs). */
async function ensureDurable(
  jsm: JetStreamManager,
  stream: string,
  durable: string,
  filter: string,
  deliver: "all" | "new",
): Promise<void> {
  try {
    const info = await jsm.consumers.info(stream, durable);
    if (info.config.filter_subject !== filter) {
      await jsm.consumers.update(stream, durable, { filter_subject: filter, filter_subjects: undefined });
    }
    return;
  } catch (err) {
    if (!(err instanceof JetStreamApiError) || err.apiError().err_code !== JetStreamApiCodes.ConsumerNotFound) throw err;
  }
  await jsm.consumers.add(stream, {
    durable_name: durable,
    filter_subject: filter,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: deliver === "new" ? DeliverPolicy.New : DeliverPolicy.All,
  });
}

/**
 * The events of one resource from kube2nats' event stream, through the durable consumer
 * `durable` (created when missing: explicit acks, the durable filter of the contract).
 *
 * Each event is acknowledged when the loop asks for the next one, that is after the loop's
 * body for it has run (or earlier by `event.nats.ack()`): at least once to the body, and a
 * later run with the same durable resumes after the last event acknowledged. Leaving the loop
 * (`break`, `return`, a throw) leaves the event it was on unacknowledged unless the body called
 * `event.nats.ack()`: it is given back (nak) with the events received but not yet yielded, and
 * the next run receives them first. A message whose `Nats-Msg-Id` was already handled in this
 * run (a redelivery) is acknowledged and not yielded again. Failures (NATS away, the consumer
 * deleted, a payload that is not JSON) go to `onError` and the iteration goes on, the consumer
 * created again as needed; it ends only by leaving the loop or by `signal`.
 */
export async function* natsEvents<T extends KubernetesObject = KubernetesObject>(
  nc: NatsConnection,
  opts: NatsEventsOptions,
): AsyncGenerator<NatsWatchEvent<T>, void, undefined> {
  const stream = opts.stream ?? "KUBE";
  const filter = eventFilter(opts);
  const seen = new RecentIds(opts.dedupWindow ?? 10_000);
  const report = (err: unknown) => {
    try {
      (opts.onError ?? warn)(asError(err));
    } catch (thrown) {
      warn(asError(thrown));
    }
  };
  const minBackoff = opts.minBackoffMs ?? 500;
  const maxBackoff = opts.maxBackoffMs ?? 30_000;
  const signal = opts.signal;
  let failures = 0;
  let messages: ConsumerMessages | null = null;
  let iterator: AsyncIterator<JsMsg> | null = null;
  let handling: { m: JsMsg; acked: () => boolean } | null = null;
  // Stops the consumer's messages and gives back (nak) the one the loop left unfinished and
  // those the client had received for the loop: the next run gets them first, in order.
  const giveBack = async () => {
    const current = messages;
    const it = iterator;
    const left = handling;
    messages = null;
    iterator = null;
    handling = null;
    if (!current) return;
    current.stop();
    const held: JsMsg[] = [];
    if (left && !left.acked()) held.push(left.m);
    if (it) {
      try {
        for (;;) {
          const r = await it.next();
          if (r.done) break;
          held.push(r.value);
        }
      } catch {
        // The iterator failed: what it held comes back after the ack wait.
      }
    }
    // One at a time, each confirmed: the server queues them for redelivery in this order.
    for (const m of held) {
      if (nc.isClosed()) break; // the server redelivers after the ack wait
      // The message's reply subject: the client's message has it, its type does not show it.
      const reply = (m as JsMsg & { reply?: string }).reply;
      try {
        if (reply) await nc.request(reply, NAK, { timeout: 2000 });
        else m.nak();
      } catch {
        break;
      }
    }
  };
  let wake: (() => void) | null = null;
  const onAbort = () => {
    messages?.stop();
    wake?.();
  };
  signal?.addEventListener("abort", onAbort);
  try {
    while (!signal?.aborted) {
      if (nc.isClosed()) {
        // It never comes back: the iteration ends.
        report(new Error("the NATS connection is closed; the events end"));
        break;
      }
      try {
        const jsm = await jetstreamManager(nc, { checkAPI: false });
        await ensureDurable(jsm, stream, opts.durable, filter, opts.deliver ?? "all");
        const consumer = await jetstream(nc).consumers.get(stream, opts.durable);
        messages = await consumer.consume({
          max_messages: opts.maxMessages ?? 256,
          abort_on_missing_resource: true,
        });
        if (signal?.aborted) break;
        const current = messages;
        (async () => {
          for await (const n of current.status()) {
            if (n.type === "heartbeats_missed") report(new Error(`missed ${n.count} heartbeats of the durable ${opts.durable}`));
            else if (n.type === "consumer_deleted") report(new Error(`the durable ${opts.durable} was deleted (${n.description})`));
            else if (n.type === "exceeded_limits") report(new Error(`the durable ${opts.durable}: ${n.description}`));
          }
        })().catch(() => {});
        // Read by hand, not with for-await: leaving the loop must not drop the messages the
        // client holds, which are given back (nak) for the next run.
        iterator = current[Symbol.asyncIterator]();
        for (;;) {
          const r = await iterator.next();
          if (r.done) break;
          const m = r.value;
          if (signal?.aborted) {
            handling = { m, acked: () => false };
            break;
          }
          failures = 0;
          const id = m.headers?.get("Nats-Msg-Id") || undefined;
          if (id && seen.has(id)) {
            m.ack();
            continue;
          }
          let event: { type: EventType; object: T };
          try {
            event = toWatchEvent<T>(m);
          } catch (err) {
            // Never an event: dropped for good, so it does not come back after every ack wait.
            report(new Error(`stream sequence ${m.seq}: ${asError(err).message}; terminated`));
            m.term();
            continue;
          }
          let acked = false;
          const ack = () => {
            if (acked) return;
            acked = true;
            m.ack();
            if (id) seen.add(id);
          };
          handling = { m, acked: () => acked };
          yield {
            ...event,
            nats: { subject: m.subject, seq: m.seq, msgId: id, redelivered: m.redelivered, ack },
          };
          handling = null;
          ack();
        }
        if (signal?.aborted) break;
        report(new Error(`the durable ${opts.durable}'s messages ended; consuming again`));
      } catch (err) {
        if (signal?.aborted) break;
        report(err);
      } finally {
        await giveBack();
      }
      const base = Math.min(maxBackoff, minBackoff * 2 ** Math.min(failures, 16));
      failures += 1;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, base / 2 + Math.random() * (base / 2));
        function done() {
          clearTimeout(timer);
          wake = null;
          resolve();
        }
        wake = done;
        if (signal?.aborted) done();
      });
    }
  } finally {
    signal?.removeEventListener("abort", onAbort);
    await giveBack();
    // The acks are sent without waiting; a flush has the server hold them before the caller
    // goes on (and, say, closes the connection).
    if (!nc.isClosed()) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        nc.flush().catch(() => {}),
        new Promise<void>((r) => (timer = setTimeout(r, 2000))),
      ]);
      clearTimeout(timer);
    }
  }
}
