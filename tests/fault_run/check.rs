//! Judging a fault run: what the subscriber received against what the simulated API server
//! did, message by message and object by object.

use std::collections::HashSet;

use super::*;

/// The result of reading the whole stream.
pub(super) struct Checked {
    pub(super) histories: HashMap<String, History>,
    pub(super) last_sequence: u64,
    pub(super) problems: Vec<String>,
}

impl Run {
    /// Reads the whole stream and checks it against what the driver did and the simulator's
    /// final state; `problems` is empty when the promise holds.
    pub(super) async fn check(&self, js: &async_nats::jetstream::Context) -> Checked {
        let mut problems = Vec::new();
        let failed = |why: &str| Checked {
            histories: HashMap::new(),
            last_sequence: 0,
            problems: vec![why.to_owned()],
        };
        let Ok(mut stream) = js.get_stream("KUBE").await else {
            return failed("no stream yet");
        };
        let Ok(info) = stream.info().await else {
            return failed("stream info unavailable");
        };
        let by_uid: HashMap<&str, &Created> =
            self.created.iter().map(|c| (c.uid.as_str(), c)).collect();
        let (first, last) = (info.state.first_sequence, info.state.last_sequence);
        let mut seen = HashSet::new();
        let mut histories: HashMap<String, History> = HashMap::new();
        for seq in first..=last {
            let Ok(m) = stream.get_raw_message(seq).await else {
                problems.push(format!("cannot read message {seq}"));
                continue;
            };
            let h = |k: &str| {
                m.headers
                    .get(k)
                    .map(|v| v.as_str().to_owned())
                    .unwrap_or_default()
            };
            let (uid, rv_text, t) = (
                h("Kube-Uid"),
                h("Kube-Resource-Version"),
                h("Kube-Event-Type"),
            );
            let Some(created) = by_uid.get(uid.as_str()) else {
                problems.push(format!(
                    "seq {seq}: uid {uid:?} was never created ({} {rv_text} {t})",
                    m.subject
                ));
                continue;
            };
            problems.extend(
                message_disagreements(&m, created, &uid, &rv_text, &t)
                    .into_iter()
                    .map(|p| format!("seq {seq} ({uid} {rv_text} {t}): {p}")),
            );
            if !seen.insert((uid.clone(), rv_text.clone(), t.clone())) {
                problems.push(format!("stored twice: {uid} {rv_text} {t} (seq {seq})"));
            }
            let rv: u64 = rv_text.parse().unwrap_or(0);
            let history = histories.entry(uid.clone()).or_default();
            // A DELETED synthesized by a relist carries the last published version, so it may equal it.
            let synthesized_delete = t == "DELETED" && h("Kube-Synthesized") == "relist";
            if history.count > 0
                && (rv < history.last_rv || (rv == history.last_rv && !synthesized_delete))
            {
                problems.push(format!(
                    "order broken for {uid}: {t} {rv} after {} {}",
                    history.last_type, history.last_rv
                ));
            }
            history.last_rv = rv;
            history.last_type = t;
            history.count += 1;
            if judged_by_content(created.collection) {
                history.last_object = serde_json::from_slice::<serde_json::Value>(&m.payload)
                    .ok()
                    .map(|p| p["object"].clone());
            }
        }
        let requests = self.sim.requests();
        for obj in &self.created {
            problems.extend(self.final_state_problem(obj, histories.get(&obj.uid), &requests));
        }
        Checked {
            histories,
            last_sequence: last,
            problems,
        }
    }

    /// What is wrong with the last message about `obj`, if anything.
    pub(super) fn final_state_problem(
        &self,
        obj: &Created,
        history: Option<&History>,
        requests: &[RequestRecord],
    ) -> Option<String> {
        let c = obj.collection;
        let (name, uid) = (&obj.name, &obj.uid);
        let current = self
            .sim
            .get(c.resource, Some(c.namespace), name)
            .filter(|o| o["metadata"]["uid"] == uid.as_str());
        match (current, history) {
            (Some(o), Some(h)) if judged_by_content(c) => {
                let published = h.last_object.as_ref().map(content);
                (h.last_type == "DELETED" || published.as_ref() != Some(&content(&o))).then(|| {
                    format!(
                        "{}/{}/{name} ({uid}): last message {} {} does not carry the final content (at {})",
                        c.resource, c.namespace, h.last_type, h.last_rv, rv(&o)
                    )
                })
            }
            (Some(o), Some(h)) => {
                let final_rv: u64 = rv(&o).parse().unwrap();
                (h.last_type == "DELETED" || h.last_rv != final_rv).then(|| {
                    format!(
                        "{}/{}/{name} ({uid}): last message {} {} but the object is at {final_rv}",
                        c.resource, c.namespace, h.last_type, h.last_rv
                    )
                })
            }
            (Some(o), None) => Some(format!(
                "{}/{}/{name} ({uid}) at {} was never published",
                c.resource,
                c.namespace,
                rv(&o)
            )),
            (None, None) => {
                let deleted = obj.deleted_rv.unwrap_or(u64::MAX);
                (!relist_skipped(requests, c.path, obj.created_rv, deleted)).then(|| {
                    format!(
                        "{}/{}/{name} ({uid}), created at {} and deleted at {deleted}, was never published, and no relist after a 410 explains it",
                        c.resource, c.namespace, obj.created_rv
                    )
                })
            }
            (None, Some(h)) if h.last_type == "DELETED" => None,
            (None, Some(h)) => Some(format!(
                "{}/{}/{name} ({uid}) is deleted but its last message is {} {}",
                c.resource, c.namespace, h.last_type, h.last_rv
            )),
        }
    }
}

/// Whether kube2nats can have missed an object that lived from revision `created` to `deleted`
/// in the collection at `path`: only if it never watched those revisions, because its first list
/// came after them, or because a watch from before `created` was answered 410 and the relist that
/// followed was served after `deleted`.
pub(super) fn relist_skipped(
    requests: &[RequestRecord],
    path: &str,
    created: u64,
    deleted: u64,
) -> bool {
    // Until the first list, everything is unseen.
    let mut unseen_since: Option<u64> = Some(0);
    for r in requests.iter().filter(|r| r.path == path) {
        if r.is_watch() {
            let from = r
                .param("resourceVersion")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if r.expired && from < created {
                unseen_since = Some(from);
            }
        } else if let (Some(listed_at), None) = (r.served_revision, r.param("continue")) {
            if unseen_since.is_some() && listed_at >= deleted {
                return true;
            }
            unseen_since = None;
        }
    }
    false
}

/// Where the message's headers, payload and subject disagree with each other or with the object.
pub(super) fn message_disagreements(
    m: &async_nats::jetstream::message::StreamMessage,
    created: &Created,
    uid: &str,
    rv: &str,
    t: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    let header = |k: &str| m.headers.get(k).map(|v| v.as_str().to_owned());
    let payload: serde_json::Value = match serde_json::from_slice(&m.payload) {
        Ok(p) => p,
        Err(e) => return vec![format!("payload is not JSON: {e}")],
    };
    let meta = &payload["object"]["metadata"];
    if payload["type"] != t {
        out.push(format!("payload type {} vs header {t}", payload["type"]));
    }
    if meta["uid"] != uid {
        out.push(format!("payload uid {} vs header {uid}", meta["uid"]));
    }
    if meta["resourceVersion"] != rv {
        out.push(format!(
            "payload resourceVersion {} vs header {rv}",
            meta["resourceVersion"]
        ));
    }
    if meta["name"] != created.name.as_str()
        || header("Kube-Name").as_deref() != Some(created.name.as_str())
    {
        out.push(format!(
            "name: payload {}, header {:?}, created as {}",
            meta["name"],
            header("Kube-Name"),
            created.name
        ));
    }
    // Each collection's watch is named after its resource (see `WATCHES`).
    let watch = created.collection.resource;
    let msg_id = match t {
        "DELETED" => format!("{watch}:{uid}:{rv}:DELETED"),
        _ => format!("{watch}:{uid}:{rv}"),
    };
    if header("Nats-Msg-Id") != Some(msg_id) {
        out.push(format!("Nats-Msg-Id {:?}", header("Nats-Msg-Id")));
    }
    let c = created.collection;
    let subject = format!(
        "kube.{}.{}.{}.{}",
        c.subject,
        c.namespace,
        created.name,
        t.to_lowercase()
    );
    if m.subject.as_str() != subject {
        out.push(format!("subject {} (expected {subject})", m.subject));
    }
    out
}
