// Compiled by `npm test` (tsc --noEmit), never run: the kit's declarations stand where
// client-node's makeInformer stands, and code written against those types accepts the kit.

import * as k8s from "@kubernetes/client-node";
import type { NatsConnection } from "@nats-io/nats-core";
import {
  makeNatsInformer,
  natsEvents,
  objectKey,
  type NatsWatchEvent,
} from "../dist/index.js";

declare const nc: NatsConnection;
declare const kc: k8s.KubeConfig;

/** Code written against client-node's informer. */
async function follow(informer: k8s.Informer<k8s.V1Pod> & k8s.ObjectCache<k8s.V1Pod>): Promise<number> {
  informer.on(k8s.ADD, (pod: k8s.V1Pod) => void pod.metadata?.name);
  informer.on(k8s.UPDATE, (pod) => void pod.status);
  informer.on(k8s.CHANGE, (pod) => void pod.spec);
  informer.on(k8s.DELETE, (pod) => void pod.metadata?.resourceVersion);
  informer.on(k8s.ERROR, (err) => void err);
  informer.on(k8s.CONNECT, () => {});
  await informer.start();
  const one: k8s.V1Pod | undefined = informer.get("web-0", "shop");
  void one;
  await informer.stop();
  return informer.list("shop").length;
}

export async function both(): Promise<void> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  await follow(k8s.makeInformer(kc, "/api/v1/pods", () => core.listPodForAllNamespaces()));
  await follow(makeNatsInformer<k8s.V1Pod>(nc, { group: "", version: "v1", plural: "pods" }));
  for await (const e of natsEvents<k8s.V1Pod>(nc, { durable: "d", group: "", version: "v1", plural: "pods" })) {
    const event: NatsWatchEvent<k8s.V1Pod> = e;
    const type: "ADDED" | "MODIFIED" | "DELETED" = event.type;
    void type;
    void event.object.metadata?.name;
    event.nats.ack();
  }
  void objectKey({ group: "", version: "v1", plural: "pods", namespace: null, name: "n" });
}
