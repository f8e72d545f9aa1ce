//! The message builder never panics and never emits a subject or header value NATS refuses,
//! whatever metadata an API server sends. See `kube2nats_fuzz::check_message`.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    name: String,
    namespace: Option<String>,
    uid: String,
    resource_version: String,
    kind: String,
    group: String,
}

fuzz_target!(|input: Input| {
    kube2nats_fuzz::check_message(&kube2nats_fuzz::HostileMeta {
        name: input.name,
        namespace: input.namespace,
        uid: input.uid,
        resource_version: input.resource_version,
        kind: input.kind,
        group: input.group,
    });
});
