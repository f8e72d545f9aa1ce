//! What one watch target watches: a resource in one namespace (or all), with its selectors and
//! the limits of its requests. Fixed at start, but for the version of a resource the watch
//! follows; the watch stage, the scope's namespace watchers and the durable state (whose keys
//! name it, without the version) all read it, so it sits below all of them.

use std::time::Duration;

use crate::event::ResourceInfo;

/// What one watch target watches.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) resource: ResourceInfo,
    /// `None`: all namespaces (or a cluster-scoped resource).
    pub(crate) namespace: Option<String>,
    pub(crate) label_selector: Option<String>,
    pub(crate) field_selector: Option<String>,
    pub(crate) page_size: u32,
    /// T: each watch asks for a server-side timeout drawn from [T, 2T), as client-go does, so
    /// many watches do not all reconnect at once.
    pub(crate) watch_timeout: Duration,
    pub(crate) streaming_list: bool,
    pub(crate) max_line_bytes: usize,
    /// Ask for PartialObjectMetadata (`payload = "metadata"`).
    pub(crate) metadata_only: bool,
    /// The configured resource name when it names no version (`widgets.example.com`): when the
    /// version watched stops being served, discovery is asked again and the watch follows the
    /// group's preferred version (docs/configuration.md, "Versions that move"). `None`: the
    /// version is pinned (`widgets.v1beta1.example.com`) or is the core group's.
    pub(crate) follow: Option<String>,
}
