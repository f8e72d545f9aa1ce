//! Subject token escaping is injective, emits only allowed characters and decodes back.
//! See `kube2nats_fuzz::check_escape_pair`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|pair: (String, String)| {
    let (a, b) = pair;
    kube2nats_fuzz::check_escape_pair(&a, &b);
    // Near-collisions are where injectivity breaks, and random pairs rarely are near: also try
    // `a` against small edits of itself.
    for edit in [
        format!("{a}."),
        format!("{a}_"),
        a.replace('.', "_"),
        a.replace('_', "."),
        a.replace('%', "_"),
        format!("%{a}"),
    ] {
        kube2nats_fuzz::check_escape_pair(&a, &edit);
    }
});
