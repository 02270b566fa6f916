//! Fuzz smoke, with stable Rust: every seed in fuzz/corpus/<target>/ and a
//! bounded number of deterministic mutations of each go through the same
//! harness cargo-fuzz runs (tests/fuzz-harness), invariants included. The long runs
//! are cargo-fuzz's (fuzz/README.md); this keeps every harness exercised by
//! a plain `cargo test`, on any machine.
//!
//! `HUSK_FUZZ_SMOKE_ITERS` (default 300) mutations per target, within a
//! `HUSK_FUZZ_SMOKE_SECS` (default 5) budget per target. A failing input is
//! written to target/fuzz-smoke-failures/<target> for `cargo fuzz run
//! <target> FILE` or a regression test.

use husk_fuzz::{Mutator, TARGETS};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no seeds in {}", dir.display());
    out
}

fn save_failure(target: &str, input: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-smoke-failures");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(target);
    let _ = std::fs::write(&path, input);
    path
}

fn run(target: &str) {
    let f = TARGETS.iter().find(|(n, _)| *n == target).unwrap_or_else(|| panic!("no harness {target}")).1;
    let iters = env_num("HUSK_FUZZ_SMOKE_ITERS", 300);
    let budget = Duration::from_secs(env_num("HUSK_FUZZ_SMOKE_SECS", 5));
    let seeds = seeds(target);
    let check = |label: &str, input: &[u8]| {
        if std::panic::catch_unwind(|| f(input)).is_err() {
            let saved = save_failure(target, input);
            panic!(
                "{target}: invariant broken by {label} (saved to {}): {:?}",
                saved.display(),
                String::from_utf8_lossy(input)
            );
        }
    };
    for (name, input) in &seeds {
        check(&format!("seed {name}"), input);
    }
    let start = Instant::now();
    let mut m = Mutator::new(0x6875_736b ^ target.len() as u64);
    let mut done = 0;
    while done < iters && start.elapsed() < budget {
        let (name, base) = &seeds[done as usize % seeds.len()];
        let input = m.mutate(base);
        check(&format!("mutation {done} of seed {name}"), &input);
        done += 1;
    }
    println!("{target}: {} seeds, {done} mutations in {:?}", seeds.len(), start.elapsed());
}

#[test]
fn fuzz_smoke_seccomp_profile() {
    run("seccomp_profile");
}

#[test]
fn fuzz_smoke_seccomp_policy() {
    run("seccomp_policy");
}

#[test]
fn fuzz_smoke_units() {
    run("units");
}

#[test]
fn fuzz_smoke_resolve() {
    run("resolve");
}

#[test]
fn fuzz_smoke_resolve_kernel() {
    run("resolve_kernel");
}

#[test]
fn fuzz_smoke_image_unpack() {
    run("image_unpack");
}

#[test]
fn fuzz_smoke_http_request() {
    run("http_request");
}

#[test]
fn fuzz_smoke_image_json() {
    run("image_json");
}

#[test]
fn fuzz_smoke_net_http() {
    run("net_http");
}

#[test]
fn fuzz_smoke_net_socks() {
    run("net_socks");
}

#[test]
fn fuzz_smoke_net_tls() {
    run("net_tls");
}

#[test]
fn fuzz_smoke_net_rule() {
    run("net_rule");
}

#[test]
fn every_harness_has_a_smoke_test_and_a_cargo_fuzz_target() {
    let me = include_str!("fuzz_smoke.rs");
    let manifest = include_str!("../fuzz/Cargo.toml");
    for (name, _) in TARGETS {
        assert!(me.contains(&format!("run(\"{name}\")")), "no smoke test for {name}");
        assert!(manifest.contains(&format!("name = \"{name}\"")), "no cargo-fuzz target for {name}");
    }
}
