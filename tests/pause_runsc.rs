//! `husk pause` / `husk resume` of gVisor sandboxes (`--runtime runsc`):
//! a checkpoint of every process with its memory into the sandbox's state
//! dir (the processes end), a restore on resume (docs/sandboxes.md, "Pause
//! and resume"). Real runsc (Debian's package), as root.
mod common;
mod sandboxkit;

use common::*;
use sandboxkit::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A Python process that holds a million-int list and a random secret in
/// its memory only, and answers `/tmp/ask` with them and its pid.
const HOLDER_PY: &str = r#"
import os, random, time
x = list(range(1000000))
secret = random.getrandbits(48)
open('/tmp/ready', 'w').write('1')
while True:
    if os.path.exists('/tmp/ask'):
        os.remove('/tmp/ask')
        with open('/tmp/ans.tmp', 'w') as f:
            f.write(f'{secret} {sum(x)} {os.getpid()}')
        os.rename('/tmp/ans.tmp', '/tmp/ans')
    time.sleep(0.05)
"#;

/// A shell that holds a variable in memory only, answers `/tmp/ask` with
/// it and takes a new value from `/tmp/set`.
const HOLDER_SH: &str = "v=mem$$-$(cat /proc/uptime | cut -d' ' -f1); touch /tmp/ready; \
    while :; do if [ -e /tmp/set ]; then v=$(cat /tmp/set); rm /tmp/set; fi; if [ -e /tmp/ask ]; then rm /tmp/ask; echo \"$v\" > /tmp/ans.tmp; mv /tmp/ans.tmp /tmp/ans; fi; sleep 0.05; done";

/// Starts `argv` in the background in sandbox `id` and waits for its
/// `/tmp/ready`.
fn start_holder(s: &Sbx, id: &str, argv: &str) {
    let script = format!(
        "{argv} >/dev/null 2>&1 </dev/null & i=0; while [ ! -e /tmp/ready ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done; cat /tmp/ready >/dev/null && echo up"
    );
    let (out, code) = s.sh(id, &script);
    assert_eq!((out.as_str(), code), ("up\n", 0), "the holder did not start");
}

/// What the holder answers now (its memory).
fn ask(s: &Sbx, id: &str) -> String {
    let (out, code) = s.sh(
        id,
        "rm -f /tmp/ans; touch /tmp/ask; i=0; while [ ! -e /tmp/ans ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; cat /tmp/ans",
    );
    assert_eq!(code, 0, "the holder did not answer: {out}");
    assert!(!out.trim().is_empty(), "the holder answered nothing");
    out.trim().to_string()
}

/// Live (not zombie) runsc processes (runsc, gofer, sentry) naming `id`.
fn runsc_processes_of(id: &str) -> Vec<i32> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return found };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let text = String::from_utf8_lossy(&cmd);
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with('Z')))
            .unwrap_or(true);
        if text.starts_with("runsc") && text.contains(id) && !zombie {
            found.push(pid);
        }
    }
    found
}

/// runsc never chowned the host's /dev/null (it does so to a host device
/// given as a container's stdio; husk never gives it one).
fn assert_dev_null_untouched() {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata("/dev/null").unwrap();
    assert_eq!((md.uid(), md.gid(), md.rdev()), (0, 0, nix::sys::stat::makedev(1, 3)), "/dev/null was changed");
}

/// The paused record names its image, whose size it gives, inside the
/// sandbox's own state dir; nothing of the sandbox runs.
fn assert_checkpointed(s: &Sbx, id: &str, paused: &Value) -> PathBuf {
    let cp = &paused["checkpoint"];
    let dir = PathBuf::from(cp["path"].as_str().unwrap_or_else(|| panic!("no checkpoint in {paused}")));
    assert!(dir.starts_with(s.dir(id)), "the image {} is outside the sandbox's state dir", dir.display());
    let image = dir.join("checkpoint.img");
    let size = std::fs::metadata(&image).unwrap_or_else(|e| panic!("{}: {e}", image.display())).len();
    assert!(size > 0 && cp["bytes"] == size, "the record says {} bytes, the image has {size}", cp["bytes"]);
    let rec = s.inspect(id);
    assert_eq!(rec["state"], "paused", "{rec:#}");
    assert_eq!(rec["checkpoint"], *cp, "{rec:#}");
    assert!(
        wait_until(Duration::from_secs(5), || runsc_processes_of(id).is_empty()),
        "a checkpointed sandbox's processes still run: {:?}",
        runsc_processes_of(id)
    );
    dir
}

/// A Python interpreter's memory (a million-int list, a random secret,
/// its pid) lives through pause and resume under gVisor, though every
/// process of the sandbox ended in between; an exec while paused is
/// refused and runs nothing.
#[test]
fn pause_resume_keeps_session_variables_under_runsc() {
    require_root!();
    require_runsc!();
    assert!(
        Path::new("/usr/bin/python3").exists(),
        "SKIP: /usr/bin/python3 missing (scripts/test.sh installs python3)"
    );
    let s = Sbx::new();
    let id = s.create_with(&["--runtime", "runsc", "--ttl", "5m"]);
    start_holder(&s, &id, &format!("python3 -c \"{}\"", HOLDER_PY.replace('"', "\\\"")));
    let before = ask(&s, &id);
    assert_eq!(before.split(' ').nth(1), Some("499999500000"), "{before}");

    let out = stdout_ok(&s.out(&["pause", "--json", &id]), "pause");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["id"].as_str(), v["state"].as_str()), (Some(id.as_str()), Some("paused")), "{v}");
    let image_dir = assert_checkpointed(&s, &id, &v);
    let out = s.out(&["exec", &id, "--", "sh", "-c", "echo ran > /tmp/ran"]);
    assert_eq!(out.status.code(), Some(125), "an exec into a paused sandbox was not refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("husk resume {id}")));

    let out = stdout_ok(&s.out(&["resume", "--json", &id]), "resume");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["state"], "ready", "{v}");
    assert_eq!(ask(&s, &id), before, "the interpreter's memory changed across pause/resume");
    assert_eq!(s.sh(&id, "cat /tmp/ran 2>/dev/null; uname -v").0, format!("{GVISOR_UNAME_V}\n"));
    let rec = s.inspect(&id);
    assert_eq!((&rec["state"], rec.get("checkpoint")), (&Value::from("ready"), None), "{rec:#}");
    assert!(!image_dir.exists(), "the image stays after the restore");
    assert_dev_null_untouched();
}

/// The pause belongs to the sandbox's supervisor, not to the husk that
/// asked: that process is gone, a paused sandbox's lease does not run out
/// (here longer than its --ttl), and a new husk resumes it with its
/// memory; resumed, its lease runs again and ends it.
#[test]
fn runsc_pause_survives_husk_restart() {
    require_root!();
    require_runsc!();
    let s = Sbx::new();
    let root = busybox_rootfs().display().to_string();
    let id = s.create_with(&["--runtime", "runsc", "--rootfs", &root, "--ttl", "2s"]);
    start_holder(&s, &id, &format!("sh -c '{}'", HOLDER_SH.replace('\'', "'\\''")));
    let before = ask(&s, &id);
    assert!(before.starts_with("mem"), "{before}");

    let mut pauser = s.husk(&["pause", "--json", &id]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let pauser_pid = pauser.id() as i32;
    let mut out = String::new();
    std::io::Read::read_to_string(pauser.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(pauser.wait().unwrap().success(), "husk pause failed: {out}");
    assert!(!Path::new(&format!("/proc/{pauser_pid}")).exists(), "the pausing husk is still there");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_checkpointed(&s, &id, &v);
    // Longer than the TTL: an unpaused idle sandbox would have expired.
    std::thread::sleep(Duration::from_millis(3500));
    let rec = s.inspect(&id);
    assert_eq!(rec["state"], "paused", "the lease ended a paused sandbox: {rec:#}");
    assert!(runsc_processes_of(&id).is_empty());

    stdout_ok(&s.out(&["resume", &id]), "resume by a new husk");
    assert_eq!(ask(&s, &id), before, "the shell's variable changed across pause/resume");
    assert!(wait_until(Duration::from_secs(15), || !s.dir(&id).exists()), "the resumed sandbox's lease never ran out");
    assert!(wait_until(Duration::from_secs(10), || runsc_processes_of(&id).is_empty()));
    assert_dev_null_untouched();
}

/// A layer a checkpoint cannot carry (the writable root's tmpfs lives in
/// runsc's mount namespace, not in gVisor) is refused with the reason and
/// the way out, and the refusal leaves the sandbox running as it was.
#[test]
fn runsc_pause_refuses_writable_layer_and_keeps_running() {
    require_root!();
    require_runsc!();
    let s = Sbx::new();
    let root = busybox_rootfs().display().to_string();
    let id = s.create_with(&["--runtime", "runsc", "--rootfs", &root, "--writable"]);
    assert_eq!(s.sh(&id, "echo kept > /kept; echo ok"), ("ok\n".into(), 0));
    let out = s.out(&["pause", &id]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("writable layer") && err.contains("--writable"), "{err}");
    assert_eq!(s.inspect(&id)["state"], "ready");
    assert_eq!(s.sh(&id, "cat /kept"), ("kept\n".into(), 0));
    assert_dev_null_untouched();
}

/// `husk fork --memory --count N` (ids, one a line).
fn fork_memory(s: &Sbx, id: &str, count: &str) -> std::process::Output {
    s.out(&["fork", "--memory", "--count", count, id])
}

/// A variable set before the fork is in every fork's memory (and the
/// source keeps running with it); a change in one fork is seen neither in
/// another nor in the source; each fork has its own id, lease and cgroup;
/// the image is gone once the forks run.
#[test]
fn runsc_fork_with_memory_keeps_session_state() {
    require_root!();
    require_runsc!();
    let s = Sbx::new();
    let root = busybox_rootfs().display().to_string();
    let id = s.create_with(&["--runtime", "runsc", "--rootfs", &root, "--ttl", "5m", "--memory", "256M"]);
    start_holder(&s, &id, &format!("sh -c '{}'", HOLDER_SH.replace('\'', "'\\''")));
    assert_eq!(s.sh(&id, "echo before > /tmp/file; echo ok"), ("ok\n".into(), 0));
    let before = ask(&s, &id);

    let out = fork_memory(&s, &id, "3");
    let text = stdout_ok(&out, "fork --memory");
    let forks: Vec<String> = text.lines().map(str::to_string).collect();
    assert_eq!(forks.len(), 3, "{text}");
    for f in &forks {
        assert_ne!(f, &id);
        assert_eq!(ask(&s, f), before, "fork {f} lost the source's memory");
        let rec = s.inspect(f);
        assert_eq!((&rec["state"], &rec["backend"]), (&Value::from("ready"), &Value::from("runsc")), "{rec:#}");
        assert_eq!(rec["ttl_ms"], 300_000);
        assert_eq!(rec["spec"]["limits"], s.inspect(&id)["spec"]["limits"], "fork {f} has other limits");
        let cg = rec["cgroup"]["dirs"][0]["path"].as_str().unwrap().to_string();
        assert!(cg.contains(f.as_str()), "fork {f} is not in a cgroup of its own: {cg}");
    }
    assert_eq!(ask(&s, &id), before, "the source lost its memory to the fork");
    // The fork's files in gVisor's tmpfs were its own copy too.
    assert_eq!(s.sh(&forks[0], "echo changed > /tmp/file; cat /tmp/file"), ("changed\n".into(), 0));
    // A change in one fork's memory.
    let (o, code) = s.sh(&forks[0], "echo changed-in-fork > /tmp/set; i=0; while [ -e /tmp/set ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; echo set");
    assert_eq!((o.as_str(), code), ("set\n", 0));
    assert_eq!(ask(&s, &forks[0]), "changed-in-fork");
    for other in [&forks[1], &forks[2], &id] {
        assert_eq!(s.sh(other, "cat /tmp/file"), ("before\n".into(), 0), "{other} saw fork {}'s change", forks[0]);
        assert_eq!(ask(&s, other), before);
    }
    assert!(
        std::fs::read_dir(s.dir(&id))
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with("memfork-")),
        "the fork's image stays in the source's dir"
    );
    assert_dev_null_untouched();
}

/// All or nothing: when forks cannot be restored (here runsc, through a
/// wrapper, refuses every restore after two: the source's own and one
/// fork's), the fork that was made is removed too, the image goes,
/// and the source runs on with its memory. Natively `--memory` is refused
/// with the reason and the way to get it.
#[test]
fn fork_memory_all_or_nothing() {
    require_root!();
    require_runsc!();
    use std::os::unix::fs::PermissionsExt;
    let s = Sbx::new();
    // runsc runs as the sandbox's mapped root: it must reach the wrapper
    // and its counter.
    let tmp = TempDir::new("memfork-wrap");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let real = ["/usr/bin/runsc", "/usr/local/bin/runsc", "/usr/sbin/runsc"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap();
    // Restores take a slot (mkdir is atomic: the forks restore at once);
    // there are two, the source's own and one fork's.
    let slots = tmp.join("restores");
    std::fs::create_dir(&slots).unwrap();
    std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o777)).unwrap();
    let wrapper = tmp.join("runsc");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do\n  if [ \"$a\" = restore ]; then\n    mkdir {c}/1 2>/dev/null || mkdir {c}/2 2>/dev/null || {{ echo \"restore refused by the test's wrapper\" >&2; exit 1; }}\n  fi\ndone\nexec {real} \"$@\"\n",
            c = slots.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = busybox_rootfs().display().to_string();
    let wrap = wrapper.display().to_string();
    let id = s.create_with(&["--runtime", "runsc", "--runsc-path", &wrap, "--rootfs", &root, "--ttl", "5m"]);
    start_holder(&s, &id, &format!("sh -c '{}'", HOLDER_SH.replace('\'', "'\\''")));
    let before = ask(&s, &id);

    let out = fork_memory(&s, &id, "3");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("of 3 from the memory of") && err.contains("refused by the test's wrapper"), "{err}");
    assert!(out.stdout.is_empty(), "ids of failed forks were printed");
    assert!(slots.join("2").exists(), "no fork was restored before the failure: nothing was undone");
    assert_eq!(s.ids(), vec![id.clone()], "forks of a failed fork remain");
    assert!(
        std::fs::read_dir(s.dir(&id))
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with("memfork-")),
        "the failed fork's image stays in the source's dir"
    );
    assert_eq!(ask(&s, &id), before, "the source lost its memory");

    let native = s.create(&[]);
    let out = fork_memory(&s, &native, "1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("CRIU") && err.contains("--runtime runsc"), "{err}");
    assert_eq!(s.ids().len(), 2, "a refused native fork made a sandbox");
    assert_dev_null_untouched();
}
