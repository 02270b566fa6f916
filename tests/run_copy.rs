//! `husk run --copy-in HOST:PATH / --copy-out PATH:HOST`: files go in
//! before the one-shot command starts and come out after it ended, by `husk
//! cp`'s rules (modes kept, a sandbox-made symlink never followed on the
//! host, escapes refused); a failed copy is a verdict with step "copy", and
//! no sandbox is left behind either way.
mod common;
mod sandboxkit;

use common::*;
use sandboxkit::*;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// `husk run --json <args>` in `s`'s state dir: (verdict, exit code, stderr).
fn run(s: &Sbx, args: &[&str]) -> (Value, i32, String) {
    let mut a = vec!["run", "--json"];
    a.extend_from_slice(args);
    let out = s.out(&a);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("no verdict ({e}): {err}"));
    (v, out.status.code().unwrap_or(-1), err)
}

fn nothing_left(s: &Sbx) {
    assert_eq!(s.ids(), Vec::<String>::new(), "husk run left a sandbox behind");
    let left: Vec<_> = std::fs::read_dir(s.state.join("sandboxes"))
        .map(|d| d.flatten().map(|e| e.file_name()).filter(|n| n != "names" && n != "tombstones").collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "state left in {}: {left:?}", s.state.path().display());
}

fn copy_refusal(v: &Value, code: i32, needle: &str) {
    assert_eq!(code, 125, "{v:#}");
    assert_eq!(v["termination"], "setup_failed", "{v:#}");
    assert_eq!(v["error"]["step"], "copy", "{v:#}");
    let m = v["error"]["message"].as_str().unwrap_or_default();
    assert!(m.contains(needle), "the error does not say {needle:?}: {m}");
}

mod rootless {
    use super::*;

    #[test]
    fn run_copy_in_then_out_around_one_shot_command() {
        let s = Sbx::new();
        let host = TempDir::new("run-copy");
        let src = host.join("tree");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("run.sh"), "#!/bin/sh\necho ran\n").unwrap();
        std::fs::write(src.join("sub/data"), "input data").unwrap();
        std::fs::set_permissions(src.join("run.sh"), std::fs::Permissions::from_mode(0o750)).unwrap();
        let script = "stat -c %a /tmp/tree/run.sh && /tmp/tree/run.sh && mkdir /tmp/out && \
                      tr a-z A-Z < /tmp/tree/sub/data > /tmp/out/result && chmod 604 /tmp/out/result && \
                      ln -s /etc /tmp/out/etc";
        let in_arg = format!("{}:/tmp/", src.display());
        let out_arg = format!("/tmp/out:{}", host.join("back").display());
        let (v, code, err) = run(&s, &["--copy-in", &in_arg, "--copy-out", &out_arg, "--", "sh", "-c", script]);
        assert_eq!(code, 0, "{v:#} {err}");
        assert_eq!(stdout_of(&v), "750\nran\n");
        assert_eq!(std::fs::read_to_string(host.join("back/result")).unwrap(), "INPUT DATA");
        assert_eq!(mode(&host.join("back/result")), 0o604);
        // The sandbox's symlink to /etc lands as a symlink, not as the host's /etc.
        assert_eq!(std::fs::read_link(host.join("back/etc")).unwrap(), Path::new("/etc"));
        let copies = v["copies"].as_array().unwrap();
        assert_eq!(copies.len(), 2, "{v:#}");
        assert_eq!((copies[0]["direction"].as_str(), copies[0]["entries"].as_u64()), (Some("in"), Some(4)));
        assert_eq!((copies[1]["direction"].as_str(), copies[1]["entries"].as_u64()), (Some("out"), Some(3)));
        assert!(v["phases_ms"]["copy_in"].is_number() && v["phases_ms"]["copy_out"].is_number(), "{v:#}");
        nothing_left(&s);
    }

    #[test]
    fn run_copy_out_follows_a_failing_command_and_failed_copies_are_verdicts() {
        let s = Sbx::new();
        let host = TempDir::new("run-copy-fail");
        // The command failed: its files still come out, its code is the verdict's.
        let out_arg = format!("/tmp/out:{}", host.join("got").display());
        let (v, code, _) =
            run(&s, &["--copy-out", &out_arg, "--", "sh", "-c", "mkdir /tmp/out; echo x > /tmp/out/f; exit 3"]);
        assert_eq!(code, 3, "{v:#}");
        assert_eq!(std::fs::read_to_string(host.join("got/f")).unwrap(), "x\n");
        // Nothing to copy out: husk's failure, saying how the command ended,
        // with the command's output kept.
        let missing = format!("/tmp/missing:{}", host.join("m").display());
        let (v, code, _) = run(&s, &["--copy-out", &missing, "--", "sh", "-c", "echo said; exit 3"]);
        copy_refusal(&v, code, "after the command exited 3");
        assert_eq!(stdout_of(&v), "said\n");
        assert!(!host.join("m").exists());
        // A host source that is not there is refused before any sandbox is made.
        let absent = format!("{}:/tmp/", host.join("absent").display());
        let (v, code, _) = run(&s, &["--copy-in", &absent, "--", "true"]);
        copy_refusal(&v, code, "absent");
        // A symlink the command made toward the host's directory is resolved
        // inside the sandbox's root: the host's file is never read.
        let victim = host.join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(victim.join("marker"), "host secret").unwrap();
        let esc = format!("/tmp/esc/marker:{}", host.join("stolen").display());
        let script = format!("ln -s {} /tmp/esc", victim.display());
        let (v, code, _) = run(&s, &["--copy-out", &esc, "--", "sh", "-c", &script]);
        copy_refusal(&v, code, "/tmp/esc/marker");
        assert!(!host.join("stolen").exists());
        // Into a read-only place: refused, naming the writable places.
        let ro = format!("{}:/usr/", victim.join("marker").display());
        let (v, code, _) = run(&s, &["--copy-in", &ro, "--", "true"]);
        copy_refusal(&v, code, "--copy-in");
        assert_eq!(v["error"]["errno"], "EROFS", "{v:#}");
        // A malformed operand is the command line's refusal.
        let (v, code, _) = run(&s, &["--copy-in", "nocolon", "--", "true"]);
        assert_eq!((code, v["error"]["step"].as_str()), (125, Some("arguments")), "{v:#}");
        nothing_left(&s);
    }

    /// Under gVisor the copies are made by husk's copier inside the
    /// sandbox (`runsc exec`): the same round trip, and nothing left.
    #[test]
    fn run_copy_under_runsc_copies_in_and_out() {
        require_runsc!();
        let s = Sbx::new();
        let host = TempDir::new("run-copy-runsc");
        std::fs::write(host.join("f"), "input data").unwrap();
        let in_arg = format!("{}:/tmp/", host.join("f").display());
        let out_arg = format!("/tmp/out:{}", host.join("out").display());
        let script = "uname -v && mkdir /tmp/out && tr a-z A-Z < /tmp/f > /tmp/out/result";
        let (v, code, err) =
            run(&s, &["--runtime", "runsc", "--copy-in", &in_arg, "--copy-out", &out_arg, "--", "sh", "-c", script]);
        assert_eq!(code, 0, "{v:#} {err}");
        assert_eq!(v["backend"], "runsc", "{v:#}");
        assert_eq!(std::fs::read_to_string(host.join("out/result")).unwrap(), "INPUT DATA");
        nothing_left(&s);
    }
}
