//! Building one message from a decoded watch event — subject, headers, payload — with the native
//! headers and with the CloudEvents attributes added (`format = "cloudevents"`): what the CloudEvents
//! format costs per event on the hot path.
//!
//! `headermap_reference` builds the same native headers through async-nats instead of kube2nats'
//! own serializer: a `HeaderMap`, then its wire form (as the connection writes it), the cost
//! kube2nats' serializer is compared with. The bench also prints allocations per message of both, from a counting allocator.
//!
//! `cargo bench --bench message`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use kube2nats::facade::headermap_reference;
use kube2nats::facade::SubjectTemplate;
use kube2nats::facade::{decode_line, WatchLine};
use kube2nats::facade::{MessageBuilder, MessageSpec, Origin, Payload};
use kube2nats::facade::{MessageFormat, PayloadMode};
use kube2nats::facade::{ObjectEvent, ResourceInfo};

#[path = "../examples/loadtest/pods.rs"]
#[allow(dead_code)]
mod pods;

/// Counts allocations (and reallocations), to report them per message.
struct CountingAlloc;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Allocations of one call of `f`, and what it returned.
fn allocations<T>(mut f: impl FnMut() -> T) -> u64 {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let out = f();
    let n = ALLOCATIONS.load(Ordering::Relaxed) - before;
    drop(out);
    n
}

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
    MessageBuilder::new(MessageSpec {
        watch: "pods".into(),
        subject: SubjectTemplate::default_for(cluster),
        prefix: "kube".into(),
        cluster: cluster.into(),
        resource: ResourceInfo::core("pods", "Pod", true),
        payload: PayloadMode::Event,
        format,
    })
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
        let n = allocations(|| b.build(&event, Origin::Received));
        println!("message/build/{label}: {n} allocations per message");
        group.bench_function(format!("build/{label}"), |bench| {
            bench.iter(|| {
                b.build(std::hint::black_box(&event), Origin::Received)
                    .expect("the subject fits")
            })
        });
    }
    let b = builder("prod-eu", MessageFormat::Native);
    let n =
        allocations(|| headermap_reference(&b, &event, Origin::Received, Payload::AsConfigured));
    println!("message/headermap_reference: {n} allocations per header block");
    group.bench_function("headermap_reference", |bench| {
        bench.iter(|| {
            headermap_reference(
                &b,
                std::hint::black_box(&event),
                Origin::Received,
                Payload::AsConfigured,
            )
        })
    });
    group.finish();
}

criterion_group!(benches, build);
criterion_main!(benches);
