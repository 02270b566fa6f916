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

/// Runs `husk run ARGS -- true` expecting a refusal before any sandbox.
fn refused(args: &[&str]) -> String {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "true"]);
    let out = husk(&all).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(125), "{args:?} was not refused: {err}");
    err
}

#[test]
fn values_that_would_mean_something_else_are_refused() {
    // tmpfs reads size=0 as "unlimited"; a zero timeout kills every run;
    // a runsc flag under the native runtime would be silently ignored.
    for (args, needle) in [
        (&["--workdir-size", "0"][..], "no size limit"),
        (&["--tmp-size", "0"], "no size limit"),
        (&["--tmpfs", "/x:0"], "no size limit"),
        (&["--timeout", "0"], "kill every run"),
        (&["--timeout", "0s"], "kill every run"),
        (&["--runsc-platform", "foo"], "--runtime runsc or auto only"),
        (&["--runsc-path", "/usr/bin/runsc"], "--runtime runsc or auto only"),
    ] {
        let err = refused(args);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let out = husk(&["create", "--ttl", "0", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn limits_beyond_the_host_or_negative_are_refused_with_the_real_reason() {
    require_root!();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let err = refused(&["--cpus", &(cpus * 500).to_string()]);
    assert!(err.contains(&format!("this host has {cpus} cpus")), "{err}");
    let err = refused(&["--memory", "100T"]);
    assert!(err.contains("of RAM"), "{err}");
    // Negative values reach husk (not clap's "unexpected argument '-1'").
    for (flag, value) in [("--cpus", "-1"), ("--pids", "-3"), ("--cpus", "-0.5")] {
        let err = refused(&[flag, value]);
        assert!(err.contains("cannot be negative") && !err.contains("unexpected argument"), "{flag} {value}: {err}");
    }
}

#[test]
fn env_name_with_a_control_character_is_refused() {
    let err = refused(&["--env", "A\tB=1"]);
    assert!(err.contains("control characters"), "{err}");
    let dir = TempDir::new("env");
    let file = dir.path().join("env");
    std::fs::write(&file, "GOOD=1\nESC\x1b[0m=2\n").unwrap();
    let err = refused(&["--env-file", file.to_str().unwrap()]);
    assert!(err.contains("control characters"), "{err}");
}

#[test]
fn env_name_unset_in_husk_stays_unset_in_the_sandbox() {
    // Docker's rule: `--env NAME` without a value copies NAME from the
    // caller, and leaves it unset (not empty) when the caller has none.
    let out = husk(&["run", "--json", "-e", "HUSK_TEST_UNSET_VAR", "-e", "HUSK_TEST_SET_VAR", "--", "env"])
        .env_remove("HUSK_TEST_UNSET_VAR")
        .env("HUSK_TEST_SET_VAR", "v")
        .output()
        .unwrap();
    let v = verdict_of(&out);
    let env = stdout_of(&v);
    assert!(env.lines().any(|l| l == "HUSK_TEST_SET_VAR=v"), "{env}");
    assert!(!env.contains("HUSK_TEST_UNSET_VAR"), "{env}");
}

#[test]
fn image_path_that_does_not_exist_is_named_as_missing() {
    for r in ["/nonexistent/husk-image", "./no-such-image-dir"] {
        let err = refused(&["--image", r]);
        assert!(err.contains("no such file or directory") && !err.contains("invalid image name"), "{r}: {err}");
    }
}
