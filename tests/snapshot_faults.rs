//! `husk commit` and `husk fork` killed or starved mid-way: the source
//! sandbox is never left frozen, nothing of a killed read stays in the
//! store past the next `husk gc`, and a full store is named as what
//! failed. Root pass (commit and fork need the source's cgroup).
mod imagekit;
use imagekit::*;
use nix::sys::signal::Signal;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The file that says whether the sandbox's tree is frozen, and the
/// value that means frozen (v2 `cgroup.freeze`, else v1 `freezer.state`).
fn freeze_file(live: &Live, id: &str) -> (PathBuf, &'static str) {
    let rec: Value = serde_json::from_str(
        &std::fs::read_to_string(live.state.join("sandboxes").join(id).join("state.json")).unwrap(),
    )
    .unwrap();
    let dirs = rec["cgroup"]["dirs"].as_array().expect("the sandbox has cgroups").clone();
    if let Some(d) = dirs.iter().find(|d| d["unified"] == true) {
        return (Path::new(d["path"].as_str().unwrap()).join("cgroup.freeze"), "1");
    }
    let d = dirs
        .iter()
        .find(|d| d["controllers"].as_array().unwrap().iter().any(|c| c == "freezer"))
        .expect("a freezer cgroup");
    (Path::new(d["path"].as_str().unwrap()).join("freezer.state"), "FROZEN")
}

fn frozen(file: &(PathBuf, &str)) -> bool {
    std::fs::read_to_string(&file.0).map(|s| s.trim() == file.1).unwrap_or(false)
}

fn spawn(live: &Live, args: &[&str]) -> Child {
    Command::new(husk_bin())
        .args(args)
        .env("HUSK_ROOT", &live.store)
        .env("HUSK_STATE_DIR", &live.state)
        .env_remove("HUSK_ID_RANGE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn signal(child: &Child, sig: Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig);
}

/// Waits for `cond` up to `limit` (a bound on a hang, not a speed claim).
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Starts `husk <args>` (a commit or fork of `id`) and stops it (SIGSTOP)
/// while the sandbox is frozen for it: returns the stopped reader.
fn stop_while_frozen(live: &Live, id: &str, args: &[&str]) -> Child {
    let file = freeze_file(live, id);
    for _ in 0..50 {
        let mut reader = spawn(live, args);
        let mut seen = false;
        while reader.try_wait().unwrap().is_none() {
            if frozen(&file) {
                signal(&reader, Signal::SIGSTOP);
                // Stopped, and still frozen: stopped while it holds the freeze.
                seen = frozen(&file);
                break;
            }
        }
        if seen {
            return reader;
        }
        signal(&reader, Signal::SIGCONT);
        let _ = reader.wait();
    }
    panic!("never caught `husk {args:?}` while the sandbox was frozen");
}

/// A change large enough that reading it takes a while.
const MANY_FILES: &str = "mkdir -p /big && for i in $(seq 1500); do echo $i > /big/f$i; done && \
                          dd if=/dev/zero of=/big/blob bs=1M count=16 2>/dev/null";

fn killed_reader_leaves_source_running(what: &str) {
    let t = TempDir::new(&format!("killed-{what}"));
    let live = Live::new(&t, busybox_data_store(&t));
    let src = live.create(&["--image", "bb", "--writable", "--ttl", "5m"]);
    live.sh(&src, MANY_FILES);
    let args: Vec<&str> = match what {
        "commit" => vec!["commit", &src, "killed:1"],
        _ => vec!["fork", &src],
    };
    let reader = stop_while_frozen(&live, &src, &args);
    // An exec asked for while the sandbox is frozen waits for the thaw
    // rather than starting a command that freezes with it.
    // Its output goes to a file: a pipe would be held open by whatever of
    // the exec stays frozen, and reading it would hang the test.
    let out_file = t.join("exec.out");
    let mut exec = Command::new(husk_bin())
        .args(["exec", "--timeout", "60s", &src, "--", "echo", "ran"])
        .env("HUSK_ROOT", &live.store)
        .env("HUSK_STATE_DIR", &live.state)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    signal(&reader, Signal::SIGKILL);
    let mut reader = reader;
    let _ = reader.wait();

    let file = freeze_file(&live, &src);
    let thawed = eventually(Duration::from_secs(30), || !frozen(&file));
    let done = eventually(Duration::from_secs(90), || exec.try_wait().unwrap().is_some());
    if !done {
        let _ = exec.kill();
    }
    let _ = exec.wait();
    let tars: Vec<String> = tree(&live.store.join("tmp")).into_iter().filter(|n| n.starts_with("commit-")).collect();
    assert!(tars.is_empty(), "the killed {what} left its layer tar in the store: {tars:?}");
    assert!(thawed, "the SIGKILLed {what} left its source frozen ({})", file.0.display());
    assert!(done, "an exec into the source never ended after the {what} was killed");
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), "ran\n");
    // And the next commit of it works.
    live.ok(&["commit", &src, "after:1"]);
    assert!(!frozen(&file), "the commit thawed its source");
}

#[test]
fn killed_commit_leaves_its_source_running() {
    killed_reader_leaves_source_running("commit");
}

#[test]
fn killed_fork_leaves_its_source_running() {
    killed_reader_leaves_source_running("fork");
}

/// A tmpfs of its own at `dir` (the store), unmounted on drop.
struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(dir: &Path, size: &str) -> SmallFs {
        std::fs::create_dir_all(dir).unwrap();
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "husk-test", dir.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "mount tmpfs: {}", stderr(&o));
        SmallFs(dir.to_path_buf())
    }

    /// Fills it up but for `spare` bytes.
    fn fill(&self, spare: u64) {
        let st = nix::sys::statvfs::statvfs(&self.0).unwrap();
        let free = st.blocks_available() as u64 * st.fragment_size() as u64;
        let f = std::fs::File::create(self.0.join("filler")).unwrap();
        use std::io::Write;
        let mut w = std::io::BufWriter::new(f);
        let chunk = vec![1u8; 64 * 1024];
        let mut left = free.saturating_sub(spare);
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            if w.write_all(&chunk[..n]).is_err() {
                break;
            }
            left -= n as u64;
        }
        let _ = w.flush();
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn full_store_during_commit_is_named_as_the_store() {
    let t = TempDir::new("commit-enospc");
    let fs = SmallFs::mount(&t.join("store"), "64m");
    let live = Live::new(&t, busybox_data_store(&t));
    let src = live.create(&["--image", "bb", "--writable"]);
    live.sh(&src, "dd if=/dev/urandom of=/data/big bs=1M count=8 2>/dev/null");
    fs.fill(1024 * 1024);
    for args in [vec!["commit", &src, "full:1"], vec!["fork", &src]] {
        let o = live.husk(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(125), "{args:?}: {err}");
        assert!(err.contains("No space left on device"), "{args:?}: {err}");
        assert!(err.contains("image store"), "{args:?} names the store as what is full: {err}");
        assert!(!err.contains("reading its root"), "{args:?} does not blame the sandbox's root: {err}");
    }
    drop(live);
    drop(fs);
}

fn snapshot_images(live: &Live) -> Vec<String> {
    live.ok(&["image", "ls"]).lines().filter(|l| l.contains("snapshot/")).map(str::to_string).collect()
}

#[test]
fn snapshot_images_nobody_needs_are_collected() {
    let t = TempDir::new("snapshot-gc");
    let live = Live::new(&t, busybox_data_store(&t));
    let src = live.create(&["--image", "bb", "--writable"]);
    live.sh(&src, "echo x > /data/x");

    // A fork whose ids reach nobody (its stdout is closed): its forks are
    // removed, and its snapshot image is garbage.
    let (r, w) = nix::unistd::pipe().unwrap();
    drop(r);
    let o = Command::new(husk_bin())
        .args(["fork", &src])
        .env("HUSK_ROOT", &live.store)
        .env("HUSK_STATE_DIR", &live.state)
        .stdin(Stdio::null())
        .stdout(Stdio::from(w))
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    // A fork handed over: its image stays while a fork runs on it and
    // while its source lives.
    let v: Value = serde_json::from_str(&live.ok(&["fork", "--json", &src])).unwrap();
    let fork = v["sandboxes"][0]["id"].as_str().unwrap().to_string();
    let kept = v["snapshot"]["name"].as_str().unwrap().to_string();
    assert_eq!(snapshot_images(&live).len(), 2, "{:?}", snapshot_images(&live));

    let gc = live.ok(&["gc"]);
    let left = snapshot_images(&live);
    assert_eq!(left.len(), 1, "gc removed the unreceived fork's snapshot: {left:?}\n{gc}");
    assert!(left[0].contains(&kept), "{left:?}");
    live.ok(&["rm", &fork]);
    live.ok(&["gc"]);
    assert_eq!(snapshot_images(&live).len(), 1, "the source lives: its snapshot stays");

    live.ok(&["rm", &src]);
    let gc = live.ok(&["gc"]);
    assert!(snapshot_images(&live).is_empty(), "source and forks gone: {:?}\n{gc}", snapshot_images(&live));
}

/// A reader that asks for the freeze and is gone before the answer (killed
/// while the freeze settles): the supervisor's answer fails, and the hold
/// goes with the connection instead of keeping the sandbox frozen.
#[test]
fn reader_gone_before_the_freeze_answer_leaves_nothing_frozen() {
    let t = TempDir::new("freeze-hangup");
    let live = Live::new(&t, busybox_data_store(&t));
    let src = live.create(&["--image", "bb", "--ttl", "5m"]);
    let file = freeze_file(&live, &src);
    for round in 0..5 {
        drop(Freezer::ask(&live, &src));
        // The supervisor answers its connections in turn: once inspect
        // (a status request) is answered, the freeze request was handled.
        live.ok(&["inspect", &src]);
        let thawed = eventually(Duration::from_secs(30), || !frozen(&file));
        assert!(thawed, "round {round}: the sandbox stayed frozen for a reader that is gone");
    }
    assert_eq!(live.sh(&src, "echo ran"), "ran\n");
}
