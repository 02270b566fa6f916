//! The life of long-lived sandboxes beyond create/exec/rm: which state
//! directory a command acts on, sandboxes whose record was deleted under
//! them, the absolute lifetime and what an exec on an ended sandbox says,
//! and the sandbox-level events (OOM kills, pids-limit hits) an exec
//! reports.
mod common;
mod sandboxkit;

mod rootless {
    use super::sandboxkit::*;

    /// Two tools on one host keep apart by state directory: `ls`,
    /// `rm --all|--label` and `gc` act on theirs only, and say which.
    #[test]
    fn gc_ls_and_rm_name_the_state_dir_they_act_on() {
        let a = Sbx::new();
        let b = Sbx::new();
        let in_a = a.create(&["--label", "tool=a"]);
        let in_b = b.create(&["--label", "tool=a"]);
        let dir_a = a.state.path().display().to_string();
        let ls = a.out(&["ls"]);
        let err = String::from_utf8_lossy(&ls.stderr);
        assert!(ls.status.success() && err.contains(&dir_a), "ls does not name its state dir: {err}");
        let ls = a.out(&["ls", "--json"]);
        assert!(String::from_utf8_lossy(&ls.stderr).contains(&dir_a));
        let gc = a.out(&["gc", "--json"]);
        let report: serde_json::Value = serde_json::from_slice(&gc.stdout).expect("gc --json");
        assert_eq!(report["state_dir"], serde_json::json!(dir_a), "{report:#}");
        let gc = a.out(&["gc"]);
        let text = String::from_utf8_lossy(&gc.stdout);
        assert!(text.contains(&format!("state dir {dir_a}")), "{text}");
        let rm = a.out(&["rm", "--label", "tool=a", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&rm.stdout).expect("rm --json");
        assert_eq!(v["state_dir"], serde_json::json!(dir_a), "{v}");
        assert_eq!(v["removed"], serde_json::json!([in_a]), "{v}");
        let rm = a.out(&["rm", "--all"]);
        let err = String::from_utf8_lossy(&rm.stderr);
        assert!(rm.status.success() && err.contains(&dir_a), "rm --all does not name its state dir: {err}");
        assert_eq!(b.ids(), vec![in_b], "rm --label / --all in one state dir reached another's sandbox");
    }
}

use common::*;
use sandboxkit::*;
use std::time::Duration;

/// Deleting a live sandbox's record (its directory, or the whole state
/// directory) used to leave its processes running while every command said
/// "no sandbox": `husk gc` finds the supervisor by what is on the host and
/// ends the sandbox, and only this state directory's.
#[test]
fn gc_ends_sandbox_whose_state_dir_was_deleted() {
    require_root!();
    let other = Sbx::new();
    let kept = other.create(&[]);
    let s = Sbx::new();
    for (tag, whole) in [("record", false), ("statedir", true)] {
        let (marker, tmpfs) = marker_mount(tag);
        let id = s.create(&["--tmpfs", &tmpfs, "--name", tag]);
        let daemon = unique("unrecorded");
        let (v, _) = s.exec_json(&id, &[], &[PROBE, "daemon", &daemon, "300"]);
        assert_eq!(v["termination"], "exited", "{v:#}");
        let rec = s.inspect(&id);
        let gone = if whole { s.state.path().to_path_buf() } else { s.dir(&id) };
        std::fs::remove_dir_all(&gone).unwrap();
        assert!(running(&rec["supervisor"]) && !host_pids_with(&format!("sleep\0{daemon}\0")).is_empty());
        let out = s.out(&["gc"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{tag}: {text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains(&format!("removed sandbox {id}")), "{tag}: {text}");
        assert_gone(&s, &rec, Some(&marker));
        assert!(
            wait_until(Duration::from_secs(10), || host_pids_with(&format!("sleep\0{daemon}\0")).is_empty()),
            "{tag}: a process of the sandbox whose state was deleted still runs"
        );
    }
    assert_eq!(other.ids(), vec![kept.clone()], "gc of one state dir reaped another's sandbox");
    assert_eq!(other.sh(&kept, "echo alive").0, "alive\n");
}
