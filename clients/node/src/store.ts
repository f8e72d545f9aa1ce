// The informer's cache: objects by (namespace, name), each remembering the mirror key it came
// from. An object normally has one key; while a watch of "any version" follows a resource to a
// new version, kube2nats puts the object under the new version's key and then deletes the old
// one, so for a moment one object has two keys. The newest put is the object's current key; a
// deletion of another of its keys changes nothing the user sees.

import type { KubernetesObject } from "@kubernetes/client-node";

interface Slot<T> {
  /** The current key, whose value `obj` is. */
  key: string;
  obj: T;
  /** The object's other keys (an any-version move under way), oldest first. */
  others?: Map<string, T>;
}

/** What a change did to the store as the user sees it. */
export type Change<T> =
  | { kind: "add"; obj: T }
  | { kind: "update"; obj: T; old: T }
  | { kind: "delete"; obj: T }
  | null;

function resourceVersion(obj: KubernetesObject): string | undefined {
  const rv = obj?.metadata?.resourceVersion;
  return rv === undefined || rv === null ? undefined : String(rv);
}

/** The rule of client-node's cache: same when the old object has a resourceVersion and the new one has the same. */
export function sameVersion(a: KubernetesObject, b: KubernetesObject): boolean {
  const ra = resourceVersion(a);
  return ra !== undefined && ra === resourceVersion(b);
}

export class Store<T extends KubernetesObject> {
  private readonly byNamespace = new Map<string, Map<string, Slot<T>>>();
  private count = 0;

  get size(): number {
    return this.count;
  }

  get(name: string, namespace: string): T | undefined {
    return this.byNamespace.get(namespace)?.get(name)?.obj;
  }

  list(namespace?: string): T[] {
    const out: T[] = [];
    if (namespace) {
      for (const slot of this.byNamespace.get(namespace)?.values() ?? []) out.push(slot.obj);
      return out;
    }
    for (const slots of this.byNamespace.values()) for (const slot of slots.values()) out.push(slot.obj);
    return out;
  }

  *entries(): IterableIterator<[string, string, T]> {
    for (const [ns, slots] of this.byNamespace) for (const [name, slot] of slots) yield [ns, name, slot.obj];
  }

  /** A put of `obj` under `key`, the key of (namespace, name). */
  put(key: string, namespace: string, name: string, obj: T): Change<T> {
    let slots = this.byNamespace.get(namespace);
    if (!slots) {
      slots = new Map();
      this.byNamespace.set(namespace, slots);
    }
    const slot = slots.get(name);
    if (!slot) {
      slots.set(name, { key, obj });
      this.count += 1;
      return { kind: "add", obj };
    }
    const old = slot.obj;
    if (slot.key !== key) {
      slot.others ??= new Map();
      slot.others.delete(key);
      slot.others.set(slot.key, slot.obj);
      slot.key = key;
    }
    slot.obj = obj;
    return sameVersion(old, obj) ? null : { kind: "update", obj, old };
  }

  /** A deletion of `key`, the key of (namespace, name). A key the store does not hold changes nothing. */
  delete(key: string, namespace: string, name: string): Change<T> {
    const slots = this.byNamespace.get(namespace);
    const slot = slots?.get(name);
    if (!slots || !slot) return null;
    if (slot.key !== key) {
      if (slot.others?.delete(key) && slot.others.size === 0) slot.others = undefined;
      return null;
    }
    if (slot.others && slot.others.size > 0) {
      // The current key went while another key of the object remains: that one is current.
      const [otherKey, otherObj] = [...slot.others].pop()!;
      slot.others.delete(otherKey);
      if (slot.others.size === 0) slot.others = undefined;
      const old = slot.obj;
      slot.key = otherKey;
      slot.obj = otherObj;
      return sameVersion(old, otherObj) ? null : { kind: "update", obj: otherObj, old };
    }
    slots.delete(name);
    if (slots.size === 0) this.byNamespace.delete(namespace);
    this.count -= 1;
    return { kind: "delete", obj: slot.obj };
  }

  /**
   * The changes that turn `this` into `fresh`, deletions first (as client-node reports a
   * relist's): objects missing from `fresh` are deleted, new ones added, and those whose
   * resourceVersion differs updated.
   */
  diff(fresh: Store<T>): NonNullable<Change<T>>[] {
    const changes: NonNullable<Change<T>>[] = [];
    for (const [ns, name, obj] of this.entries()) {
      if (fresh.get(name, ns) === undefined) changes.push({ kind: "delete", obj });
    }
    for (const [ns, name, obj] of fresh.entries()) {
      const old = this.get(name, ns);
      if (old === undefined) changes.push({ kind: "add", obj });
      else if (!sameVersion(old, obj)) changes.push({ kind: "update", obj, old });
    }
    return changes;
  }
}
