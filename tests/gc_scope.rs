//! `husk gc` with a state dir of its own acts on that state dir's
//! cgroups only: another state dir's empty sandbox cgroup (a create there
//! may be about to start its init in it) and runs' cgroups (recorded in no
//! state dir) are left alone and reported. Root pass (real cgroups).
mod imagekit;
use imagekit::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// husk's parent in the unified hierarchy, from a live sandbox's record.
fn unified_parent(live: &Live, id: &str) -> PathBuf {
    let rec: Value = serde_json::from_str(
        &std::fs::read_to_string(live.state.join("sandboxes").join(id).join("state.json")).unwrap(),
    )
    .unwrap();
    let dirs = rec["cgroup"]["dirs"].as_array().expect("the sandbox has cgroups").clone();
    let d = dirs.iter().find(|d| d["unified"] == true).expect("a unified cgroup");
    Path::new(d["path"].as_str().unwrap()).parent().unwrap().to_path_buf()
}

/// A 12-hex id no husk made.
fn fresh_id(n: u32) -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{:012x}", (t as u64 ^ ((std::process::id() as u64) << 20) ^ n as u64) & 0xffff_ffff_ffff)
}

/// Cgroup directories this test made, removed (if still there) on drop.
struct Made(Vec<PathBuf>);

impl Drop for Made {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir(d);
        }
    }
}

#[test]
fn gc_with_own_state_dir_leaves_other_state_dirs_cgroups() {
    let t = TempDir::new("gc-scope");
    let live = Live::new(&t, busybox_data_store(&t));
    let mine = live.create(&["--image", "bb"]);
    let parent = unified_parent(&live, &mine);
    live.ok(&["rm", &mine]);

    // Another state dir's: an empty sandbox cgroup (its create made it and
    // has not started its init yet) and a run's empty cgroup.
    let foreign_sbx = parent.join(format!("sbx-{}", fresh_id(1)));
    let run = parent.join(fresh_id(2));
    // This state dir's: the cgroup of a sandbox that ended here, left over.
    let own_leftover = parent.join(format!("sbx-{mine}"));
    let made = Made(vec![foreign_sbx.clone(), run.clone(), own_leftover.clone()]);
    // Old enough for any gc (as leftovers would be), so that only whose
    // they are decides; --min-age keeps every younger cgroup out of it.
    for d in &made.0 {
        std::fs::create_dir(d).unwrap();
        let o = std::process::Command::new("touch").arg("-d").arg("2 hours ago").arg(d).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }

    let o = live.husk(&["gc", "--min-age", "1h"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(foreign_sbx.is_dir(), "gc removed another state dir's sandbox cgroup:\n{out}");
    assert!(run.is_dir(), "gc with its own state dir removed a run's cgroup:\n{out}");
    assert!(out.contains(&format!("left sandbox cgroup {}", foreign_sbx.display())), "{out}");
    assert!(out.contains("run cgroups left alone"), "{out}");
    assert!(!own_leftover.exists(), "its own ended sandbox's cgroup is removed:\n{out}");
}
