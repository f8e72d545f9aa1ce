//! Build script: the source revision the binary is built from, for
//! `kube2nats_build_info{revision}` and the start-up log line; and the static musl binary's
//! packed relocations and order of code (see `main`).
//!
//! `KUBE2NATS_REVISION` wins when set (the Dockerfile passes its `REVISION` build argument: the
//! image's build context has no `.git`); else the commit checked out, if this crate is the root of
//! a git checkout and git is installed; else `unknown` (a source archive, or no git). Only the
//! standard library: the revision is worth no build dependency.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable that overrides the revision, and that the crate reads with `env!`.
const REVISION_ENV: &str = "KUBE2NATS_REVISION";

fn main() {
    println!("cargo:rerun-if-env-changed={REVISION_ENV}");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let revision = std::env::var(REVISION_ENV)
        .ok()
        .map(|r| sanitize(&r))
        .filter(|r| !r.is_empty())
        .or_else(|| git_revision(&manifest_dir))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env={REVISION_ENV}={revision}");

    // The image's binary (static PIE, x86_64 musl) relocates itself at start. Its ~30,000
    // relative relocations take 0.7 MB as `.rela.dyn` entries, which stay resident after the
    // start; packed as DT_RELR (GNU ld >= 2.38) they take a few KB. Only where the bundled musl
    // applies DT_RELR at start (musl >= 1.2.4; Rust >= 1.93 bundles 1.2.5): an older one would
    // leave them unapplied. docs/performance.md, "Idle memory and size of the image".
    let target = |key: &str| std::env::var(key).unwrap_or_default();
    if target("CARGO_CFG_TARGET_ENV") == "musl"
        && target("CARGO_CFG_TARGET_ARCH") == "x86_64"
        && rustc_minor().is_some_and(|minor| minor >= 93)
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }

    // The image's binary (x86_64 musl, linked by GNU ld) puts the functions that run from start to
    // idle ahead of the rest of `.text`: the kernel maps 64 KiB around each page of code touched,
    // and spread over the whole of `.text` they made nearly all of it resident. The list is
    // link/x86_64-musl-idle.ld, from a profile (link/order_from_callgrind.py); a function not
    // named there keeps its place. docs/performance.md, "Idle memory and size of the image".
    if target("CARGO_CFG_TARGET_ENV") == "musl" && target("CARGO_CFG_TARGET_ARCH") == "x86_64" {
        let script = manifest_dir.join("link/x86_64-musl-idle.ld");
        println!("cargo:rerun-if-changed={}", script.display());
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
    }
}

/// The minor version of the compiler building this crate (`rustc 1.95.0 (...)` -> 95).
fn rustc_minor() -> Option<u32> {
    let rustc = std::env::var_os("RUSTC")?;
    let out = Command::new(rustc).arg("--version").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    text.split_whitespace()
        .nth(1)?
        .split('.')
        .nth(1)?
        .parse()
        .ok()
}

/// A label value that reads as a revision: at most 64 characters of `[0-9A-Za-z._-]`.
fn sanitize(revision: &str) -> String {
    revision
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(64)
        .collect()
}

/// `git rev-parse HEAD` of the checkout `dir` is the root of, and the files that change when HEAD
/// moves (so a new commit or checkout rebuilds with the new revision).
fn git_revision(dir: &Path) -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
        (out.status.success() && !text.is_empty()).then_some(text)
    };
    // Not a parent repository that merely contains this source tree (a vendored copy).
    let toplevel = PathBuf::from(git(&["rev-parse", "--show-toplevel"])?);
    if toplevel.canonicalize().ok()? != dir.canonicalize().ok()? {
        return None;
    }
    let head = sanitize(&git(&["rev-parse", "HEAD"])?);
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            let path = dir.join(path);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    Some(head)
}
