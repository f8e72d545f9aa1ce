//! A watch body cut at arbitrary chunk boundaries and read through the real framing and decoding
//! must give exactly what a line-by-line reference gives, and never panic.
//! See `kube2nats_fuzz::check_watch_stream`.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    /// Chunk boundaries (see `kube2nats_fuzz::chunks`).
    cuts: Vec<u16>,
    /// `kubernetes.max_line_bytes`, reduced to a range where the limit matters for small inputs.
    max_line_bytes: u16,
    body: Vec<u8>,
}

fuzz_target!(|input: Input| {
    let max = usize::from(input.max_line_bytes) % 4096 + 1;
    kube2nats_fuzz::check_watch_stream(&input.body, &input.cuts, max);
});
