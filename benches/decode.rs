//! The decode path of one watch event: a realistic ~3.5 KB pod `MODIFIED` line → event type and
//! metadata (`decode_line`), the same object from a list page (`decode_object_meta`), and the
//! framing of a 64 KiB chunk into lines (`LineDecoder`); the scan's worst cases (deep nesting,
//! long runs of backslashes, an 8 MiB line); and noise control on that pod (content
//! fingerprint, `strip_paths`).
//!
//! `cargo bench --bench decode` (`-- worst_case` for the worst cases alone)

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use kube2nats::facade::LineDecoder;
use kube2nats::facade::{decode_line, decode_object_meta};

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

/// Noise control on the same pod: its content fingerprint (`changes = "content"`), and
/// `strip_paths` on an object that holds none of the paths (the zero-copy check) and on one that
/// holds one (a trimmed copy).
fn noise(c: &mut Criterion) {
    use kube2nats::facade::JsonPath;
    use kube2nats::facade::NoiseControl;
    use kube2nats::facade::WatchLine;
    use kube2nats::facade::{Changes, NoiseConfig};

    let WatchLine::Change(event) = decode_line(&watch_line()).expect("valid line") else {
        panic!("a pod MODIFIED line is a change")
    };
    let path = |p: &str| JsonPath::parse(p).expect("valid path");
    let control = |changes, strip: &[&str]| {
        NoiseControl::new(&NoiseConfig {
            changes,
            ignore_paths: vec![path("status")],
            strip_paths: strip.iter().map(|p| path(p)).collect(),
        })
    };
    let content = control(Changes::Content, &[]);
    let absent = control(Changes::Content, &["metadata.managedFields"]);
    let present = control(
        Changes::Content,
        &[r#"metadata.annotations."prometheus.io/port""#],
    );
    let mut group = c.benchmark_group("noise");
    group.throughput(Throughput::Bytes(event.object.len() as u64));
    group.bench_function("content_fingerprint/pod", |b| {
        b.iter(|| content.mark(std::hint::black_box(&event)))
    });
    group.bench_function("strip_paths_absent/pod", |b| {
        b.iter(|| {
            absent
                .stripped(std::hint::black_box(&event.object))
                .expect("valid")
        })
    });
    group.bench_function("strip_paths_present/pod", |b| {
        b.iter(|| {
            present
                .stripped(std::hint::black_box(&event.object))
                .expect("valid")
        })
    });
    group.finish();
}

/// A valid `MODIFIED` line whose object holds `body` as its `spec`, after the usual metadata.
fn line_with_spec(body: &[u8]) -> Bytes {
    let mut line = br#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"big","namespace":"default","uid":"0b8e6c3a-1f2d-4e5f-9a0b-1c2d3e4f5a6b","resourceVersion":"48213377"},"spec":"#.to_vec();
    line.extend_from_slice(body);
    line.extend_from_slice(b"}}");
    Bytes::from(line)
}

/// The scan's worst cases, each a valid line the scan reads whole: 100,000 nested arrays (the
/// bit stack spills past 63 levels), a 1 MiB string of escaped backslashes (an escape every
/// second byte), and an 8 MiB line of pod objects (the default `max_line_bytes`).
fn worst_case(c: &mut Criterion) {
    const DEPTH: usize = 100_000;
    let nested = line_with_spec(&["[".repeat(DEPTH), "]".repeat(DEPTH)].concat().into_bytes());
    let backslashes = line_with_spec(&[&b"\""[..], &b"\\\\".repeat(1 << 19), b"\""].concat());
    let mut pods = b"[".to_vec();
    let pod = watch_line();
    let object = &pod[br#"{"type":"MODIFIED","object":"#.len()..pod.len() - 1];
    while pods.len() + object.len() + 400 < 8 << 20 {
        if pods.len() > 1 {
            pods.push(b',');
        }
        pods.extend_from_slice(object);
    }
    pods.push(b']');
    let eight_mib = line_with_spec(&pods);
    let mut group = c.benchmark_group("worst_case");
    group.sample_size(10);
    for (name, line) in [
        ("decode_line/nested_100k", &nested),
        ("decode_line/backslashes_1MiB", &backslashes),
        ("decode_line/pods_8MiB", &eight_mib),
    ] {
        group.throughput(Throughput::Bytes(line.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| decode_line(std::hint::black_box(line)).expect("valid line"))
        });
    }
    group.finish();
}

criterion_group!(benches, decode, worst_case, noise);
criterion_main!(benches);
