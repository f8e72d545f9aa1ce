//! The decode path of one watch event: a realistic ~3.5 KB pod `MODIFIED` line → event type and
//! metadata (`decode_line`), the same object from a list page (`decode_object_meta`), and the
//! framing of a 64 KiB chunk into lines (`LineDecoder`).
//!
//! `cargo bench --bench decode`

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use kube2nats::kube::decode::{decode_line, decode_object_meta};
use kube2nats::kube::framing::LineDecoder;

#[path = "../examples/loadtest/pods.rs"]
#[allow(dead_code)]
mod pods;

fn watch_line() -> Bytes {
    let mut line = br#"{"type":"MODIFIED","object":"#.to_vec();
    pods::PodTemplate::new(7).write(&pods::uuid(7), 48_213_377, &mut line);
    line.push(b'}');
    Bytes::from(line)
}

fn decode(c: &mut Criterion) {
    let line = watch_line();
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Bytes(line.len() as u64));
    group.bench_function("decode_line/pod_modified", |b| {
        b.iter(|| decode_line(std::hint::black_box(&line)).expect("valid line"))
    });
    let object = line.slice(br#"{"type":"MODIFIED","object":"#.len()..line.len() - 1);
    group.bench_function("serde_two_pass_reference/pod_modified", |b| {
        b.iter(|| serde_two_pass(std::hint::black_box(&line)))
    });
    group.bench_function("decode_object_meta/pod", |b| {
        b.iter(|| decode_object_meta(std::hint::black_box(&object)).expect("valid object"))
    });
    group.finish();

    let mut chunk = Vec::new();
    while chunk.len() < 64 * 1024 {
        chunk.extend_from_slice(&line);
        chunk.push(b'\n');
    }
    let lines = chunk.iter().filter(|&&b| b == b'\n').count();
    let mut group = c.benchmark_group("framing");
    group.throughput(Throughput::Bytes(chunk.len() as u64));
    group.bench_function("line_decoder/64KiB_chunk", |b| {
        b.iter_batched_ref(
            || LineDecoder::new(8 << 20),
            |d| {
                d.push(&chunk);
                let mut n = 0;
                while let Some(l) = d.next_line() {
                    std::hint::black_box(l);
                    n += 1;
                }
                assert_eq!(n, lines);
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

/// The cost the one-pass scanner is measured against (docs/performance.md): two serde_json passes,
/// one finding the raw object in the line, one parsing the object for `kind` and `metadata`. Not a
/// decoder (the reference decoder is `serde_reference` in `fuzz/src/lib.rs`), only the parsing
/// work, so the figure stays comparable with the one docs/performance.md quotes.
fn serde_two_pass(line: &[u8]) -> (usize, usize) {
    #[derive(serde::Deserialize)]
    struct RawLine<'a> {
        #[serde(rename = "type")]
        _event_type: &'a str,
        #[serde(borrow)]
        object: &'a serde_json::value::RawValue,
    }
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow, default)]
        _kind: Option<&'a str>,
        #[serde(borrow)]
        metadata: Meta<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(borrow)]
        uid: std::borrow::Cow<'a, str>,
        #[serde(rename = "resourceVersion", borrow)]
        resource_version: std::borrow::Cow<'a, str>,
    }
    let raw: RawLine = serde_json::from_slice(line).expect("valid line");
    let head: Head = serde_json::from_str(raw.object.get()).expect("valid object");
    (
        head.metadata.uid.len(),
        head.metadata.resource_version.len(),
    )
}

criterion_group!(benches, decode);
criterion_main!(benches);
