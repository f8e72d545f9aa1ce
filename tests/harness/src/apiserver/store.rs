//! The object store: current objects, one global revision, and a bounded change history.
//!
//! This plays the part of etcd plus the API server's watch cache. One revision counter is shared
//! by every resource (as etcd's is), so resource versions of different kinds interleave the way
//! clients see them on a real cluster. The history is a ring buffer of `history_limit` changes:
//! watches resume from it, and paged lists rebuild the state at an older revision by undoing the
//! changes made since. What has fallen out of the ring (or was dropped by [`Store::compact`]) can no
//! longer be served, and requests for it get 410 Expired, exactly the condition kube2nats must
//! survive.
//!
//! Watches register a channel here; [`Store::apply`] fans every change out to them while holding
//! the store's lock, so the order on each watch is the revision order and a watch that registers
//! under the same lock it used to read history can neither miss nor repeat a change.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::fidelity::Fidelity;
use super::resources::{Crds, ResourceType};
use super::status::ApiError;

/// The kind of change, spelled as in watch events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    /// Object created.
    Added,
    /// Object replaced.
    Modified,
    /// Object removed.
    Deleted,
}

/// One change in the history.
#[derive(Debug, Clone)]
pub struct Change {
    /// Revision this change created.
    pub revision: u64,
    /// Resource type of the object.
    pub resource: &'static ResourceType,
    /// Change type.
    pub change_type: ChangeType,
    /// The object after the change; for a delete, the last state with the deletion's revision.
    pub object: Value,
    /// The object before the change (absent for a create); watches need it to tell when an
    /// object leaves a selector, and lists need it to undo the change.
    pub previous: Option<Value>,
}

/// Store key: (resource plural, namespace or "" for cluster-scoped, name). Its order is the
/// namespace/name order the real server lists and pages in.
pub type Key = (&'static str, String, String);

/// A message to one open watch. Sent under the store lock, so it is ordered with changes.
#[derive(Debug, Clone)]
pub enum WatchMsg {
    /// A change of a resource the watch follows (still to be filtered by its selectors).
    Change(Arc<Change>),
    /// Send a BOOKMARK at this revision, if the watch allowed bookmarks.
    Bookmark(u64),
    /// Misbehave on purpose.
    Fault(WatchFault),
    /// Write these bytes as they are (the caller supplies any newline) and keep going.
    Raw(bytes::Bytes),
}

/// Faults injected into open watch streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchFault {
    /// Abort the connection now, without the final chunk.
    Drop,
    /// Write half of the next line, then abort.
    DropMidLine,
    /// Write half of the next line, then end the body cleanly.
    Truncate,
    /// Write a line that is not JSON and keep going.
    Garbage,
    /// Write nothing more and never end: a half-open connection, as the client sees it.
    Hang,
}

/// A bound on one watch's queued changes, shared by the store (which counts what it queues) and
/// the watch task (which counts what it takes).
#[derive(Debug)]
pub struct Backlog {
    pending: std::sync::atomic::AtomicUsize,
    limit: usize,
    terminated: std::sync::atomic::AtomicBool,
}

impl Backlog {
    /// One change taken from the queue; whether the watch has been terminated meanwhile.
    pub fn take_one(&self) -> bool {
        use std::sync::atomic::Ordering;
        let _ = self
            .pending
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        self.terminated.load(Ordering::SeqCst)
    }

    /// One more change queued; false once that is over the limit (the watch is then terminated).
    fn queue_one(&self) -> bool {
        use std::sync::atomic::Ordering;
        if self.pending.fetch_add(1, Ordering::SeqCst) >= self.limit {
            self.terminated.store(true, Ordering::SeqCst);
            return false;
        }
        true
    }
}

struct Watcher {
    resource: &'static str,
    tx: mpsc::UnboundedSender<WatchMsg>,
    backlog: Option<Arc<Backlog>>,
}

/// Current objects, the global revision and the history.
pub struct Store {
    objects: BTreeMap<Key, Value>,
    revision: u64,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// Every change with a revision above this one is still in `history`.
    history_start: u64,
    watchers: Vec<Watcher>,
    /// Watches terminated for exceeding their backlog limit.
    terminated_watches: usize,
    /// Which CRDs are deleted, and the versions of each.
    crds: Crds,
    /// What discovery shows while it is held behind the CRDs ([`Store::hold_discovery`]).
    discovery_held: Option<Crds>,
    /// The revision at which each CRD created again was established: its watch cache starts
    /// there, so a watch from an older version gets 410, as from kube-apiserver.
    established: HashMap<&'static str, u64>,
    /// Where the store does what kube-apiserver does rather than the short form.
    pub(super) fidelity: Fidelity,
}

/// Current UTC time as RFC 3339 with second precision, like `metav1.Time`.
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Removes `apiVersion` and `kind`: list items on the wire do not carry them.
pub fn strip_type_meta(mut obj: Value) -> Value {
    if let Some(map) = obj.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
    }
    obj
}

fn set_rv(obj: &mut Value, revision: u64) {
    obj["metadata"]["resourceVersion"] = json!(revision.to_string());
}

impl Store {
    /// An empty store. The revision starts at 1: a fresh cluster has already written something.
    pub fn new(history_limit: usize, fidelity: Fidelity) -> Self {
        Store {
            objects: BTreeMap::new(),
            revision: 1,
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            history_start: 1,
            watchers: Vec::new(),
            terminated_watches: 0,
            crds: Crds::default(),
            discovery_held: None,
            established: HashMap::new(),
            fidelity,
        }
    }

    /// The current global revision.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The oldest revision from which the history can still replay every later change.
    pub fn history_start(&self) -> u64 {
        self.history_start
    }

    /// Which CRDs are deleted, and the versions of each.
    pub fn crds(&self) -> &Crds {
        &self.crds
    }

    /// What discovery shows: the CRDs, or what they were when discovery was held.
    pub fn discovered(&self) -> &Crds {
        self.discovery_held.as_ref().unwrap_or(&self.crds)
    }

    /// Discovery keeps showing the CRDs as they are now (`true`), or follows them again.
    pub fn hold_discovery(&mut self, held: bool) {
        self.discovery_held = held.then(|| self.crds.clone());
    }

    /// Deletes the CRD of `rt` as kube-apiserver does: every object is deleted first (a DELETED
    /// event each, to every watch), then the watches of the resource end cleanly and it is no
    /// longer served (gone from discovery; its paths answer 404). Returns how many objects went.
    pub fn delete_crd(&mut self, rt: &'static ResourceType) -> usize {
        let keys: Vec<Key> = self
            .objects
            .range((rt.plural, String::new(), String::new())..)
            .take_while(|(k, _)| k.0 == rt.plural)
            .map(|(k, _)| k.clone())
            .collect();
        for (_, namespace, name) in &keys {
            let _ = self.delete(rt, Some(namespace), name);
        }
        // Dropping a watch's sender ends its stream once it has written what it was sent.
        self.watchers.retain(|w| w.resource != rt.plural);
        self.crds.unserved.insert(rt.plural);
        keys.len()
    }

    /// Creates the CRD of `rt` again: the resource is served (empty) from now on.
    pub fn create_crd(&mut self, rt: &'static ResourceType) {
        self.crds.unserved.remove(rt.plural);
        self.established.insert(rt.plural, self.revision);
    }

    /// Updates the CRD of `rt` to serve `versions` (of one storage: the objects keep their uid
    /// and resourceVersion, and read as the version asked for). As kube-apiserver does on any
    /// change to a CRD's spec, its storage is rebuilt: the update is a write (the revision moves
    /// on), the resource's watches end cleanly, and the new watch caches start at the update, so
    /// a watch from an older resourceVersion gets 410 Expired.
    pub fn set_crd_versions(&mut self, rt: &'static ResourceType, versions: &[&'static str]) {
        self.revision += 1;
        self.crds.versions.insert(rt.plural, versions.to_vec());
        self.watchers.retain(|w| w.resource != rt.plural);
        self.established.insert(rt.plural, self.revision);
    }

    /// The oldest revision a watch of `rt` can start from: the history's start, or for a CRD
    /// created again the revision it was established at (its watch cache is new).
    pub fn watch_start(&self, rt: &'static ResourceType) -> u64 {
        let established = self.established.get(rt.plural).copied().unwrap_or(0);
        self.history_start.max(established)
    }

    /// Forgets all history: only the current revision can be watched or paged from.
    pub fn compact(&mut self) {
        self.history.clear();
        self.history_start = self.revision;
    }

    fn key(rt: &'static ResourceType, namespace: Option<&str>, name: &str) -> Key {
        let ns = if rt.namespaced {
            namespace.unwrap_or("default")
        } else {
            ""
        };
        (rt.plural, ns.to_string(), name.to_string())
    }

    /// The stored object, with `apiVersion` and `kind`.
    pub fn get(
        &self,
        rt: &'static ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let mut obj = self.objects.get(&Self::key(rt, namespace, name)).cloned()?;
        // Read as the version asked for (a CRD serving several).
        obj["apiVersion"] = json!(rt.api_version());
        Some(obj)
    }

    /// Records a change, bumps nothing (the caller did), and fans it out to watches.
    fn apply(&mut self, change: Change) {
        let change = Arc::new(change);
        self.history.push_back(change.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.history_start = old.revision;
            }
        }
        let resource = change.resource.plural;
        let mut terminated = 0;
        self.watchers.retain(|w| {
            if w.resource != resource {
                return true;
            }
            if w.backlog.as_ref().is_some_and(|b| !b.queue_one()) {
                terminated += 1;
                return false;
            }
            w.tx.send(WatchMsg::Change(change.clone())).is_ok()
        });
        self.terminated_watches += terminated;
    }

    /// Creates an object. Fills in uid, resourceVersion, creationTimestamp, namespace and the
    /// type meta; honours `metadata.generateName`.
    pub fn create(
        &mut self,
        rt: &'static ResourceType,
        namespace: Option<&str>,
        mut obj: Value,
    ) -> Result<Value, ApiError> {
        if !self.crds.serves(rt) {
            return Err(ApiError::unknown_path());
        }
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request was not a JSON object",
            ));
        }
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        let name = match obj["metadata"]["name"].as_str() {
            Some(name) if !name.is_empty() => name.to_string(),
            _ => match obj["metadata"]["generateName"].as_str() {
                Some(prefix) => {
                    let suffix = uuid::Uuid::new_v4().simple().to_string();
                    format!("{prefix}{}", &suffix[..5])
                }
                None => {
                    return Err(ApiError::invalid(
                        rt.kind,
                        "metadata.name",
                        "Required value: name or generateName is required",
                    ))
                }
            },
        };
        let ns = match (rt.namespaced, namespace, obj["metadata"]["namespace"].as_str()) {
            (false, _, _) => None,
            (true, Some(path_ns), Some(body_ns)) if path_ns != body_ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            (true, Some(ns), _) | (true, None, Some(ns)) => Some(ns.to_string()),
            (true, None, None) => Some("default".to_string()),
        };
        self.admit_namespace(rt, ns.as_deref())?;
        let key = Self::key(rt, ns.as_deref(), &name);
        if self.objects.contains_key(&key) {
            return Err(ApiError::already_exists(rt.plural, rt.group, &name));
        }
        self.revision += 1;
        obj["apiVersion"] = json!(rt.api_version());
        obj["kind"] = json!(rt.kind);
        let meta = &mut obj["metadata"];
        meta["name"] = json!(name);
        if let Some(ns) = &ns {
            meta["namespace"] = json!(ns);
        } else if let Some(map) = meta.as_object_mut() {
            map.remove("namespace");
        }
        meta["uid"] = json!(uuid::Uuid::new_v4().to_string());
        meta["creationTimestamp"] = json!(now_rfc3339());
        if keeps_generation(rt) {
            meta["generation"] = json!(1);
        }
        if let Some(map) = meta.as_object_mut() {
            map.remove("generateName");
        }
        set_rv(&mut obj, self.revision);
        self.objects.insert(key, obj.clone());
        self.apply(Change {
            revision: self.revision,
            resource: rt,
            change_type: ChangeType::Added,
            object: obj.clone(),
            previous: None,
        });
        Ok(obj)
    }

    /// Replaces an object through `f`; identity fields (name, namespace, uid, creationTimestamp,
    /// type meta) are kept whatever `f` does. An update that changes nothing is a no-op and does
    /// not bump the revision, as on a real server.
    pub fn update(
        &mut self,
        rt: &'static ResourceType,
        namespace: Option<&str>,
        name: &str,
        f: impl FnOnce(&mut Value),
    ) -> Result<Value, ApiError> {
        let key = Self::key(rt, namespace, name);
        let previous = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt.plural, rt.group, name))?;
        let mut obj = previous.clone();
        f(&mut obj);
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request was not a JSON object",
            ));
        }
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        obj["apiVersion"] = previous["apiVersion"].clone();
        obj["kind"] = previous["kind"].clone();
        for field in ["name", "namespace", "uid", "creationTimestamp"] {
            match previous["metadata"].get(field) {
                Some(v) => obj["metadata"][field] = v.clone(),
                None => {
                    if let Some(map) = obj["metadata"].as_object_mut() {
                        map.remove(field);
                    }
                }
            }
        }
        if keeps_generation(rt) {
            let generation = previous["metadata"]["generation"].as_i64().unwrap_or(0);
            let bump = i64::from(spec_changed(rt, &previous, &obj));
            obj["metadata"]["generation"] = json!(generation + bump);
        }
        set_rv(&mut obj, self.revision);
        if obj == set_rv_clone(&previous, self.revision) {
            return Ok(previous);
        }
        self.revision += 1;
        set_rv(&mut obj, self.revision);
        self.objects.insert(key, obj.clone());
        self.apply(Change {
            revision: self.revision,
            resource: rt,
            change_type: ChangeType::Modified,
            object: obj.clone(),
            previous: Some(previous),
        });
        Ok(obj)
    }

    /// Deletes an object; the returned final state carries the deletion's revision (or, for a
    /// pod deleted as kube-apiserver does, the MODIFIED's before it: [`Fidelity`]).
    pub fn delete(
        &mut self,
        rt: &'static ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let marked = self.mark_deleted(rt, namespace, name)?;
        let key = Self::key(rt, namespace, name);
        let previous = self
            .objects
            .remove(&key)
            .ok_or_else(|| ApiError::not_found(rt.plural, rt.group, name))?;
        self.revision += 1;
        let mut obj = previous.clone();
        set_rv(&mut obj, self.revision);
        self.apply(Change {
            revision: self.revision,
            resource: rt,
            change_type: ChangeType::Deleted,
            object: obj.clone(),
            previous: Some(previous),
        });
        Ok(marked.unwrap_or(obj))
    }

    /// Objects of `rt` now, in key order, borrowed: a page of a list at the current revision
    /// clones only what it returns.
    pub fn objects_of(&self, rt: &'static ResourceType) -> impl Iterator<Item = (&Key, &Value)> {
        self.objects
            .range((rt.plural, String::new(), String::new())..)
            .take_while(move |(k, _)| k.0 == rt.plural)
    }

    /// Objects of `rt` as they were at `revision`, in key order. The caller checks that
    /// `history_start() <= revision <= revision()`.
    pub fn state_at(&self, rt: &'static ResourceType, revision: u64) -> BTreeMap<Key, Value> {
        let mut state: BTreeMap<Key, Value> = self
            .objects
            .range((rt.plural, String::new(), String::new())..)
            .take_while(|(k, _)| k.0 == rt.plural)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for change in self.history.iter().rev() {
            if change.revision <= revision {
                break;
            }
            if change.resource.plural != rt.plural {
                continue;
            }
            let meta = &change.object["metadata"];
            let key = Self::key(
                rt,
                meta["namespace"].as_str(),
                meta["name"].as_str().unwrap_or_default(),
            );
            match &change.previous {
                None => {
                    state.remove(&key);
                }
                Some(previous) => {
                    state.insert(key, previous.clone());
                }
            }
        }
        state
    }

    /// Changes of `rt` after `revision`, oldest first. The caller checks `history_start()`.
    pub fn changes_since(&self, rt: &'static ResourceType, revision: u64) -> Vec<Arc<Change>> {
        self.history
            .iter()
            .filter(|c| c.revision > revision && c.resource.plural == rt.plural)
            .cloned()
            .collect()
    }

    /// Registers a watch on `rt`; it receives every later change of that resource. With a
    /// `limit`, its queue of changes not yet taken is bounded:
    /// past it the watch is dropped from the fan-out and its [`Backlog`] marked terminated.
    pub fn register_bounded(
        &mut self,
        rt: &'static ResourceType,
        limit: Option<usize>,
    ) -> (mpsc::UnboundedReceiver<WatchMsg>, Option<Arc<Backlog>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let backlog = limit.map(|limit| {
            Arc::new(Backlog {
                pending: std::sync::atomic::AtomicUsize::new(0),
                limit,
                terminated: std::sync::atomic::AtomicBool::new(false),
            })
        });
        self.watchers.push(Watcher {
            resource: rt.plural,
            tx,
            backlog: backlog.clone(),
        });
        (rx, backlog)
    }

    /// Watches terminated so far for exceeding their backlog limit.
    pub fn terminated_watches(&self) -> usize {
        self.terminated_watches
    }

    /// The last `k` changes of `rt` at or before `revision` that are still in the history and
    /// pass `keep`, oldest first.
    pub fn changes_before(
        &self,
        rt: &'static ResourceType,
        revision: u64,
        k: usize,
        mut keep: impl FnMut(&Change) -> bool,
    ) -> Vec<Arc<Change>> {
        let mut last: Vec<Arc<Change>> = self
            .history
            .iter()
            .rev()
            .filter(|c| c.revision <= revision && c.resource.plural == rt.plural && keep(c))
            .take(k)
            .cloned()
            .collect();
        last.reverse();
        last
    }

    /// Sends `msg` to every open watch, dropping the registrations of closed ones.
    pub fn broadcast(&mut self, msg: WatchMsg) {
        self.watchers.retain(|w| w.tx.send(msg.clone()).is_ok());
    }

    /// Number of watches whose stream is still open.
    pub fn open_watches(&self) -> usize {
        self.watchers.iter().filter(|w| !w.tx.is_closed()).count()
    }
}

fn set_rv_clone(obj: &Value, revision: u64) -> Value {
    let mut obj = obj.clone();
    set_rv(&mut obj, revision);
    obj
}

/// Whether the resource's strategy keeps `metadata.generation`, as kube-apiserver's do for pods
/// (since 1.33), deployments and custom resources (not for ConfigMaps, Namespaces or Leases):
/// 1 at creation, bumped by an update that changes the spec.
fn keeps_generation(rt: &ResourceType) -> bool {
    matches!(rt.plural, "pods" | "deployments" | "widgets" | "gadgets")
}

/// Whether an update changes what `generation` counts: everything but `metadata` and, where the
/// resource has a status subresource, `status` (a custom resource without one counts status too).
fn spec_changed(rt: &ResourceType, previous: &Value, obj: &Value) -> bool {
    let has_status = rt.subresources.iter().any(|(name, _)| *name == "status");
    let counted = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            map.remove("metadata");
            if has_status {
                map.remove("status");
            }
        }
        v
    };
    counted(previous) != counted(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resources::by_plural;

    fn pods() -> &'static ResourceType {
        by_plural("pods").expect("pods is a known resource")
    }

    #[test]
    fn state_at_undoes_later_changes() {
        let mut s = Store::new(100, Fidelity::default());
        s.create(pods(), Some("a"), json!({"metadata":{"name":"p1"}}))
            .expect("create p1");
        let rv = s.revision();
        s.create(pods(), Some("a"), json!({"metadata":{"name":"p2"}}))
            .expect("create p2");
        s.update(pods(), Some("a"), "p1", |o| o["spec"] = json!({"x": 1}))
            .expect("update p1");
        s.delete(pods(), Some("a"), "p1").expect("delete p1");
        let old = s.state_at(pods(), rv);
        assert_eq!(old.len(), 1);
        let p1 = old.values().next().expect("one pod");
        assert_eq!(p1["metadata"]["resourceVersion"], json!(rv.to_string()));
        assert!(p1.get("spec").is_none());
    }

    #[test]
    fn ring_buffer_moves_history_start() {
        let mut s = Store::new(2, Fidelity::default());
        for i in 0..5 {
            s.create(pods(), None, json!({"metadata":{"name":format!("p{i}")}}))
                .expect("create");
        }
        assert_eq!(s.revision(), 6);
        assert_eq!(s.history_start(), 4);
        assert_eq!(s.changes_since(pods(), 4).len(), 2);
    }

    #[test]
    fn timestamp_is_rfc3339() {
        let t = now_rfc3339();
        assert_eq!(t.len(), 20);
        assert!(t.ends_with('Z'));
    }
}
