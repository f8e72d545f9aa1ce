//! Building one message from a decoded watch event — subject, headers, payload — with the native
//! headers and with the CloudEvents attributes added (`format = "cloudevents"`): what the CloudEvents
//! format costs per event on the hot path.
//!
//! `cargo bench --bench message`

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use kube2nats::config::{MessageFormat, PayloadMode};
use kube2nats::event::{ObjectEvent, ResourceInfo};
use kube2nats::kube::decode::{decode_line, WatchLine};
use kube2nats::publish::MessageBuilder;
use kube2nats::subject::SubjectTemplate;

#[path = "../examples/loadtest/pods.rs"]
#[allow(dead_code)]
mod pods;

/// A realistic pod `MODIFIED`, decoded as the watch decodes it.
fn pod_event() -> ObjectEvent {
    let mut line = br#"{"type":"MODIFIED","object":"#.to_vec();
    pods::PodTemplate::new(7).write(&pods::uuid(7), 48_213_377, &mut line);
    line.push(b'}');
    match decode_line(&Bytes::from(line)) {
        Ok(WatchLine::Change(event)) => event,
        other => panic!("the fixture is a change: {other:?}"),
    }
}

fn builder(cluster: &str, format: MessageFormat) -> MessageBuilder {
    MessageBuilder::new(
        "pods".into(),
        SubjectTemplate::default_for(cluster),
        "kube".into(),
        cluster.into(),
        ResourceInfo {
            group: String::new(),
            version: "v1".into(),
            plural: "pods".into(),
            kind: "Pod".into(),
            namespaced: true,
        },
        PayloadMode::Event,
        format,
    )
}

fn build(c: &mut Criterion) {
    let event = pod_event();
    let mut group = c.benchmark_group("message");
    for (label, cluster, format) in [
        ("native", "", MessageFormat::Native),
        ("native_cluster", "prod-eu", MessageFormat::Native),
        ("cloudevents_cluster", "prod-eu", MessageFormat::CloudEvents),
    ] {
        let b = builder(cluster, format);
        group.bench_function(format!("build/{label}"), |bench| {
            bench.iter(|| {
                b.build(std::hint::black_box(&event), false)
                    .expect("the subject fits")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, build);
criterion_main!(benches);
