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
