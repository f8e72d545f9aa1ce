// The key contract of kube2nats' object mirror and the tokens of its event subjects
// (docs/subscribers.md, docs/messages.md). One escape/unescape pair per rule; every other
// function here builds on them.

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8");

function hex(b: number): string {
  return b.toString(16).toUpperCase().padStart(2, "0");
}

function isAlnumOrDash(b: number): boolean {
  return (
    (b >= 0x41 && b <= 0x5a) || // A-Z
    (b >= 0x61 && b <= 0x7a) || // a-z
    (b >= 0x30 && b <= 0x39) || // 0-9
    b === 0x2d // -
  );
}

function escapeWith(text: string, escapeChar: string, passes: (b: number) => boolean): string {
  if (text === "") return escapeChar;
  let out = "";
  for (const b of encoder.encode(text)) {
    if (passes(b)) out += String.fromCharCode(b);
    else if (b === 0x2e) out += "_";
    else out += escapeChar + hex(b);
  }
  return out;
}

function unescapeWith(token: string, escapeChar: string): string {
  if (token === escapeChar) return "";
  if (!token.includes(escapeChar)) return token.includes("_") ? token.replaceAll("_", ".") : token;
  const bytes: number[] = [];
  for (let i = 0; i < token.length; ) {
    const code = token.charCodeAt(i);
    if (code === 0x5f /* _ */) {
      bytes.push(0x2e);
      i += 1;
    } else if (token[i] === escapeChar && /^[0-9A-Fa-f]{2}$/.test(token.slice(i + 1, i + 3))) {
      bytes.push(parseInt(token.slice(i + 1, i + 3), 16));
      i += 3;
    } else if (code < 0x80) {
      bytes.push(code);
      i += 1;
    } else {
      // Not produced by the escape rule; kept as it is rather than refused.
      const ch = String.fromCodePoint(token.codePointAt(i)!);
      bytes.push(...encoder.encode(ch));
      i += ch.length;
    }
  }
  return decoder.decode(new Uint8Array(bytes));
}

/**
 * One token of a mirror key: `[A-Za-z0-9-]` pass, `.` becomes `_`, every other byte of the
 * UTF-8 encoding `=XX` (upper-case hex), the empty string `=`.
 */
export function escapeKeyToken(text: string): string {
  return escapeWith(text, "=", isAlnumOrDash);
}

/** The inverse of {@link escapeKeyToken}: `_` is `.`, `=XX` one byte, a lone `=` the empty string. */
export function unescapeKeyToken(token: string): string {
  return unescapeWith(token, "=");
}

/**
 * One token of an event subject: `[A-Za-z0-9-:]` pass, `.` becomes `_`, every other byte `%XX`,
 * the empty string `%`.
 */
export function escapeSubjectToken(text: string): string {
  return escapeWith(text, "%", (b) => isAlnumOrDash(b) || b === 0x3a);
}

/**
 * The inverse of {@link escapeSubjectToken}; also decodes a `Kube-*` header value that holds
 * `%` (docs/messages.md: such a value is escaped as a whole by the subject rule).
 */
export function unescapeSubjectToken(token: string): string {
  return unescapeWith(token, "%");
}

/** Which resource: the parts of a key before the namespace. */
export interface ResourceRef {
  /** kube2nats' `publish.cluster`; absent or "" when it is not set. */
  cluster?: string;
  /** API group; "" is the core group. */
  group: string;
  /** API version, e.g. `v1`; `*` (in filters only) is any version. */
  version: string;
  /** The resource's plural name, e.g. `pods`. */
  plural: string;
}

/** One object: its resource, namespace (absent, null or undefined: cluster-scoped) and name. */
export interface ObjectRef extends ResourceRef {
  namespace?: string | null;
  name: string;
}

function groupToken(group: string, escape: (s: string) => string): string {
  return group === "" ? "core" : escape(group);
}

function resourceTokens(r: ResourceRef, escape: (s: string) => string, anyVersion: boolean): string[] {
  const tokens: string[] = [];
  if (r.cluster) tokens.push(escape(r.cluster));
  tokens.push(groupToken(r.group, escape));
  tokens.push(anyVersion && r.version === "*" ? "*" : escape(r.version));
  tokens.push(escape(r.plural));
  return tokens;
}

function namespaceToken(ns: string | null | undefined, escape: (s: string) => string): string {
  return ns === null || ns === undefined ? "_" : escape(ns);
}

/** The mirror key of one object: `[{cluster}.]{group}.{version}.{plural}.{namespace}.{name}`. */
export function objectKey(ref: ObjectRef): string {
  return [
    ...resourceTokens(ref, escapeKeyToken, false),
    namespaceToken(ref.namespace, escapeKeyToken),
    escapeKeyToken(ref.name),
  ].join(".");
}

/**
 * The key filter of a watch: `[{cluster}.]{group}.{version|*}.{plural}.{namespace|*}.*`
 * (namespace absent or null: every namespace and the cluster-scoped objects).
 */
export function keyFilter(ref: ResourceRef & { namespace?: string | null }): string {
  const ns = ref.namespace === undefined || ref.namespace === null ? "*" : escapeKeyToken(ref.namespace);
  return [...resourceTokens(ref, escapeKeyToken, true), ns, "*"].join(".");
}

/** Namespace and name read back from a key's last two tokens; namespace null: cluster-scoped. */
export function parseKey(key: string): { namespace: string | null; name: string } {
  const tokens = key.split(".");
  if (tokens.length < 2) throw new Error(`not a mirror key: ${JSON.stringify(key)}`);
  const ns = tokens[tokens.length - 2];
  return {
    namespace: ns === "_" ? null : unescapeKeyToken(ns),
    name: unescapeKeyToken(tokens[tokens.length - 1]),
  };
}

/** The event types of kube2nats' subjects and `Kube-Event-Type` header. */
export type EventType = "ADDED" | "MODIFIED" | "DELETED";

/**
 * The subject of one event:
 * `{prefix}.[{cluster}.]{group}.{version}.{plural}.{namespace}.{name}.{added|modified|deleted}`.
 */
export function eventSubject(ref: ObjectRef & { prefix?: string; type: EventType }): string {
  return [
    ref.prefix ?? "kube",
    ...resourceTokens(ref, escapeSubjectToken, false),
    namespaceToken(ref.namespace, escapeSubjectToken),
    escapeSubjectToken(ref.name),
    ref.type.toLowerCase(),
  ].join(".");
}

/**
 * The filter of a durable consumer of the event stream:
 * `{prefix}.[{cluster}.]{group}.{version|*}.{plural}.{namespace|*}.*.*`.
 */
export function eventFilter(ref: ResourceRef & { prefix?: string; namespace?: string | null }): string {
  const ns = ref.namespace === undefined || ref.namespace === null ? "*" : escapeSubjectToken(ref.namespace);
  return [ref.prefix ?? "kube", ...resourceTokens(ref, escapeSubjectToken, true), ns, "*", "*"].join(".");
}
