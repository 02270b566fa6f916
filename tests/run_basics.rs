//! Smoke tests of `husk run` in host mode.
mod common;
use common::*;

#[test]
fn exit_code_of_command_is_returned() {
    let (v, code) = run_json(&[], &["sh", "-c", "echo out; echo err >&2; exit 3"]);
    assert_eq!(code, 3);
    assert_eq!(v["termination"], "exited");
    assert_eq!(stdout_of(&v), "out\n");
    assert_eq!(stderr_of(&v), "err\n");
}
