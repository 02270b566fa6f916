//! `husk commit` of a paused sandbox (docs/sandboxes.md, "Pause and
//! resume"): the commit's freeze and the pause are two holders of one
//! freeze. Its own file: it needs imagekit's image store, which cannot
//! share a test crate with tests/common.
mod imagekit;

use serde_json::Value;
use std::path::{Path, PathBuf};

fn unified(rec: &Value) -> PathBuf {
    let dirs = rec["cgroup"]["dirs"].as_array().expect("the sandbox has cgroups");
    let d = dirs.iter().find(|d| d["unified"] == true).expect("a unified cgroup dir");
    PathBuf::from(d["path"].as_str().unwrap())
}

fn frozen(dir: &Path) -> bool {
    let events = std::fs::read_to_string(dir.join("cgroup.events")).unwrap_or_default();
    events.lines().any(|l| l == "frozen 1")
}

/// A commit's freeze of a paused sandbox joins the pause: the commit's
/// thaw leaves it paused (the tree runs only when every holder let go),
/// and what it committed is the paused sandbox's files.
#[test]
fn commit_of_a_paused_sandbox_leaves_it_paused() {
    let t = imagekit::TempDir::new("pause-commit");
    let live = imagekit::Live::new(&t, imagekit::busybox_data_store(&t));
    let id = live.create(&["--image", "bb", "--writable"]);
    live.ok(&["exec", &id, "--", "sh", "-c", "echo before-pause > /data/p"]);
    live.ok(&["pause", &id]);
    let rec: Value = serde_json::from_str(&live.ok(&["inspect", &id])).unwrap();
    let cg = unified(&rec);
    live.ok(&["commit", &id, "paused:1"]);
    assert!(frozen(&cg), "the commit's thaw ended the pause");
    let rec: Value = serde_json::from_str(&live.ok(&["inspect", &id])).unwrap();
    assert_eq!(rec["state"], "paused");
    live.ok(&["resume", &id]);
    assert!(!frozen(&cg));
    let o = live.husk(&["run", "--image", "paused:1", "--", "cat", "/data/p"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "before-pause\n");
}
