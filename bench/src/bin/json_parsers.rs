//! A fixed amount of JSON parsing for instruction counting: a parser from crates.io on the
//! bench's pod watch line (the line `examples/decode_callgrind.rs` gives kube2nats' scan), a given
//! number of times, so that callgrind compares the scan with what those parsers spend on the same
//! bytes (docs/performance.md, "What the missed targets would take"):
//!
//! ```sh
//! cargo build --profile parsers --features parsers --manifest-path bench/Cargo.toml --bin json-parsers
//! for n in 2000 6000; do
//!   valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n bench/target/parsers/json-parsers sonic_ignored $n
//! done   # instructions per parse: (total at 6000 - total at 2000) / 4000
//! ```
//!
//! `RUSTFLAGS="-C target-cpu=x86-64-v3"` (into another `CARGO_TARGET_DIR`) builds them for AVX2;
//! simd-json picks AVX2 at run time in either build, sonic-rs only in the second.

#[path = "../../../examples/loadtest/pods.rs"]
#[allow(dead_code)]
mod pods;

use serde::de::IgnoredAny;
use std::hint::black_box;

/// Each parser's cheapest call that still reads the whole line (`sonic_get` stops at the end of
/// `object.metadata` and reads nothing after it).
const PARSERS: &[&str] = &[
    "serde_ignored", // serde_json into IgnoredAny
    "simd_tape",     // simd-json's tape, of a copy (it parses in place)
    "sonic_ignored", // sonic-rs into IgnoredAny
    "sonic_get",     // sonic-rs' lazy `get` of object.metadata
];

fn pod_line() -> Vec<u8> {
    let mut line = br#"{"type":"MODIFIED","object":"#.to_vec();
    pods::PodTemplate::new(7).write(&pods::uuid(7), 48_213_377, &mut line);
    line.push(b'}');
    line
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let parser = args.next().unwrap_or_default();
    let times: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(1000);
    let line = pod_line();
    for _ in 0..times {
        let line = black_box(&line[..]);
        match parser.as_str() {
            "serde_ignored" => {
                black_box(serde_json::from_slice::<IgnoredAny>(line)?);
            }
            "simd_tape" => {
                let mut copy = line.to_vec();
                black_box(simd_json::to_tape(&mut copy)?);
            }
            "sonic_ignored" => {
                black_box(sonic_rs::from_slice::<IgnoredAny>(line)?);
            }
            "sonic_get" => {
                black_box(sonic_rs::get(line, &["object", "metadata"])?);
            }
            other => anyhow::bail!("unknown parser {other:?}; one of {PARSERS:?}"),
        }
    }
    Ok(())
}
