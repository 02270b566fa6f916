//! `husk run --image`: the overlay root built from stored layers, the image
//! config's defaults, ownership as seen inside, whiteouts, leases, and the
//! rootless store (run as the unprivileged `tester` user when the suite
//! runs as root).
mod imagekit;
use imagekit::*;
use serde_json::{Value, json};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Everything here runs as root and, in scripts/test.sh, as `tester`.
/// Runs `husk run --json [extra] -- cmd` against `store`; the verdict.
fn run(store: &Path, extra: &[&str], cmd: &[&str]) -> Value {
    let mut args = vec!["run", "--json"];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(cmd);
    verdict(&husk_in(store, &args))
}

fn verdict(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("no verdict ({e}): {} / {}", stdout(o), stderr(o)))
}

fn out(v: &Value) -> String {
    assert_eq!(v["termination"], "exited", "{v}");
    v["stdout"]["text"].as_str().unwrap_or_default().to_string()
}

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// The busybox image with `cfg` and extra layers on top.
fn busybox_layout(dir: &Path, extra: Vec<Layer>, cfg: Value) -> Layout {
    let mut l = Layout::new(dir);
    let mut layers = vec![Layer::gzip(busybox_tar())];
    layers.extend(extra);
    l.image(&layers, cfg, None);
    l
}

fn whiteout_layers() -> (Layer, Layer) {
    let lower = Tar::new()
        .file("etc/motd", b"from the base\n")
        .file("var/cache/a", b"a")
        .file("var/cache/b", b"b")
        .file("keep/me", b"kept")
        .finish();
    let upper = Tar::new()
        .file("etc/.wh.motd", b"")
        .dir("var/cache/", 0o755)
        .file("var/cache/.wh..wh..opq", b"")
        .file("var/cache/new", b"n")
        .finish();
    (Layer::gzip(lower), Layer::zstd(upper))
}

const WHITEOUT_PROBE: &str = "ls /etc/motd 2>&1; ls /var/cache; cat /keep/me";

const WHITEOUT_EXPECT: &str = "ls: /etc/motd: No such file or directory\nnew\nkept";

/// Starts a sandbox from image NAME that says it is up (so its lease is
/// held) and runs until `stop_run` tells it to end.
fn start_long_run(store: &Path, name: &str, sig: &Path) -> std::process::Child {
    std::fs::create_dir_all(sig).unwrap();
    // Sandbox root is an unprivileged host id: let it write the marker.
    std::fs::set_permissions(sig, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let bind = format!("{}:/sig:rw", sig.display());
    let mut child = Command::new(husk_bin())
        .args([
            "run",
            "--image",
            name,
            "--bind",
            &bind,
            "--",
            "sh",
            "-c",
            "touch /sig/ready; while [ ! -e /sig/stop ]; do sleep 0.05; done",
        ])
        .env("HUSK_ROOT", store)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..300 {
        if sig.join("ready").exists() {
            return child;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("sandbox did not start");
}

/// Ends a sandbox from `start_long_run`; husk exits after its init did,
/// so the lease is released when this returns.
fn stop_run(mut child: std::process::Child, sig: &Path) {
    std::fs::write(sig.join("stop"), b"").unwrap();
    assert!(child.wait().unwrap().success());
}

/// The unprivileged test user, when the suite runs as root.
fn tester() -> Option<(u32, u32)> {
    let pw = std::fs::read_to_string("/etc/passwd").ok()?;
    pw.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 3 && f[0] == "tester").then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

/// Runs a copy of husk as `tester` (rootless) with its own store.
fn as_tester(bin: &Path, store: &Path, ids: (u32, u32), args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HUSK_ROOT", store)
        .env("HOME", store)
        // As scripts/test.sh's rootless pass: this host delegates no cgroup
        // to ordinary users.
        .env("HUSK_NO_CGROUP", "1")
        .uid(ids.0)
        .gid(ids.1)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Everything here runs as root and, in scripts/test.sh, as `tester`.
mod rootless {
    use super::*;

    #[test]
    fn image_config_sets_env_cmd_workdir_and_user() {
        let t = TempDir::new("config");
        let cfg = json!({
            "Env": ["FROM_IMAGE=yes", "SHARED=image", "PATH=/bin"],
            "Cmd": ["sh", "-c", "echo $FROM_IMAGE $SHARED; pwd; id -u; id -G"],
            "WorkingDir": "/../srv/./w",
            "User": "user",
        });
        let l = busybox_layout(&t.join("bb"), vec![], cfg);
        let store = t.join("store");
        let path = l.dir.to_str().unwrap();
        if !is_root() {
            // Rootless: one mapped id, so the image's `user` (1000) is the
            // only identity and there are no supplementary groups.
            let v = run(&store, &["--image", path], &[]);
            assert_eq!(out(&v), "yes image\n/srv/w\n1000\n1000\n");
            return;
        }
        let v = run(&store, &["--image", path], &[]);
        assert_eq!(out(&v), "yes image\n/srv/w\n1000\n1000 50\n", "Cmd, Env, WorkingDir (clamped), User + groups");
        let v = run(&store, &["--image", "bb", "-e", "SHARED=cli", "--workdir", "/elsewhere", "--user", "0"], &[]);
        assert_eq!(out(&v), "yes cli\n/elsewhere\n0\n0\n", "flags win over the image config");
        let v = run(&store, &["--image", "bb"], &["sh", "-c", "echo explicit"]);
        assert_eq!(out(&v), "explicit\n");
        assert_eq!(v["isolation"]["rootfs"]["mode"], "image");
        assert_eq!(v["isolation"]["rootfs"]["layers"], 1);
    }

    #[test]
    fn image_symlinks_cannot_carry_mounts_into_proc() {
        // WorkingDir and /tmp reach husk's /proc through the image's own
        // symlinks: refused, naming where they lead.
        let t = TempDir::new("symmount");
        let evil = Layer::gzip(Tar::new().symlink("w", "/proc/sys").finish());
        let l = busybox_layout(&t.join("sym"), vec![evil], json!({"WorkingDir": "/w"}));
        let store = t.join("store");
        let p = l.dir.to_str().unwrap();
        let v = run(&store, &["--image", p], &["true"]);
        assert_eq!(v["termination"], "setup_failed");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("resolves to /proc/sys inside the root"), "{msg}");
        let v = run(&store, &["--image", p, "--workdir", "/work"], &["sh", "-c", "pwd"]);
        assert_eq!(out(&v), "/work\n");
    }

    #[test]
    fn whiteouts_and_opaque_dirs_hide_lower_content() {
        let t = TempDir::new("whiteout");
        let (lower, upper) = whiteout_layers();
        let l = busybox_layout(&t.join("wh"), vec![lower, upper], json!({}));
        let v = run(&t.join("store"), &["--image", l.dir.to_str().unwrap()], &["sh", "-c", WHITEOUT_PROBE]);
        assert_eq!(out(&v).trim_end(), WHITEOUT_EXPECT);
    }

    #[test]
    fn image_root_is_read_only_and_writable_layer_is_discarded() {
        let t = TempDir::new("readonly");
        let l = busybox_layout(&t.join("ro"), vec![], json!({}));
        let store = t.join("store");
        let p = l.dir.to_str().unwrap();
        let v = run(
            &store,
            &["--image", p],
            &["sh", "-c", "echo x > /etc/new 2>&1 || echo refused; echo w > ./ok && cat ok"],
        );
        assert_eq!(out(&v), "refused\nw\n");
        let v = run(
            &store,
            &["--image", p, "--writable"],
            &["sh", "-c", "echo x > /etc/new && cat /etc/new && rm /bin/busybox.x 2>/dev/null; echo done"],
        );
        assert_eq!(out(&v), "x\ndone\n");
        let v = run(&store, &["--image", p], &["sh", "-c", "ls /etc/new 2>&1"]);
        assert!(out(&v).contains("No such file"), "the writable layer is discarded: {}", out(&v));
    }

    #[test]
    fn setuid_files_in_the_image_grant_nothing() {
        let t = TempDir::new("suid");
        let bb = std::fs::read("/bin/busybox").unwrap();
        let mut tar = Tar::new();
        // A setuid-root copy of busybox named `id`: on a nosuid mount it runs
        // with the caller's ids.
        tar.file_mode("usr/local/bin/id", 0o4755, 0, &bb);
        let l = busybox_layout(&t.join("suid"), vec![Layer::gzip(tar.finish())], json!({}));
        let user = if is_root() { "user" } else { "0" };
        let v = run(
            &t.join("store"),
            &["--image", l.dir.to_str().unwrap(), "--user", user],
            &[
                "sh",
                "-c",
                "stat -c %a /usr/local/bin/id; /usr/local/bin/id -u; awk '$2==\"/\"{print $4}' /proc/self/mounts",
            ],
        );
        let o = out(&v);
        let lines: Vec<&str> = o.lines().collect();
        let expect = if is_root() { ["4755", "1000"] } else { ["4755", "0"] };
        assert_eq!(lines[..2], expect, "{o}");
        // busybox drops a setuid bit by itself for most applets, so the ids
        // alone prove little: the root must be mounted nosuid.
        assert!(lines.get(2).is_some_and(|l| l.split(',').any(|f| f == "nosuid")), "root not nosuid: {o}");
    }

    #[test]
    fn path_reference_is_imported_on_the_fly_and_cached() {
        let t = TempDir::new("onthefly");
        let l = busybox_layout(&t.join("fly"), vec![], json!({}));
        let store = t.join("store");
        let v = run(&store, &["--image", l.dir.to_str().unwrap()], &["echo", "one"]);
        assert_eq!(out(&v), "one\n");
        let before = tree(&store.join("layers"));
        let v = run(&store, &["--image", l.dir.to_str().unwrap()], &["echo", "two"]);
        assert_eq!(out(&v), "two\n");
        assert_eq!(tree(&store.join("layers")), before, "the second run reuses the stored layers");
        let v = run(&store, &["--image", "fly"], &["echo", "three"]);
        assert_eq!(out(&v), "three\n", "and the image is stored under its default name");
        let v = run(&store, &["--image", "no-such-image"], &["true"]);
        assert_eq!(v["termination"], "setup_failed");
        assert!(v["error"]["message"].as_str().unwrap().contains("no image named \"no-such-image:latest\""));
    }

    #[test]
    fn rm_refuses_an_image_in_use_and_prune_keeps_its_layers() {
        let t = TempDir::new("inuse");
        let l = busybox_layout(&t.join("busy"), vec![], json!({}));
        let store = t.join("store");
        import_ok(&store, &l.dir, &[]);
        let child = start_long_run(&store, "busy", &t.join("sig"));
        let rm = husk_in(&store, &["image", "rm", "busy"]);
        assert!(!rm.status.success());
        assert!(stderr(&rm).contains("image busy:latest is in use"), "{}", stderr(&rm));
        stop_run(child, &t.join("sig"));
        let rm = husk_in(&store, &["image", "rm", "busy"]);
        assert!(rm.status.success(), "{}", stderr(&rm));

        // Re-point a name while a sandbox runs from its old layers: prune
        // keeps the layers the sandbox has mounted.
        let old = busybox_layout(&t.join("old"), vec![Layer::gzip(Tar::new().file("x", b"x").finish())], json!({}));
        import_ok(&store, &old.dir, &["--name", "moving"]);
        let child = start_long_run(&store, "moving", &t.join("sig2"));
        import_ok(&store, &l.dir, &["--name", "moving"]);
        let p: Value = serde_json::from_slice(&husk_in(&store, &["image", "prune", "--json"]).stdout).unwrap();
        assert_eq!((p["layers_removed"].as_u64(), p["layers_in_use"].as_u64()), (Some(0), Some(1)), "{p}");
        stop_run(child, &t.join("sig2"));
        let p: Value = serde_json::from_slice(&husk_in(&store, &["image", "prune", "--json"]).stdout).unwrap();
        assert_eq!((p["layers_removed"].as_u64(), p["layers_in_use"].as_u64()), (Some(1), Some(0)), "{p}");
    }

    #[test]
    fn parallel_imports_and_runs_share_layers_safely() {
        let t = TempDir::new("busy-store");
        let store = t.join("store");
        let a = busybox_layout(&t.join("a"), vec![Layer::gzip(Tar::new().file("a", b"a").finish())], json!({}));
        let b = busybox_layout(&t.join("b"), vec![Layer::gzip(Tar::new().file("b", b"b").finish())], json!({}));
        import_ok(&store, &a.dir, &["--name", "a"]);
        let spawn = |args: Vec<String>| {
            Command::new(husk_bin())
                .args(&args)
                .env("HUSK_ROOT", &store)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let mut children = Vec::new();
        for i in 0..4 {
            let src = if i % 2 == 0 { &a.dir } else { &b.dir };
            children.push(spawn(vec![
                "image".into(),
                "import".into(),
                "--name".into(),
                format!("p{i}"),
                src.display().to_string(),
            ]));
            children.push(spawn(vec![
                "run".into(),
                "--image".into(),
                "a".into(),
                "--".into(),
                "cat".into(),
                "/a".into(),
            ]));
            children.push(spawn(vec![
                "run".into(),
                "--image".into(),
                b.dir.display().to_string(),
                "--".into(),
                "cat".into(),
                "/b".into(),
            ]));
        }
        children.push(spawn(vec!["image".into(), "prune".into()]));
        for c in children {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "{} / {}", stdout(&o), stderr(&o));
        }
        let dirs: Vec<_> =
            std::fs::read_dir(store.join("layers")).unwrap().flatten().filter(|e| e.path().is_dir()).collect();
        assert_eq!(dirs.len(), 3, "busybox base + a + b, each once");
        assert!(tree(&store.join("tmp")).is_empty());
    }
}

#[test]
fn image_files_keep_their_owners_inside_the_sandbox() {
    if !is_root() {
        println!("SKIP: needs root (ownership shifting; rootless stores give every file to the invoking user)");
        return;
    }
    let t = TempDir::new("owners");
    let mut tar = Tar::new();
    tar.file_mode("data/root-file", 0o640, 0, b"r");
    tar.file_mode("data/user-file", 0o600, 1000, b"u");
    tar.file_mode("data/far-file", 0o644, 70000, b"f");
    let l = busybox_layout(&t.join("own"), vec![Layer::gzip(tar.finish())], json!({}));
    let store = t.join("store");
    let v =
        run(&store, &["--image", l.dir.to_str().unwrap()], &["sh", "-c", "stat -c '%n %u:%g %a' /data/* /bin/busybox"]);
    assert_eq!(
        out(&v),
        "/data/far-file 65534:65534 644\n/data/root-file 0:0 640\n/data/user-file 1000:1000 600\n/bin/busybox 0:0 755\n"
    );
    // On the host, sandbox root's files belong to the unprivileged range.
    let dirs = std::fs::read_dir(store.join("layers")).unwrap().flatten().filter(|e| e.path().is_dir());
    for d in dirs {
        let md = std::fs::metadata(d.path()).unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&md), 1_000_000_000, "{}", d.path().display());
    }
}

#[test]
fn rootless_store_uses_user_xattrs_and_runs_images() {
    let (lower, upper) = whiteout_layers();
    let t = TempDir::new("rootless");
    let l = busybox_layout(&t.join("wh"), vec![lower, upper], json!({"Cmd": ["sh", "-c", WHITEOUT_PROBE]}));
    if !is_root() {
        // Already rootless: the other tests cover this mode directly.
        let v = run(&t.join("store"), &["--image", l.dir.to_str().unwrap()], &[]);
        assert_eq!(out(&v).trim_end(), WHITEOUT_EXPECT);
        return;
    }
    let Some(ids) = tester() else {
        println!("SKIP: no `tester` user for the rootless check");
        return;
    };
    let bin = t.join("husk");
    std::fs::copy(env!("CARGO_BIN_EXE_husk"), &bin).unwrap();
    let store = t.join("tester-store");
    std::fs::create_dir(&store).unwrap();
    nix::unistd::chown(&store, Some(ids.0.into()), Some(ids.1.into())).unwrap();
    let o = as_tester(&bin, &store, ids, &["image", "import", "--json", l.dir.to_str().unwrap()]);
    assert!(o.status.success(), "rootless import: {}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["layers"][2]["unpack"]["opaque_dirs"], 1);
    assert_eq!(r["layers"][2]["unpack"]["whiteouts"], 1);
    let o = as_tester(&bin, &store, ids, &["run", "--json", "--image", "wh"]);
    let v = verdict(&o);
    assert_eq!(out(&v).trim_end(), WHITEOUT_EXPECT, "{v}");
    assert_eq!(v["isolation"]["user_mapping"]["mode"], "rootless");
    // Everything in a rootless store belongs to the user.
    let layer = store.join("layers");
    for e in std::fs::read_dir(&layer).unwrap().flatten() {
        let md = std::fs::symlink_metadata(e.path()).unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&md), ids.0);
    }
    let o = as_tester(&bin, &store, ids, &["image", "rm", "wh"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = as_tester(&bin, &store, ids, &["image", "prune", "--json"]);
    let p: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(p["layers_removed"], 3, "{p}");
}
