//! A fixed amount of decode work for instruction counting: `decode_line` on the bench's pod
//! `MODIFIED` line, `decode_object_meta` on its object, and the noise scans, each a given number
//! of times. criterion's timings move with a shared machine; callgrind's instruction counts do
//! not, so two versions of the scan compare exactly:
//!
//! ```sh
//! cargo build --profile profiling --example decode_callgrind
//! valgrind --tool=callgrind target/profiling/examples/decode_callgrind decode_line 10000
//! ```

use bytes::Bytes;
use kube2nats::kube::decode::{decode_line, decode_object_meta, WatchLine};

#[path = "loadtest/pods.rs"]
#[allow(dead_code)]
mod pods;

fn main() {
    let mut args = std::env::args().skip(1);
    let what = args.next().unwrap_or_else(|| "decode_line".into());
    let times: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let mut line = br#"{"type":"MODIFIED","object":"#.to_vec();
    pods::PodTemplate::new(7).write(&pods::uuid(7), 48_213_377, &mut line);
    line.push(b'}');
    let line = Bytes::from(line);
    let object = line.slice(br#"{"type":"MODIFIED","object":"#.len()..line.len() - 1);
    for _ in 0..times {
        match what.as_str() {
            "decode_line" => {
                let decoded = decode_line(std::hint::black_box(&line));
                assert!(matches!(decoded, Ok(WatchLine::Change(_))));
            }
            "decode_object_meta" => {
                let decoded = decode_object_meta(std::hint::black_box(&object));
                assert!(decoded.is_ok());
            }
            other => panic!("unknown workload {other:?}: decode_line or decode_object_meta"),
        }
    }
}
