//! `[publish]` and `[[watches]]`: what every watch inherits, and each watch; their raw forms,
//! defaults and typed value ([`WatchConfig`]) together. Each entry is checked against the
//! `[publish]` defaults, then the names are checked for uniqueness.

use std::collections::HashMap;

use super::checker::{non_empty, Checker};
use super::named::{InitialState, MessageFormat, Named, PayloadMode};
use super::noise::{check_noise, NoiseConfig, RawNoise};
use super::raw::s;
use super::selector::{check_field_selector, check_label_selector, is_dns_label};
use crate::event::EventType;
use crate::filter::FilterExpr;
use crate::subject::{validate_prefix, SubjectTemplate};

/// `publish.subject_prefix`.
pub(crate) const DEFAULT_SUBJECT_PREFIX: &str = "kube";
/// `publish.payload`: the event as the API server sent it, type included.
pub(crate) const DEFAULT_PAYLOAD: PayloadMode = PayloadMode::Event;
/// `publish.format`: kube2nats' own headers; CloudEvents consumers opt in.
pub(crate) const DEFAULT_FORMAT: MessageFormat = MessageFormat::Native;
/// `watches[].initial_state`: publish the listed objects as ADDED so subscribers start complete.
pub(crate) const DEFAULT_INITIAL_STATE: InitialState = InitialState::Added;

/// `[publish]`: defaults for every watch.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawPublish {
    /// Tokens of `[A-Za-z0-9_-]` separated by dots. Default [`DEFAULT_SUBJECT_PREFIX`].
    pub(crate) subject_prefix: String,
    /// Value of `{cluster}`; a template using `{cluster}` needs it non-empty. Default `""`.
    pub(crate) cluster: String,
    /// Subject template; `""` (the default) = [`crate::subject::DEFAULT_TEMPLATE`], or with
    /// `cluster` set [`crate::subject::DEFAULT_CLUSTER_TEMPLATE`].
    pub(crate) subject: String,
    /// `event`, `object` or `metadata`. Default [`DEFAULT_PAYLOAD`].
    pub(crate) payload: String,
    /// `native` or `cloudevents`. Default [`DEFAULT_FORMAT`].
    pub(crate) format: String,
}

impl Default for RawPublish {
    fn default() -> Self {
        RawPublish {
            subject_prefix: s(DEFAULT_SUBJECT_PREFIX),
            cluster: String::new(),
            subject: String::new(),
            payload: s(DEFAULT_PAYLOAD.name()),
            format: s(DEFAULT_FORMAT.name()),
        }
    }
}

/// One configured watch.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchConfig {
    /// Unique; the `watch` label of every metric and the `watch` field of every log line.
    pub(crate) name: String,
    /// The resource as kubectl names it (`pods`, `deployments.apps`, `widgets.v1.example.com`),
    /// resolved through discovery at start.
    pub(crate) resource: String,
    /// Empty means all namespaces (and is the only choice for cluster-scoped resources).
    pub(crate) namespaces: Vec<String>,
    /// With `namespaces` empty: namespaces whose objects are dropped by kube2nats (one watch).
    pub(crate) namespaces_exclude: Vec<String>,
    /// A label selector on namespaces: only objects of namespaces whose labels match are
    /// published, followed as namespaces are relabelled ([`crate::scope`]).
    pub(crate) namespace_selector: Option<String>,
    /// A label selector checked for syntax (`app=web,tier in (a,b)`); `None` = all objects.
    pub(crate) label_selector: Option<String>,
    /// A field selector checked for syntax (`status.phase=Running`); `None` = all objects.
    pub(crate) field_selector: Option<String>,
    /// The event types published; others are dropped (counted as `filtered`).
    pub(crate) events: Vec<EventType>,
    pub(crate) initial_state: InitialState,
    /// The watch's own template, or `publish.subject`; a template using `{cluster}` comes with a
    /// non-empty `cluster`.
    pub(crate) subject: SubjectTemplate,
    /// `{prefix}` of the subject template.
    pub(crate) subject_prefix: String,
    /// `{cluster}` of the subject template.
    pub(crate) cluster: String,
    pub(crate) payload: PayloadMode,
    pub(crate) format: MessageFormat,
    /// Which MODIFIED events are published and which paths are stripped.
    pub(crate) noise: NoiseConfig,
    /// Whether the watch's objects are kept in the `[mirror]` bucket (docs/mirror.md).
    pub(crate) mirror: bool,
    /// Only objects this CEL expression matches are published (docs/filters.md).
    pub(crate) filter: Option<FilterExpr>,
}

/// `[[watches]]`: one resource to list and watch.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawWatch {
    /// Required, unique, `[A-Za-z0-9_-]{1,63}`: the `watch` label of metrics.
    pub(crate) name: String,
    /// Required; kubectl-style `plural[.version][.group]`.
    pub(crate) resource: String,
    /// DNS-1123 labels; `[]` = all namespaces.
    pub(crate) namespaces: Vec<String>,
    /// With `namespaces = []`: namespaces whose objects are not published. Default `[]`.
    pub(crate) namespaces_exclude: Vec<String>,
    /// Label selector on namespaces (`team=payments`); `""` = every namespace.
    pub(crate) namespace_selector: String,
    /// Kubernetes label selector; `""` = none.
    pub(crate) label_selector: String,
    /// Kubernetes field selector; `""` = none.
    pub(crate) field_selector: String,
    /// Non-empty subset of ADDED, MODIFIED, DELETED (any case). Default all three.
    pub(crate) events: Vec<String>,
    /// `added` or `skip`. Default [`DEFAULT_INITIAL_STATE`].
    pub(crate) initial_state: String,
    /// Subject template; `""` = `publish.subject`.
    pub(crate) subject: String,
    /// `event`, `object` or `metadata`; `""` = `publish.payload`.
    pub(crate) payload: String,
    /// `native` or `cloudevents`; `""` = `publish.format`.
    pub(crate) format: String,
    /// Noise control: `any`, `generation` or `content`; `""` = `any`.
    pub(crate) changes: String,
    /// Paths `changes = "content"` ignores besides the default three.
    pub(crate) ignore_paths: Vec<String>,
    /// Paths removed from the published object.
    pub(crate) strip_paths: Vec<String>,
    /// A CEL expression over `object`: only matching objects are published; `""` = all.
    pub(crate) filter: String,
    /// Keep the watch's objects in the `[mirror]` bucket; unset = `mirror.enabled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mirror: Option<bool>,
}

impl Default for RawWatch {
    fn default() -> Self {
        RawWatch {
            name: String::new(),
            resource: String::new(),
            namespaces: Vec::new(),
            namespaces_exclude: Vec::new(),
            namespace_selector: String::new(),
            label_selector: String::new(),
            field_selector: String::new(),
            events: EventType::ALL.iter().map(|t| s(t.as_str())).collect(),
            initial_state: s(DEFAULT_INITIAL_STATE.name()),
            subject: String::new(),
            payload: String::new(),
            format: String::new(),
            changes: String::new(),
            ignore_paths: Vec::new(),
            strip_paths: Vec::new(),
            filter: String::new(),
            mirror: None,
        }
    }
}

/// `[publish]`: what every watch inherits unless it sets its own; `None` where the value was
/// invalid (and the problem recorded).
struct PublishDefaults<'a> {
    prefix: Option<String>,
    subject: Option<SubjectTemplate>,
    payload: Option<PayloadMode>,
    format: Option<MessageFormat>,
    cluster: &'a str,
}

pub(super) fn check_watches(
    c: &mut Checker,
    publish: &RawPublish,
    watches: &[RawWatch],
) -> Option<Vec<WatchConfig>> {
    let defaults = check_publish(c, publish);
    if watches.is_empty() {
        return c.fail(
            "watches",
            "no watch configured (add at least one [[watches]] table with name and resource)",
        );
    }
    let out: Vec<WatchConfig> = watches
        .iter()
        .enumerate()
        .filter_map(|(i, w)| check_watch(c, &defaults, i, w))
        .collect();
    check_unique_names(c, watches);
    check_default_subject_cluster(c, publish, &defaults, watches);
    (out.len() == watches.len()).then_some(out)
}

fn check_publish<'a>(c: &mut Checker, publish: &'a RawPublish) -> PublishDefaults<'a> {
    let prefix = match validate_prefix(&publish.subject_prefix) {
        Ok(()) => Some(publish.subject_prefix.clone()),
        Err(why) => c.fail("publish.subject_prefix", why),
    };
    let subject = match non_empty(&publish.subject).map(SubjectTemplate::parse) {
        None => Some(SubjectTemplate::default_for(&publish.cluster)),
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => c.fail("publish.subject", e.to_string()),
    };
    let payload = c.one_of("publish.payload", &publish.payload, PayloadMode::NAMES);
    let format = c.one_of("publish.format", &publish.format, MessageFormat::NAMES);
    PublishDefaults {
        prefix,
        subject,
        payload,
        format,
        cluster: &publish.cluster,
    }
}

/// `watches[i]`: every field checked, every problem recorded; `None` if any was invalid.
fn check_watch(
    c: &mut Checker,
    defaults: &PublishDefaults<'_>,
    i: usize,
    w: &RawWatch,
) -> Option<WatchConfig> {
    let key = |field: &str| format!("watches[{i}].{field}");
    let name = match check_watch_name(&w.name) {
        Ok(()) => Some(w.name.clone()),
        Err(why) => c.fail(key("name"), why),
    };
    let resource = match check_resource(&w.resource) {
        Ok(()) => Some(w.resource.clone()),
        Err(why) => c.fail(key("resource"), why),
    };
    let namespaces = check_namespaces(c, &key("namespaces"), &w.namespaces);
    let namespaces_exclude = check_namespaces_exclude(c, &key("namespaces_exclude"), w);
    let namespace_selector = check_selector(
        c,
        &key("namespace_selector"),
        "label selector",
        &w.namespace_selector,
        check_label_selector,
    );
    let label_selector = check_selector(
        c,
        &key("label_selector"),
        "label selector",
        &w.label_selector,
        check_label_selector,
    );
    let field_selector = check_selector(
        c,
        &key("field_selector"),
        "field selector",
        &w.field_selector,
        check_field_selector,
    );
    let events = check_events(c, &key("events"), &w.events);
    let initial_state = c.one_of(&key("initial_state"), &w.initial_state, InitialState::NAMES);
    let subject = match non_empty(&w.subject) {
        None => defaults.subject.clone(),
        Some(t) => match SubjectTemplate::parse(t) {
            Ok(t) if t.uses_cluster() && defaults.cluster.is_empty() => c.fail(
                key("subject"),
                format!(
                    "{:?} uses {{cluster}} but publish.cluster is empty (set publish.cluster)",
                    w.subject
                ),
            ),
            Ok(t) => Some(t),
            Err(e) => c.fail(key("subject"), e.to_string()),
        },
    };
    let payload = match non_empty(&w.payload) {
        None => defaults.payload,
        Some(p) => c.one_of(&key("payload"), p, PayloadMode::NAMES),
    };
    let format = match non_empty(&w.format) {
        None => defaults.format,
        Some(f) => c.one_of(&key("format"), f, MessageFormat::NAMES),
    };
    let noise = check_noise(
        c,
        i,
        RawNoise {
            changes: &w.changes,
            ignore_paths: &w.ignore_paths,
            strip_paths: &w.strip_paths,
        },
    );
    let filter = match non_empty(&w.filter).map(FilterExpr::compile) {
        None => Some(None),
        Some(Ok(f)) => Some(Some(f)),
        Some(Err(why)) => c.fail(key("filter"), why),
    };
    Some(WatchConfig {
        name: name?,
        resource: resource?,
        namespaces: namespaces?,
        namespaces_exclude: namespaces_exclude?,
        namespace_selector: namespace_selector?,
        label_selector: label_selector?,
        field_selector: field_selector?,
        events: events?,
        initial_state: initial_state?,
        subject: subject?,
        subject_prefix: defaults.prefix.clone()?,
        cluster: defaults.cluster.to_owned(),
        payload: payload?,
        format: format?,
        noise: noise?,
        // Resolved against `mirror.enabled` once `[mirror]` is checked.
        mirror: w.mirror.unwrap_or(false),
        filter: filter?,
    })
}

/// An optional selector: `""` is none; otherwise checked by `syntax` and kept trimmed.
fn check_selector(
    c: &mut Checker,
    key: &str,
    what: &str,
    value: &str,
    syntax: fn(&str) -> Result<(), String>,
) -> Option<Option<String>> {
    match non_empty(value).map(|v| (v, syntax(v))) {
        None => Some(None),
        Some((v, Ok(()))) => Some(Some(v.to_owned())),
        Some((_, Err(why))) => c.fail(key, format!("invalid {what} {value:?}: {why}")),
    }
}

/// Names are the `watch` label of every metric: two watches with one name would share counters.
fn check_unique_names(c: &mut Checker, watches: &[RawWatch]) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, w) in watches.iter().enumerate() {
        if w.name.is_empty() {
            continue;
        }
        if let Some(first) = seen.get(w.name.as_str()) {
            let why = format!(
                "duplicate watch name {:?} (also watches[{first}].name; names must be unique)",
                w.name
            );
            c.fail::<()>(format!("watches[{i}].name"), why);
        } else {
            seen.insert(w.name.as_str(), i);
        }
    }
}

/// A `publish.subject` using `{cluster}` is an error only once a watch inherits it.
fn check_default_subject_cluster(
    c: &mut Checker,
    publish: &RawPublish,
    defaults: &PublishDefaults<'_>,
    watches: &[RawWatch],
) {
    let inherited = watches.iter().any(|w| non_empty(&w.subject).is_none());
    let uses_cluster = defaults
        .subject
        .as_ref()
        .is_some_and(SubjectTemplate::uses_cluster);
    if inherited && uses_cluster && publish.cluster.is_empty() {
        c.fail::<()>(
            "publish.subject",
            format!(
                "{:?} uses {{cluster}} but publish.cluster is empty (set publish.cluster)",
                publish.subject
            ),
        );
    }
}

fn check_watch_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("required (a unique name of [A-Za-z0-9_-], 1 to 63 characters)".into());
    }
    if name.len() > 63
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "invalid name {name:?} (allowed: [A-Za-z0-9_-], 1 to 63 characters)"
        ));
    }
    Ok(())
}

/// kubectl's `plural[.version][.group]`: lower-case DNS-like segments; resolved by discovery later.
fn check_resource(resource: &str) -> Result<(), String> {
    if resource.is_empty() {
        return Err("required (kubectl-style plural[.version][.group], e.g. pods, deployments.apps, widgets.v1.example.com)".into());
    }
    let ok = resource.len() <= 253 && resource.split('.').all(is_dns_label);
    if !ok {
        return Err(format!(
            "invalid resource {resource:?} (expected kubectl-style plural[.version][.group] of lower-case DNS labels, e.g. pods, deployments.apps, widgets.v1.example.com)"
        ));
    }
    Ok(())
}

fn check_namespaces(c: &mut Checker, key: &str, namespaces: &[String]) -> Option<Vec<String>> {
    let before = c.errors.len();
    for (i, ns) in namespaces.iter().enumerate() {
        if !is_dns_label(ns) {
            let why = format!(
                "invalid namespace {ns:?} (expected a DNS-1123 label: [a-z0-9-], 1 to 63 characters)"
            );
            c.fail::<()>(format!("{key}[{i}]"), why);
        } else if namespaces[..i].contains(ns) {
            c.fail::<()>(format!("{key}[{i}]"), format!("duplicate namespace {ns:?}"));
        }
    }
    (c.errors.len() == before).then(|| namespaces.to_vec())
}

/// Exclusions filter one cluster-wide watch; with `namespaces` set, leaving a namespace out of
/// the list is the way.
fn check_namespaces_exclude(c: &mut Checker, key: &str, w: &RawWatch) -> Option<Vec<String>> {
    if !w.namespaces_exclude.is_empty() && !w.namespaces.is_empty() {
        return c.fail(
            key,
            "only for a cluster-wide watch (namespaces = []); leave the namespace out of namespaces instead",
        );
    }
    check_namespaces(c, key, &w.namespaces_exclude)
}

fn check_events(c: &mut Checker, key: &str, events: &[String]) -> Option<Vec<EventType>> {
    if events.is_empty() {
        return c.fail(
            key,
            "must not be empty (allowed: a subset of ADDED, MODIFIED, DELETED)",
        );
    }
    let before = c.errors.len();
    let mut out = Vec::with_capacity(events.len());
    for (i, e) in events.iter().enumerate() {
        match e.trim().parse::<EventType>() {
            Ok(t) if out.contains(&t) => {
                c.fail::<()>(format!("{key}[{i}]"), format!("duplicate event type {e:?}"));
            }
            Ok(t) => out.push(t),
            Err(why) => {
                c.fail::<()>(format!("{key}[{i}]"), why);
            }
        }
    }
    (c.errors.len() == before).then_some(out)
}

#[cfg(test)]
mod tests {
    use crate::config::testing::*;
    use crate::config::InitialState;
    use crate::event::EventType;

    #[test]
    fn publish_section() {
        assert_error(
            "[publish]\nsubject_prefix = \"a..b\"",
            "publish.subject_prefix: empty token",
        );
        assert_error(
            "[publish]\nsubject_prefix = \"k*\"",
            "publish.subject_prefix: invalid token \"k*\"",
        );
        assert_error("[publish]\nsubject = \"{prefix}.{cluster}.{name}\"", "publish.subject: \"{prefix}.{cluster}.{name}\" uses {cluster} but publish.cluster is empty");
        let c = load_str(&format!(
            "[publish]\ncluster = \"eu\"\nsubject = \"{{prefix}}.{{cluster}}.{{name}}\"\n{MINIMAL}"
        ))
        .unwrap();
        assert!(c.watches[0].subject.uses_cluster());
        assert_eq!(c.watches[0].cluster, "eu");
        assert_error(
            "[publish]\nformat = \"cloudevent\"",
            "publish.format: invalid value \"cloudevent\" (allowed: native, cloudevents)",
        );
        assert_error(
            "[http]\nlisten = \"9090\"",
            "http.listen: invalid socket address \"9090\"",
        );
    }

    /// No subject configured: the default template, led by the cluster once one is named.
    #[test]
    fn default_subject_follows_the_cluster() {
        let subject = |publish: &str| {
            let c = load_str(&format!("[publish]\n{publish}\n{MINIMAL}")).unwrap();
            c.watches[0].subject.to_string()
        };
        assert_eq!(subject(""), crate::subject::DEFAULT_TEMPLATE);
        assert_eq!(
            subject("cluster = \"eu\""),
            crate::subject::DEFAULT_CLUSTER_TEMPLATE
        );
        assert_eq!(
            subject("cluster = \"eu\"\nsubject = \"{prefix}.{name}\""),
            "{prefix}.{name}"
        );
    }

    /// `format` per watch overrides `publish.format`; unknown values name their key.
    #[test]
    fn watch_format() {
        use crate::config::MessageFormat;
        let c = load_str(&format!(
            "[publish]\nformat = \"cloudevents\"\n{MINIMAL}\n[[watches]]\nname = \"n\"\nresource = \"pods\"\nformat = \"native\""
        ))
        .unwrap();
        assert_eq!(
            (c.watches[0].format, c.watches[1].format),
            (MessageFormat::CloudEvents, MessageFormat::Native)
        );
        assert_watch_error(
            "format = \"ce\"",
            "watches[0].format: invalid value \"ce\" (allowed: native, cloudevents)",
        );
    }

    #[test]
    fn watches_list() {
        let err = load_str("[log]\nformat = \"text\"").unwrap_err();
        assert_eq!(err.to_string(), "watches: no watch configured (add at least one [[watches]] table with name and resource)");
        let lines = errors("[[watches]]\nname = \"pods\"\nresource = \"pods\"\n[[watches]]\nname = \"x\"\nresource = \"services\"");
        assert_eq!(lines, ["watches[2].name: duplicate watch name \"pods\" (also watches[0].name; names must be unique)"]);
    }

    #[test]
    fn watch_name_and_resource() {
        assert_error(
            "[[watches]]\nresource = \"pods\"",
            "watches[0].name: required",
        );
        assert_watch_error(
            "[[watches]]\nname = \"a b\"\nresource = \"pods\"",
            "watches[1].name: invalid name \"a b\"",
        );
        assert_error("[[watches]]\nname = \"x\"", "watches[0].resource: required");
        for bad in ["Pods", "pods..apps", "pods.", "deployments/apps", "-pods"] {
            assert_error(
                &format!("[[watches]]\nname = \"x\"\nresource = \"{bad}\""),
                &format!("watches[0].resource: invalid resource \"{bad}\""),
            );
        }
        for good in [
            "pods",
            "deployments.apps",
            "widgets.v1.example.com",
            "horizontalpodautoscalers.v2.autoscaling",
        ] {
            load_str(&format!("[[watches]]\nname = \"x\"\nresource = \"{good}\"")).unwrap();
        }
    }

    #[test]
    fn watch_namespaces_and_events() {
        assert_watch_error(
            "namespaces = [\"Default\"]",
            "watches[0].namespaces[0]: invalid namespace \"Default\"",
        );
        assert_watch_error(
            "namespaces = [\"a\", \"a\"]",
            "watches[0].namespaces[1]: duplicate namespace \"a\"",
        );
        assert_watch_error(
            "events = []",
            "watches[0].events: must not be empty (allowed: a subset of ADDED, MODIFIED, DELETED)",
        );
        assert_watch_error("events = [\"ADDED\", \"BOOKMARK\"]", "watches[0].events[1]: unknown event type \"BOOKMARK\" (allowed: ADDED, MODIFIED, DELETED)");
        assert_watch_error(
            "events = [\"added\", \"ADDED\"]",
            "watches[0].events[1]: duplicate event type \"ADDED\"",
        );
        assert_watch_error(
            "initial_state = \"all\"",
            "watches[0].initial_state: invalid value \"all\" (allowed: added, skip)",
        );
        assert_watch_error(
            "payload = \"cloudevent\"",
            "watches[0].payload: invalid value \"cloudevent\" (allowed: event, object, metadata)",
        );
        let c = load_str("[[watches]]\nname = \"w\"\nresource = \"pods\"\nevents = [\"deleted\"]\ninitial_state = \"skip\"").unwrap();
        assert_eq!(
            (c.watches[0].events.as_slice(), c.watches[0].initial_state),
            (&[EventType::Deleted][..], InitialState::Skip)
        );
    }

    #[test]
    fn watch_namespace_scope() {
        assert_watch_error(
            "namespaces = [\"a\"]\nnamespaces_exclude = [\"b\"]",
            "watches[0].namespaces_exclude: only for a cluster-wide watch (namespaces = [])",
        );
        assert_watch_error(
            "namespaces_exclude = [\"kube-system\", \"Kube\"]",
            "watches[0].namespaces_exclude[1]: invalid namespace \"Kube\"",
        );
        assert_watch_error(
            "namespace_selector = \"team in (a\"",
            "watches[0].namespace_selector: invalid label selector \"team in (a\"",
        );
        let c = load_str("[[watches]]\nname = \"w\"\nresource = \"pods\"\nnamespaces_exclude = [\"kube-system\"]\nnamespace_selector = \" team=payments \"\npayload = \"metadata\"").unwrap();
        let w = &c.watches[0];
        assert_eq!(w.namespaces_exclude, ["kube-system"]);
        assert_eq!(w.namespace_selector.as_deref(), Some("team=payments"));
        assert_eq!(w.payload, crate::config::PayloadMode::Metadata);
        let c = load_str(MINIMAL).unwrap();
        assert_eq!(
            (
                c.watches[0].namespaces_exclude.len(),
                c.watches[0].namespace_selector.as_deref()
            ),
            (0, None)
        );
    }

    #[test]
    fn watch_subject() {
        assert_watch_error(
            "subject = \"kube.{kind}.{name}\"",
            "watches[0].subject: unknown placeholder {kind} in \"kube.{kind}.{name}\" (allowed: {prefix}, {cluster}, {group}, {version}, {resource}, {namespace}, {name}, {type}, {label:KEY}, {annotation:KEY})",
        );
        assert_watch_error("subject = \"kube.{cluster}.{name}\"", "watches[0].subject: \"kube.{cluster}.{name}\" uses {cluster} but publish.cluster is empty");
        assert_watch_error("subject = \"kube.*\"", "watches[0].subject: wildcard");
    }
}
