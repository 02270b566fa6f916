//! `husk fork` and `husk create --from-snapshot`: new sandboxes that start
//! from a live sandbox's current filesystem, read while it is frozen, as
//! one layer the forks share. Root pass (forks need the source's cgroup).
mod imagekit;
use imagekit::*;
use serde_json::Value;

fn layer_count(live: &Live) -> usize {
    std::fs::read_dir(live.store.join("layers")).unwrap().flatten().filter(|e| e.path().is_dir()).count()
}

/// `husk fork ... --json`: the snapshot and the forks' ids (adopted by
/// `live`, so they are removed with it).
fn fork(live: &Live, args: &[&str]) -> (Value, Vec<String>) {
    let mut all = vec!["fork", "--json"];
    all.extend_from_slice(args);
    let v: Value = serde_json::from_str(&live.ok(&all)).expect("fork --json");
    let ids: Vec<String> =
        v["sandboxes"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().into()).collect();
    for id in &ids {
        live.adopt(id);
    }
    (v, ids)
}

#[test]
fn fork_n_copies_diverge_independently() {
    let t = TempDir::new("fork");
    let live = Live::new(&t, busybox_data_store(&t));
    let src = live.create(&["--image", "bb", "--writable", "--workdir", "/work", "-e", "STAGE=prepared"]);
    live.sh(&src, "echo base > /work/state && echo sys > /data/sys && rm /data/a");
    let before = layer_count(&live);
    let (v, forks) = fork(&live, &[&src, "--count", "3"]);
    assert_eq!(forks.len(), 3, "{v}");
    // One layer of the changes, shared by every fork; its bytes are the
    // changed files', not the image's.
    assert_eq!(layer_count(&live), before + 1, "{v}");
    assert!(v["snapshot"]["changes"]["bytes"].as_u64().unwrap() < 100, "{v}");
    assert_eq!(v["snapshot"]["changes"]["whiteouts"], 1, "{v}");

    let look = "cat /work/state /data/sys; ls /data | tr '\\n' ' '; echo $STAGE; pwd";
    for (i, id) in forks.iter().enumerate() {
        assert_eq!(live.sh(id, look), "base\nsys\nb sys prepared\n/work\n", "fork {i} starts from the source");
        live.sh(id, &format!("echo fork{i} > /work/state && echo {i} > /data/own{i}"));
    }
    for (i, id) in forks.iter().enumerate() {
        let seen = live.sh(id, "cat /work/state; ls /data | tr '\\n' ' '");
        assert_eq!(seen, format!("fork{i}\nb own{i} sys "), "fork {i} sees only its own changes");
    }
    assert_eq!(live.sh(&src, "cat /work/state; ls /data | tr '\\n' ' '"), "base\nb sys ", "the source is untouched");

    // A fork of a fork: a file removed from the workdir stays removed.
    live.sh(&forks[0], "rm /work/state && echo again > /work/second");
    let (_, again) = fork(&live, &[&forks[0]]);
    assert_eq!(live.sh(&again[0], "ls /work; cat /data/own0"), "second\n0\n");

    // create --from-snapshot: create's own flags, the source's files, env and workdir.
    let made = live.create(&["--from-snapshot", &src]);
    assert_eq!(live.sh(&made, look), "base\nsys\nb sys prepared\n/work\n");
    let o = live.husk(&["exec", &made, "--", "sh", "-c", "echo x > /data/ro"]);
    assert_ne!(o.status.code(), Some(0), "without --writable its root is read-only");
}

#[test]
fn fork_of_busy_sandbox_is_consistent() {
    let t = TempDir::new("fork-busy");
    let live = Live::new(&t, busybox_data_store(&t));
    let src = live.create(&["--image", "bb", "--workdir", "/work", "--concurrent"]);
    // Ten token files move between two directories, one rename at a
    // time: at every instant each is in exactly one of them. A reader that
    // walks d1 (a thousand other files to read) and then d2 while they
    // move sees some twice, not at all, or loses one under its feet.
    live.sh(
        &src,
        "mkdir d1 d2 && for i in $(seq 1000); do echo $i > d1/p$i; echo $i > d2/q$i; done && \
         for i in 0 1 2 3 4 5 6 7 8 9; do echo $i > d1/f$i; done",
    );
    let writer = "touch started; while :; do for i in 0 1 2 3 4 5 6 7 8 9; do \
                  if [ -e d1/f$i ]; then mv d1/f$i d2/f$i; else mv d2/f$i d1/f$i; fi; done; done";
    let mut child = std::process::Command::new(husk_bin())
        .args(["exec", &src, "--", "sh", "-c", writer])
        .env("HUSK_ROOT", &live.store)
        .env("HUSK_STATE_DIR", &live.state)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    while live.husk(&["exec", &src, "--", "test", "-e", "started"]).status.code() != Some(0) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let check = "n=0; for i in 0 1 2 3 4 5 6 7 8 9; do for d in d1 d2; do \
                 [ -e $d/f$i ] && [ \"$(cat $d/f$i)\" = $i ] && n=$((n+1)); done; done; echo $n";
    for round in 0..4 {
        let (_, ids) = fork(&live, &[&src]);
        assert_eq!(live.sh(&ids[0], check), "10\n", "round {round}: every file exactly once");
    }
    // The source was thawed: its writer still runs and it answers.
    assert_eq!(live.sh(&src, "echo alive"), "alive\n");
    let _ = child.kill();
    let _ = child.wait();
}

mod rootless {
    use super::*;

    #[test]
    fn fork_refuses_a_sandbox_it_cannot_freeze() {
        // A sandbox without a cgroup (HUSK_NO_CGROUP=1, what a rootless
        // user gets here) cannot be frozen: fork refuses rather than read
        // a filesystem that changes under it, and stores nothing.
        let t = TempDir::new("fork-nocgroup");
        let live = Live::new(&t, busybox_data_store(&t));
        let o = std::process::Command::new(husk_bin())
            .args(["create", "--image", "bb", "--workdir", "/work"])
            .env("HUSK_ROOT", &live.store)
            .env("HUSK_STATE_DIR", &live.state)
            .env("HUSK_NO_CGROUP", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let id = stdout(&o).trim().to_string();
        live.adopt(&id);
        let o = live.husk(&["fork", &id, "--count", "2"]);
        assert_eq!(o.status.code(), Some(125), "{}", stdout(&o));
        assert!(stderr(&o).contains("cannot be frozen"), "{}", stderr(&o));
        assert!(!live.ok(&["image", "ls"]).contains("snapshot/"), "no snapshot image is left");
        let ls: Value = serde_json::from_str(&live.ok(&["ls", "--json"])).unwrap();
        assert_eq!(ls.as_array().unwrap().len(), 1, "no fork was started: {ls}");
    }
}
