//! The values the configuration file spells by name (`log.format = "json"`, `payload = "object"`):
//! the [`Named`] trait that maps spellings to values, and every such enum. The bottom of the
//! configuration's layers: the raw file, the checks and the typed values all use these.

/// A configuration value the file spells by name (`log.format = "json"`).
pub(crate) trait Named: Copy + PartialEq + 'static {
    /// Every value with its spelling, in the order error messages list them.
    const NAMES: &'static [(&'static str, Self)];

    /// How the file spells `self`.
    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, v)| *v == self)
            .map_or("", |(name, _)| name)
    }
}

/// How log lines are written (to stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target` and the event's fields.
    Json,
}

impl Named for LogFormat {
    const NAMES: &'static [(&'static str, Self)] =
        &[("text", LogFormat::Text), ("json", LogFormat::Json)];
}

/// What to do when the start-up RBAC self-check finds a missing permission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RbacCheck {
    /// Log the missing rule and keep running (and retrying).
    Warn,
    /// Log the missing rule and exit with code 3.
    Fail,
}

impl Named for RbacCheck {
    const NAMES: &'static [(&'static str, Self)] =
        &[("warn", RbacCheck::Warn), ("fail", RbacCheck::Fail)];
}

/// What a full managed stream gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Discard {
    /// Its oldest messages: new events keep flowing.
    Old,
    /// New messages: publishes fail (and the watches wait) until space frees up.
    New,
}

impl Named for Discard {
    const NAMES: &'static [(&'static str, Self)] = &[("old", Discard::Old), ("new", Discard::New)];
}

/// JetStream retention policy of a managed stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retention {
    /// Keep messages until a limit (age, count, size) removes them.
    Limits,
    /// Keep a message while some consumer has not acknowledged it.
    Interest,
    /// Remove a message once one consumer has acknowledged it.
    WorkQueue,
}

impl Named for Retention {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("limits", Retention::Limits),
        ("interest", Retention::Interest),
        ("workqueue", Retention::WorkQueue),
    ];
}

/// Where a managed stream keeps its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Storage {
    /// On disk; survives a restart of the NATS server.
    File,
    /// In memory; faster, lost on restart.
    Memory,
}

impl Named for Storage {
    const NAMES: &'static [(&'static str, Self)] =
        &[("file", Storage::File), ("memory", Storage::Memory)];
}

/// What the first list of a watch publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InitialState {
    /// Every listed object as ADDED.
    Added,
    /// Nothing: only changes after start are published.
    Skip,
}

impl Named for InitialState {
    const NAMES: &'static [(&'static str, Self)] =
        &[("added", InitialState::Added), ("skip", InitialState::Skip)];
}

/// The body of a published message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadMode {
    /// The watch event `{"type":…,"object":…}`.
    Event,
    /// The object alone.
    Object,
    /// Like `Event`, but the API server is asked for PartialObjectMetadata: the object carries
    /// its metadata only ([`crate::kube::metadata`]).
    Metadata,
}

impl Named for PayloadMode {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("event", PayloadMode::Event),
        ("object", PayloadMode::Object),
        ("metadata", PayloadMode::Metadata),
    ];
}

/// How a message presents the event, besides its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageFormat {
    /// kube2nats' own `Kube-*` headers (and `Nats-Msg-Id`).
    Native,
    /// The native headers plus the CloudEvents attributes in binary content mode (`ce-*`
    /// headers), per the CloudEvents NATS protocol binding.
    CloudEvents,
}

impl Named for MessageFormat {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("native", MessageFormat::Native),
        ("cloudevents", MessageFormat::CloudEvents),
    ];
}
