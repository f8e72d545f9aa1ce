//! Subject rendering with the default template bound to a watch, as messages are built: a plain
//! pod name, and one that needs escaping.
//!
//! `cargo bench --bench subject`

use criterion::{criterion_group, criterion_main, Criterion};
use kube2nats::facade::EventType;
use kube2nats::facade::{SubjectTemplate, WatchFields, DEFAULT_TEMPLATE};

fn render(c: &mut Criterion) {
    let template = SubjectTemplate::parse(DEFAULT_TEMPLATE)
        .expect("the default template parses")
        .bind(&WatchFields {
            prefix: "kube",
            cluster: "",
            group: "core",
            version: "v1",
            resource: "pods",
        });
    let mut group = c.benchmark_group("subject");
    for (label, name) in [
        ("plain", "web-7d4b9c8f6d-x2k9p"),
        ("escaped", "web_app.v2-7d4b9c8f6d-x2k9p"),
    ] {
        let mut out = String::with_capacity(96);
        group.bench_function(format!("render/{label}"), |b| {
            b.iter(|| {
                out.clear();
                template.render(
                    std::hint::black_box(Some("payments")),
                    std::hint::black_box(name),
                    EventType::Modified,
                    &mut out,
                );
                out.len()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, render);
criterion_main!(benches);
