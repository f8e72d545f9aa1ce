//! What code outside this library reaches: the `kube2nats` binary (`src/main.rs`), the
//! integration tests (`tests/`), the benchmarks (`benches/`), the fuzz properties
//! (`fuzz/src/lib.rs`) and the examples (`examples/`: the demo, the load harness, the callgrind
//! driver). Every module of the crate is private and every item `pub(crate)` unless it is
//! re-exported here (docs/development.md, "Visibility").
//!
//! This is not a stable library API: kube2nats is a daemon, and these names exist for its own
//! binary and tests. Each group says who uses it. The facade grows only for a test that cannot
//! live inside the crate (one that runs the daemon against a real nats-server and the simulated
//! API server, a benchmark, a fuzz target); a test of one module's internals is a unit test in
//! that module's sibling `tests.rs` instead.

// The binary (src/main.rs): configuration loading, logging, the run loop, and the errors it
// ends on with their own exit codes. The tests, the demo and the load harness run the daemon in
// process with `load`, `start` and `Daemon`.
pub use crate::app::{run_reloading, start, ConfigSource, Daemon, MirrorsOverlap, Reload};
pub use crate::config::{load, Config, ConfigErrors, LogFormat, RawConfig};
pub use crate::leader::NoNamespace;
pub use crate::mirror::MirrorUnavailable;
pub use crate::rbac::RbacDenied;
pub use crate::telemetry::logging::init as init_logging;
pub use crate::telemetry::metrics::REVISION;
pub use crate::watcher::supervise::install_panic_hook;

// The fuzz properties (fuzz/src/lib.rs, also run by tests/fuzz_props.rs and the unit tests),
// the benchmarks (benches/) and examples/decode_callgrind.rs: framing and decoding of watch
// lines, noise control, subject templates and escaping, the message builder and its headers.
pub use crate::config::{Changes, MessageFormat, NoiseConfig, PayloadMode};
pub use crate::event::{EventType, ObjectEvent, ObjectMeta, ResourceInfo, ResourceVersion};
pub use crate::json_path::JsonPath;
pub use crate::kube::decode::{
    decode_line, decode_line_prefix, decode_object_meta, DecodeError, WatchLine,
    INITIAL_EVENTS_END_ANNOTATION,
};
pub use crate::kube::framing::{FrameError, LineDecoder, OVERSIZED_PREFIX_BYTES};
pub use crate::kube::stream::{LineStream, StreamError};
pub use crate::noise::NoiseControl;
pub use crate::publish::cloudevents::header as cloudevents_header;
pub use crate::publish::message::{
    header, headermap_reference, BuildError, MessageBuilder, MessageSpec, Origin, OutMessage,
    Payload, Synthesis, MAX_SUBJECT_BYTES,
};
pub use crate::subject::{escape_token, SubjectTemplate, WatchFields, DEFAULT_TEMPLATE};

// tests/common/restart.rs, tests/state_trust.rs, examples/loadtest: the durable state's records
// as stored in the KV bucket, read (and planted) by tests of what a restart trusts; the
// de-duplication map whose size the load harness measures.
pub use crate::dedupe::{Dedupe, SavedObject, SavedUid, SavedVersion};
pub use crate::state::codec::journal::{decode_journal, JournalBatch};
pub use crate::state::codec::{JournalEntry, Manifest};
