//! `husk run` and `husk create` make a sandbox through one pipeline
//! (src/sandbox/prepare.rs: backend, then root, then plan), so the same bad
//! input fails at the same step, with the same words and exit code, in both.
//! The threat is a caller (or a front door: serve, MCP) that learns one
//! command's failure and meets another for the same mistake; and an image
//! pulled (or a root resolved) for a run the backend would refuse anyway.
mod common;

use common::*;
use serde_json::Value;

/// `husk <cmd> --json <flags>` in private dirs: the failure object and exit.
fn failure(cmd: &[&str], dirs: &TempDir) -> (Value, i32) {
    let state = dirs.path().join("state");
    let root = dirs.path().join("root");
    let out = husk(cmd)
        .env("HUSK_STATE_DIR", &state)
        .env("HUSK_ROOT", &root)
        .env_remove("HUSK_NO_CGROUP")
        .output()
        .expect("run husk");
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{cmd:?}: stdout is not one JSON object ({e}): {text}"));
    (v, out.status.code().unwrap_or(-1))
}

fn same_failure(flags: &[&str], want_step: &str) {
    let dirs = TempDir::new("order");
    let mut run = vec!["run", "--json"];
    run.extend_from_slice(flags);
    run.extend_from_slice(&["--", "true"]);
    let mut create = vec!["create", "--json"];
    create.extend_from_slice(flags);
    let (r, r_code) = failure(&run, &dirs);
    let (c, c_code) = failure(&create, &dirs);
    assert_eq!((r_code, c_code), (125, 125), "run: {r}\ncreate: {c}");
    for v in [&r, &c] {
        assert_eq!(v["termination"], "setup_failed", "{v}");
        assert_eq!(v["error"]["step"], want_step, "{flags:?}: {v}");
    }
    assert_eq!(r["error"]["message"], c["error"]["message"], "{flags:?}");
    assert_eq!(r["error"]["hint"], c["error"]["hint"], "{flags:?}");
    assert_eq!(r["error"]["errno"], c["error"]["errno"], "{flags:?}");
}

#[test]
fn missing_rootfs_fails_the_same_for_run_and_create() {
    same_failure(&["--rootfs", "/nonexistent/husk-no-such-root"], "root");
}

#[test]
fn backend_refusal_comes_before_the_root_for_run_and_create() {
    // Both inputs are bad: the backend (which refuses --seccomp-report
    // under runsc, installed or not) is asked first, so no root is
    // resolved (no image pulled) for a run that cannot happen.
    same_failure(&["--rootfs", "/nonexistent/husk-no-such-root", "--runtime", "runsc", "--seccomp-report"], "backend");
}

#[test]
fn a_refused_flag_value_fails_the_same_for_run_and_create() {
    same_failure(&["--rootfs", "/", "--memory", "lots"], "arguments");
}
