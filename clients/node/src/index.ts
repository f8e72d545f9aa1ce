// @kube2nats/client: kube2nats' object mirror as a @kubernetes/client-node informer, its event
// stream through a durable consumer, and the key contract both rest on.

export {
  ADD,
  UPDATE,
  CHANGE,
  DELETE,
  CONNECT,
  ERROR,
  NatsInformer,
  isDeletion,
  makeNatsInformer,
  type NatsInformerOptions,
} from "./informer.js";
export { natsEvents, toWatchEvent, type NatsEventsOptions, type NatsWatchEvent } from "./events.js";
export {
  escapeKeyToken,
  unescapeKeyToken,
  escapeSubjectToken,
  unescapeSubjectToken,
  objectKey,
  keyFilter,
  parseKey,
  eventSubject,
  eventFilter,
  type EventType,
  type ObjectRef,
  type ResourceRef,
} from "./keys.js";
