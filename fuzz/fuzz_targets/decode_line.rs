//! Differential: kube2nats' watch-line decoder (a single-pass scanner) agrees with the serde_json
//! decoder it replaced on every input, and never panics. See `kube2nats_fuzz::check_decode_line`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|line: &[u8]| {
    kube2nats_fuzz::check_decode_line(line);
});
