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

/// A host path that does not exist is the kernel's ENOENT: the verdict
/// names it as `error.errno`, not only in the message text, with the
/// message and exit code as before.
#[test]
fn missing_host_paths_name_their_errno_in_the_verdict() {
    let (v, code) = run_json(&["--bind", "/husk-no-such-source:/x"], &["true"]);
    assert_eq!(code, 125, "{v:#}");
    assert_eq!(v["error"]["step"], "arguments", "{v:#}");
    assert_eq!(v["error"]["errno"], "ENOENT", "{v:#}");
    let msg = v["error"]["message"].as_str().unwrap_or("");
    assert!(
        msg.contains("--bind source \"/husk-no-such-source\"") && msg.contains("give an existing host path"),
        "{v:#}"
    );

    let (v, code) = run_json(&["--verdict-file", "/husk-no-such-dir/v.json"], &["true"]);
    assert_eq!(code, 125, "{v:#}");
    assert_eq!(v["error"]["step"], "arguments", "{v:#}");
    assert_eq!(v["error"]["errno"], "ENOENT", "{v:#}");
    assert!(v["error"]["message"].as_str().unwrap_or("").contains("create it first"), "{v:#}");
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

/// `husk ARGS` under a 1 GiB address-space limit, so a husk that reads a
/// file without a bound dies (allocation failure) instead of eating the
/// host; a blocked one is killed after a minute. (status code, stderr)
fn husk_bounded(args: &[&str]) -> (Option<i32>, String) {
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 1048576; exec \"$@\"")
        .arg("sh")
        .arg(husk_bin())
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut status = None;
    let ended = wait_until(std::time::Duration::from_secs(60), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !ended {
        let _ = child.kill();
        let _ = child.wait();
        panic!("husk {args:?} blocked (reading a FIFO?)");
    }
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    (status.unwrap().code(), err)
}

/// Every file a user names goes through one bounded reader: a device
/// (`/dev/zero` grew husk by GBs), a FIFO (blocked forever), a directory
/// or a file over the bound is refused at once, saying which and why.
#[test]
fn user_named_files_that_are_devices_fifos_or_huge_are_refused() {
    let dir = TempDir::new("userfile");
    let fifo = dir.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let fifo = fifo.to_str().unwrap();
    let big_env = dir.join("big.env");
    std::fs::write(&big_env, format!("A={}\n", "x".repeat(1 << 20))).unwrap();
    // A valid profile, padded in front past the 4 MiB bound.
    let profile =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/seccomp/docker-style.json")).unwrap();
    let big_profile = dir.join("big.json");
    std::fs::write(&big_profile, format!("{}{profile}", " ".repeat(4 << 20))).unwrap();
    let (big_env, big_profile) = (big_env.to_str().unwrap(), big_profile.to_str().unwrap());
    let dirp = dir.path().to_str().unwrap();
    for (args, needle) in [
        (&["run", "--env-file", "/dev/zero", "--", "true"][..], "not a regular file (a character device)"),
        (&["run", "--env-file", fifo, "--", "true"], "not a regular file (a FIFO)"),
        (&["run", "--env-file", dirp, "--", "true"], "not a regular file (a directory)"),
        (&["run", "--env-file", big_env, "--", "true"], "too large (1048579 bytes, limit 1048576)"),
        (&["run", "--seccomp", "/dev/zero", "--", "true"], "not a regular file (a character device)"),
        (&["run", "--seccomp", fifo, "--", "true"], "not a regular file (a FIFO)"),
        (&["run", "--seccomp", big_profile, "--", "true"], "limit 4194304)"),
        (&["seccomp", "check", "/dev/zero"], "not a regular file (a character device)"),
        (&["seccomp", "check", fifo], "not a regular file (a FIFO)"),
        (&["seccomp", "check", big_profile], "limit 4194304)"),
        (&["create", "--env-file", "/dev/zero"], "not a regular file (a character device)"),
    ] {
        let (code, err) = husk_bounded(args);
        assert_eq!(code, Some(125), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// `husk run ARGS` started with a hard nofile limit of 512 (`prlimit`).
fn with_nofile_512(args: &[&str]) -> std::process::Output {
    let husk = husk_bin();
    let mut c = std::process::Command::new("prlimit");
    c.arg("--nofile=512").arg(&husk).args(args);
    c.output().expect("prlimit (util-linux)")
}

#[test]
fn default_nofile_above_the_callers_hard_limit_is_clamped_not_a_setup_failure() {
    let out = with_nofile_512(&["run", "--json", "--", "sh", "-c", "ulimit -n; ulimit -Hn"]);
    let v = verdict_of(&out);
    assert_eq!(v["exit_code"], 0, "{v:#}");
    assert_eq!(stdout_of(&v), "512\n512\n");
    let rl = v["isolation"]["rlimits"].as_array().unwrap_or_else(|| panic!("no isolation.rlimits: {v:#}"));
    let nofile = rl.iter().find(|r| r["name"] == "nofile").unwrap();
    assert_eq!((nofile["hard"].as_u64(), nofile["clamped_from"].as_u64()), (Some(512), Some(1024)), "{nofile}");
    assert_eq!(nofile["source"], "default");
    // An explicit value above it is still refused, with a hint.
    let out = with_nofile_512(&["run", "--json", "--rlimit", "nofile=1000", "--", "true"]);
    let v = verdict_of(&out);
    assert_eq!(v["exit_code"], 125, "{v:#}");
    assert!(v["error"]["message"].as_str().unwrap().contains("above husk's own (512)"), "{v:#}");
    assert!(v["error"]["hint"].as_str().unwrap_or("").contains("at most 512"), "{v:#}");
}

/// An environment execve cannot take is husk's failure (125, saying why),
/// not the command's "not executable" (126): one variable over the
/// kernel's 128 KiB per string is refused before the sandbox; too much in
/// all (here under a small stack limit) fails at exec as E2BIG.
#[test]
fn environment_too_big_for_execve_is_husks_failure_not_the_commands() {
    let dir = TempDir::new("e2big");
    let one = dir.join("one.env");
    std::fs::write(&one, format!("BIG={}\n", "x".repeat(200_000))).unwrap();
    let err = refused(&["--env-file", one.to_str().unwrap()]);
    assert!(err.contains("environment variable BIG") && err.contains("E2BIG"), "{err}");
    let many = dir.join("many.env");
    let text: String = (0..8).map(|i| format!("V{i}={}\n", "x".repeat(100_000))).collect();
    std::fs::write(&many, text).unwrap();
    let (v, code) = run_json(&["--rlimit", "stack=256K", "--env-file", many.to_str().unwrap()], &["true"]);
    assert_eq!(code, 125, "{v:#}");
    assert_eq!(v["error"]["errno"], "E2BIG", "{v:#}");
}

/// `husk gc --cgroup-parent ..` is a usage error like `run`'s: 125, and
/// nothing is collected.
#[test]
fn gc_with_an_invalid_cgroup_parent_is_refused_as_a_usage_error() {
    let out = husk(&["gc", "--cgroup-parent", ".."]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("--cgroup-parent") && out.stdout.is_empty(), "{err}");
}
