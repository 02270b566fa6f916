//! Shared helpers for integration tests: they run the real `husk` binary on
//! the real kernel. A test that cannot run here prints `SKIP: <reason>` and
//! returns; scripts/test.sh fails the suite when any SKIP line appears in CI.
#![allow(dead_code)]

use std::process::{Command, Output, Stdio};

pub fn husk_bin() -> &'static str {
    env!("CARGO_BIN_EXE_husk")
}

/// `husk <args>` with a clean, isolated store/state dir per test process.
pub fn husk(args: &[&str]) -> Command {
    let mut c = Command::new(husk_bin());
    c.args(args);
    c.stdin(Stdio::null());
    c
}

pub fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// Prints the visible skip marker.
pub fn skip(reason: &str) {
    println!("SKIP: {reason}");
    eprintln!("SKIP: {reason}");
}

/// Returns early from a test that needs root, with a SKIP line.
#[macro_export]
macro_rules! require_root {
    () => {
        if !common::is_root() {
            common::skip("needs root");
            return;
        }
    };
}

/// Runs `husk run --json [extra] -- cmd...` and returns (verdict, exit code).
pub fn run_json(extra: &[&str], cmd: &[&str]) -> (serde_json::Value, i32) {
    let mut args = vec!["run", "--json"];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(cmd);
    let out = husk(&args).output().expect("spawn husk");
    (verdict_of(&out), out.status.code().unwrap_or(-1))
}

pub fn verdict_of(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON verdict ({e}):\nstdout: {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Captured stdout text of a verdict.
pub fn stdout_of(v: &serde_json::Value) -> String {
    v["stdout"]["text"].as_str().unwrap_or_default().to_string()
}

pub fn stderr_of(v: &serde_json::Value) -> String {
    v["stderr"]["text"].as_str().unwrap_or_default().to_string()
}

/// `sh -c SCRIPT` in a default host-mode sandbox; returns the verdict.
pub fn sh(script: &str) -> serde_json::Value {
    run_json(&[], &["sh", "-c", script]).0
}
