//! `husk build`: Dockerfiles into stored images without Docker. RUN steps
//! run in husk sandboxes over the image built so far; their changes, COPY
//! and ADD become reproducible layers published like imports; steps are
//! cached. Root pass, and (mod rootless) as the unprivileged `tester`.
mod imagekit;
use imagekit::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;

/// The busybox base (with /data/{a,b} and /keep/x to delete), imported as `bb`.
fn base(t: &TempDir) -> std::path::PathBuf {
    let store = t.join("store");
    let extra = Tar::new().file("data/a", b"a").file("data/b", b"b").file("keep/x", b"x").finish();
    let mut l = Layout::new(&t.join("bb"));
    l.image(&[Layer::gzip(busybox_tar()), Layer::plain(extra)], json!({"Env": ["PATH=/bin"], "Cmd": ["sh"]}), None);
    import_ok(&store, &l.dir, &["--name", "bb"]);
    store
}

/// A context directory with `files` (path, content) and a Dockerfile.
fn context(t: &TempDir, name: &str, dockerfile: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
    let c = t.join(name);
    std::fs::create_dir_all(&c).unwrap();
    std::fs::write(c.join("Dockerfile"), dockerfile).unwrap();
    for (p, content) in files {
        let p = c.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    c
}

fn build(store: &Path, ctx: &Path, tag: &str, extra: &[&str]) -> Output {
    let mut args = vec!["build", "--json", "-t", tag];
    args.extend_from_slice(extra);
    args.push(ctx.to_str().unwrap());
    husk_in(store, &args)
}

/// The JSON events of a successful build: the steps and the result.
fn build_ok(store: &Path, ctx: &Path, tag: &str, extra: &[&str]) -> (Vec<Value>, Value) {
    let o = build(store, ctx, tag, extra);
    assert!(o.status.success(), "build {tag} failed: {}{}", stdout(&o), stderr(&o));
    let events: Vec<Value> = stdout(&o).lines().map(|l| serde_json::from_str(l).expect("json event")).collect();
    let result = events.iter().find(|e| e["event"] == "result").cloned().expect("result event");
    (events.into_iter().filter(|e| e["event"] == "step").collect(), result)
}

/// stdout of `husk run --image NAME -- sh -c SCRIPT`, asserting exit 0.
fn run_sh(store: &Path, image: &str, script: &str) -> String {
    let o = husk_in(store, &["run", "--image", image, "--", "sh", "-c", script]);
    assert!(o.status.success(), "run {image}: {script}: {}{}", stdout(&o), stderr(&o));
    stdout(&o)
}

fn cached(steps: &[Value], prefix: &str) -> Vec<bool> {
    steps
        .iter()
        .filter(|s| s["instruction"].as_str().unwrap().starts_with(prefix))
        .map(|s| s["cached"] == true)
        .collect()
}

/// Unpacked layer directories in the store, and their bytes (du -sb).
fn store_layers(store: &Path) -> (usize, u64) {
    let dirs: Vec<_> =
        std::fs::read_dir(store.join("layers")).unwrap().flatten().filter(|e| e.path().is_dir()).collect();
    let bytes = dirs
        .iter()
        .map(|d| {
            let o = std::process::Command::new("du").args(["-sb"]).arg(d.path()).output().unwrap();
            String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap().parse::<u64>().unwrap()
        })
        .sum();
    (dirs.len(), bytes)
}

#[test]
fn build_three_tier_base_env_task() {
    let t = TempDir::new("build-tiers");
    let store = base(&t);
    // The env layer: 4 MiB of "dependencies".
    let env = context(
        &t,
        "env",
        "FROM bb\nENV DEPS=/opt/env\nRUN mkdir -p $DEPS && dd if=/dev/zero of=$DEPS/lib.so bs=1024 count=4096 2>/dev/null\n",
        &[],
    );
    let (_, env_result) = build_ok(&store, &env, "env", &[]);
    let env_layer = env_result["layers"].as_array().unwrap().last().unwrap().clone();
    let (layers_before, bytes_before) = store_layers(&store);
    for i in 0..5 {
        let task = context(
            &t,
            &format!("task{i}"),
            "FROM env\nCOPY task.txt /task/\nRUN cat /task/task.txt > /task/out && ls -l $DEPS/lib.so >> /task/out\n",
            &[("task.txt", &format!("task {i}\n"))],
        );
        let (_, r) = build_ok(&store, &task, &format!("task{i}"), &[]);
        let layers = r["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 5, "bb (2) + env (1) + task (2): {r}");
        assert_eq!(layers[2], env_layer, "every task image sits on the one env layer");
    }
    let (layers_after, bytes_after) = store_layers(&store);
    assert_eq!(layers_after, layers_before + 10, "each task adds its COPY and RUN layers, nothing else");
    assert!(
        bytes_after - bytes_before < 1 << 20,
        "the 4 MiB env layer is stored once: 5 tasks added {} bytes",
        bytes_after - bytes_before
    );
    let out = run_sh(&store, "task3", "cat /task/out");
    assert!(out.starts_with("task 3\n") && out.contains("4194304"), "{out}");
}

#[test]
fn cache_hit_on_rebuild_and_miss_on_changed_context_file() {
    let t = TempDir::new("build-cache");
    let store = base(&t);
    let df = "FROM bb\nRUN echo one > /one\nCOPY app.txt /app/\nRUN cat /app/app.txt > /app/copy\n";
    let ctx = context(&t, "ctx", df, &[("app.txt", "v1\n")]);
    let (steps, first) = build_ok(&store, &ctx, "app", &[]);
    assert_eq!(cached(&steps, "RUN"), vec![false, false]);
    let (steps, second) = build_ok(&store, &ctx, "app", &[]);
    assert_eq!(cached(&steps, "RUN"), vec![true, true], "{steps:?}");
    assert_eq!(cached(&steps, "COPY"), vec![true]);
    assert_eq!(first["id"], second["id"], "a fully cached rebuild is the same image");
    std::fs::write(ctx.join("app.txt"), "v2\n").unwrap();
    let (steps, third) = build_ok(&store, &ctx, "app", &[]);
    assert_eq!(cached(&steps, "RUN"), vec![true, false], "the RUN after the changed COPY runs again");
    assert_eq!(cached(&steps, "COPY"), vec![false]);
    assert_ne!(third["id"], first["id"]);
    assert_eq!(run_sh(&store, "app", "cat /app/copy"), "v2\n");
    let (steps, _) = build_ok(&store, &ctx, "app", &["--no-cache"]);
    assert_eq!(cached(&steps, "RUN"), vec![false, false], "--no-cache runs every step");
}

#[test]
fn run_step_failure_reports_line_and_exit_code_nothing_stored() {
    let t = TempDir::new("build-fail");
    let store = base(&t);
    let df = "FROM bb\n# a comment\nRUN echo step-output; echo boom >&2; exit 3\nRUN echo never\n";
    let ctx = context(&t, "ctx", df, &[]);
    let o = husk_in(&store, &["build", "-t", "broken", ctx.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("Dockerfile:3: RUN failed with exit code 3"), "{err}");
    assert!(err.contains("boom") && err.contains("step-output"), "the output's tail is shown: {err}");
    assert!(!err.contains("never"), "{err}");
    let ls = husk_in(&store, &["image", "ls", "--json"]);
    assert!(!stdout(&ls).contains("broken"), "no image record: {}", stdout(&ls));
    let left: Vec<_> = std::fs::read_dir(store.join("tmp")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "no half-built layer or step directory left: {left:?}");
    // An unknown instruction fails before anything runs, naming the line.
    let ctx = context(&t, "bad", "FROM bb\nRUN true\nFROBNICATE x\n", &[]);
    let o = husk_in(&store, &["build", "-t", "bad", ctx.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(125));
    assert!(stderr(&o).contains("Dockerfile:3: unknown instruction"), "{}", stderr(&o));
}

#[test]
fn whiteouts_and_opaque_dirs_from_rm_in_run() {
    let t = TempDir::new("build-wh");
    let store = base(&t);
    let df = "FROM bb\nRUN rm /data/a && rm -rf /keep && mkdir /keep && echo y > /keep/y\n";
    let ctx = context(&t, "ctx", df, &[]);
    let (_, r) = build_ok(&store, &ctx, "wh", &[]);
    assert_eq!(run_sh(&store, "wh", "ls /data; ls /keep"), "b\ny\n", "a deleted, /keep replaced whole");
    // The layer itself carries a whiteout for data/a and an opaque /keep.
    let top =
        r["layers"].as_array().unwrap().last().unwrap().as_str().unwrap().trim_start_matches("sha256:").to_string();
    let dir = std::fs::read_dir(store.join("layers"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&top) && e.path().is_dir())
        .expect("the RUN's layer")
        .path();
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let wh = std::fs::symlink_metadata(dir.join("data/a")).expect("whiteout of data/a");
    assert!(wh.file_type().is_char_device() && wh.rdev() == 0, "overlay whiteout (0/0 char device)");
    assert!(!dir.join("data/b").exists(), "untouched files are not in the layer");
    assert!(dir.join("keep/y").exists() && !dir.join("keep/x").exists(), "the replaced /keep is in the layer whole");
}

#[test]
fn multistage_copy_from() {
    let t = TempDir::new("build-multi");
    let store = base(&t);
    let df = "FROM bb AS builder\nRUN mkdir /out && echo built > /out/result && echo junk > /junk\n\
              FROM bb\nCOPY --from=builder /out/result /app/result\nCMD [\"cat\", \"/app/result\"]\n";
    let ctx = context(&t, "ctx", df, &[]);
    let (_, r) = build_ok(&store, &ctx, "multi", &[]);
    assert_eq!(r["layers"].as_array().unwrap().len(), 3, "bb (2) + the COPY; the builder's layer is not in it");
    assert_eq!(run_sh(&store, "multi", "cat /app/result; ls /junk 2>&1 | grep -c 'No such'"), "built\n1\n");
    let o = husk_in(&store, &["run", "--image", "multi"]);
    assert_eq!(stdout(&o), "built\n", "CMD from the Dockerfile");
    let (_, r) = build_ok(&store, &ctx, "only-builder", &["--target", "builder"]);
    assert_eq!(r["layers"].as_array().unwrap().len(), 3);
    assert_eq!(run_sh(&store, "only-builder", "cat /junk"), "junk\n");
}

#[test]
fn dockerignore_respected() {
    let t = TempDir::new("build-ignore");
    let store = base(&t);
    let ctx = context(
        &t,
        "ctx",
        "FROM bb\nCOPY . /ctx/\n",
        &[
            ("keep.txt", "k"),
            ("secret.env", "s"),
            ("logs/a.log", "l"),
            ("logs/important.log", "i"),
            (".dockerignore", "# comment\n*.env\nlogs\n!logs/important.log\n"),
        ],
    );
    build_ok(&store, &ctx, "ign", &[]);
    let listing = run_sh(&store, "ign", "cd /ctx && find . -type f | sort");
    assert_eq!(listing, "./.dockerignore\n./Dockerfile\n./keep.txt\n./logs/important.log\n", "{listing}");
    let ctx2 =
        context(&t, "ctx2", "FROM bb\nCOPY secret.env /s\n", &[("secret.env", "s"), (".dockerignore", "*.env\n")]);
    let o = build(&store, &ctx2, "ign2", &[]);
    assert_eq!(o.status.code(), Some(125));
    assert!(stderr(&o).contains("excluded by .dockerignore"), "{}", stderr(&o));
}

#[test]
fn reproducible_digests_two_clean_builds() {
    let df =
        "FROM bb\nENV A=1\nCOPY files /files\nRUN echo run > /ran && ln -s /ran /link && mkdir -p /d/e\nLABEL x=y\n";
    let mut ids = Vec::new();
    for n in 0..2 {
        let t = TempDir::new(&format!("build-repro{n}"));
        let store = base(&t);
        let ctx = context(&t, "ctx", df, &[("files/a", "a"), ("files/sub/b", "b")]);
        let (_, r) = build_ok(&store, &ctx, "repro", &[]);
        ids.push((r["id"].clone(), r["config"].clone(), r["layers"].clone()));
    }
    assert_eq!(ids[0], ids[1], "two clean builds in two stores give the same digests");
}

#[test]
fn run_chown_as_image_root_keeps_owners_in_the_layer() {
    let t = TempDir::new("build-chown");
    let store = base(&t);
    let df = "FROM bb\nRUN chown 1000:50 /data/b && mkdir /srv && echo s > /srv/s && chown -R 1000 /srv\n";
    let ctx = context(&t, "ctx", df, &[]);
    build_ok(&store, &ctx, "owned", &[]);
    assert_eq!(run_sh(&store, "owned", "stat -c %u:%g /data/b /srv/s"), "1000:50\n1000:0\n");
    // A step as a non-root USER has no capability to give files away.
    std::fs::write(ctx.join("Dockerfile"), "FROM bb\nUSER 1000\nRUN chown 0 /home/user\n").unwrap();
    let o = build(&store, &ctx, "notroot", &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
}

#[test]
fn hostile_context_symlink_outside_refused() {
    let t = TempDir::new("build-hostile");
    let store = base(&t);
    let secret = t.join("host-secret");
    std::fs::write(&secret, "HOST-SECRET-CONTENT").unwrap();
    let ctx = context(&t, "ctx", "FROM bb\nCOPY link /stolen\n", &[]);
    std::os::unix::fs::symlink(&secret, ctx.join("link")).unwrap();
    std::os::unix::fs::symlink("../../../../../../../..", ctx.join("up")).unwrap();
    let o = build(&store, &ctx, "evil", &[]);
    assert_eq!(o.status.code(), Some(125), "{}", stdout(&o));
    std::fs::write(ctx.join("Dockerfile"), format!("FROM bb\nCOPY up{} /stolen\n", secret.display())).unwrap();
    let o = build(&store, &ctx, "evil", &[]);
    assert_eq!(o.status.code(), Some(125), "a path through ../ links stays in the context: {}", stdout(&o));
    // Inside a copied directory a link is copied as a link, never followed.
    std::fs::create_dir(ctx.join("dir")).unwrap();
    std::os::unix::fs::symlink(&secret, ctx.join("dir/inner")).unwrap();
    std::fs::write(ctx.join("Dockerfile"), "FROM bb\nCOPY dir /dir\n").unwrap();
    build_ok(&store, &ctx, "evil", &[]);
    let out = run_sh(&store, "evil", "readlink /dir/inner; cat /dir/inner 2>&1 || true");
    assert!(!out.contains("HOST-SECRET-CONTENT"), "{out}");
    let grep = std::process::Command::new("grep")
        .args(["-r", "-l", "HOST-SECRET-CONTENT"])
        .arg(store.join("layers"))
        .output()
        .unwrap();
    assert!(grep.stdout.is_empty(), "no layer holds the host file: {}", String::from_utf8_lossy(&grep.stdout));
}

/// An HTTP server on 127.0.0.1 answering `body`; counts the requests it got.
fn index(body: &'static str) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
            let _ = c.write_all(head.as_bytes());
            let _ = c.write_all(body.as_bytes());
        }
    });
    (port, hits)
}

/// `RUN pip install ...` needs its index: `--network allow=` gives RUN
/// steps the egress proxy of `husk run --network allow=`, so a step reaches
/// the host:port the rules name and nothing else (another port of the same
/// host is denied, and without --network a step has no network at all).
/// `--network host` is refused with the way to do it instead.
#[test]
fn build_run_reaches_allowed_index_only() {
    let t = TempDir::new("build-net");
    let store = base(&t);
    let (allowed, allowed_hits) = index("from-the-index\n");
    let (other, other_hits) = index("should-not-see\n");
    // busybox wget reads http_proxy (set by husk); no_proxy is emptied so
    // a 127.0.0.1 URL goes to the proxy too (the sandbox's own loopback has
    // no server: a direct connection cannot reach the host's).
    let fetch = |port: u16| format!("FROM bb\nRUN no_proxy= NO_PROXY= wget -q -O /got http://127.0.0.1:{port}/pkg\n");
    let rule = format!("allow=127.0.0.1:{allowed}");
    let ctx = context(&t, "ok", &fetch(allowed), &[]);
    build_ok(&store, &ctx, "net-ok", &["--network", &rule]);
    assert_eq!(run_sh(&store, "net-ok", "cat /got"), "from-the-index\n");
    assert_eq!(allowed_hits.load(std::sync::atomic::Ordering::SeqCst), 1);

    let ctx = context(&t, "denied", &fetch(other), &[]);
    let o = build(&store, &ctx, "net-denied", &["--network", &rule]);
    assert_eq!(o.status.code(), Some(1), "a port the rules do not name: {}{}", stdout(&o), stderr(&o));
    let o = build(&store, &ctx, "net-none", &[]);
    assert_eq!(o.status.code(), Some(1), "no --network: {}{}", stdout(&o), stderr(&o));
    assert_eq!(other_hits.load(std::sync::atomic::Ordering::SeqCst), 0, "a step reached a host:port not allowed");

    let o = husk_in(&store, &["build", "--network", "host", "-t", "h", ctx.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(125));
    let err = stderr(&o);
    assert!(err.contains("--network allow="), "says what to do: {err}");
    assert!(!err.to_lowercase().contains("issue"), "no internal references: {err}");
}

/// HEALTHCHECK and VOLUME no longer stop a build: VOLUME is recorded in
/// the image config's Volumes; HEALTHCHECK (which the OCI config cannot
/// hold) is skipped with a warning, in plain output and as the step
/// event's `warning`.
#[test]
fn build_healthcheck_and_volume_recorded_or_warned() {
    let t = TempDir::new("build-vol");
    let store = base(&t);
    let df = "FROM bb\nVOLUME /data /logs\nVOLUME [\"/cache\"]\nHEALTHCHECK --interval=5s CMD wget -q http://localhost/ || exit 1\nCMD [\"true\"]\n";
    let ctx = context(&t, "ctx", df, &[]);
    let o = husk_in(&store, &["build", "-t", "vol", ctx.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning: HEALTHCHECK is ignored"), "{}", stderr(&o));
    let (steps, result) = build_ok(&store, &ctx, "vol", &[]);
    let digest = result["config"].as_str().unwrap();
    let blob = std::fs::read(store.join("blobs").join(digest.trim_start_matches("sha256:"))).unwrap();
    let v: Value = serde_json::from_slice(&blob).unwrap();
    let vols = v["config"]["Volumes"].as_object().cloned().unwrap_or_default();
    let names: Vec<&str> = vols.keys().map(String::as_str).collect();
    assert_eq!(names, ["/cache", "/data", "/logs"], "{:#}", v["config"]);
    let hc = steps.iter().find(|s| s["instruction"].as_str().unwrap().starts_with("HEALTHCHECK")).unwrap();
    assert!(hc["warning"].as_str().unwrap_or("").contains("HEALTHCHECK is ignored"), "{hc:#}");
}

/// A failing RUN shows the tail of what it printed: stdout first, then
/// stderr, where the error usually is (it was the other way round).
#[test]
fn build_failed_step_prints_stderr_after_stdout() {
    let t = TempDir::new("build-order");
    let store = base(&t);
    let df = "FROM bb\nRUN echo out-first; echo err-last >&2; exit 2\n";
    let ctx = context(&t, "ctx", df, &[]);
    let o = husk_in(&store, &["build", "-t", "order", ctx.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    // The tail's lines start with "| " (the instruction quoted before it
    // names both words too).
    let (out_at, err_at) = (err.find("| out-first"), err.find("| err-last"));
    assert!(out_at.is_some() && err_at.is_some(), "{err}");
    assert!(out_at < err_at, "stdout's tail comes before stderr's: {err}");
}

/// A successful RUN's output is seen while the build runs: on a terminal
/// (auto), or as a log with `--progress plain`; otherwise (not a terminal,
/// the default) only a failing step shows its output.
#[test]
fn build_run_output_streams_on_a_tty_and_with_progress_plain() {
    let t = TempDir::new("build-stream");
    let store = base(&t);
    let df = "FROM bb\nRUN echo streamed-out; echo streamed-err >&2\n";
    let ctx = context(&t, "ctx", df, &[]);
    let has_line = |text: &str, want: &str| text.lines().any(|l| l.trim_end() == want);
    let quiet = husk_in(&store, &["build", "--no-cache", "-t", "s", ctx.to_str().unwrap()]);
    assert!(quiet.status.success(), "{}", stderr(&quiet));
    assert!(!has_line(&stderr(&quiet), "streamed-out"), "{}", stderr(&quiet));
    let plain = husk_in(&store, &["build", "--no-cache", "--progress", "plain", "-t", "s", ctx.to_str().unwrap()]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let err = stderr(&plain);
    assert!(has_line(&err, "streamed-out") && has_line(&err, "streamed-err"), "{err}");
    assert!(stdout(&plain).lines().count() == 1, "stdout keeps only the result: {}", stdout(&plain));
    // On a terminal (script(1) gives the build a pty) it streams unasked.
    let cmd = format!("{} build --no-cache -t s {}", husk_bin().display(), ctx.display());
    let tty = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("HUSK_ROOT", &store)
        .env_remove("HUSK_ID_RANGE")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script(1) from util-linux");
    assert!(tty.status.success(), "{}", stdout(&tty));
    assert!(has_line(&stdout(&tty), "streamed-out"), "{}", stdout(&tty));
}

mod rootless {
    use super::*;

    #[test]
    fn rootless_build() {
        // As root this builds with shifted ids; scripts/test.sh runs it as
        // `tester` with HUSK_NO_CGROUP=1 (no cgroup, one mapped id).
        let t = TempDir::new("build-rootless");
        let store = base(&t);
        let df = "FROM bb\nRUN echo made > /made && rm /data/a\nCOPY f /f\nUSER 0\nCMD [\"cat\", \"/made\", \"/f\"]\n";
        let ctx = context(&t, "ctx", df, &[("f", "file\n")]);
        let (steps, _) = build_ok(&store, &ctx, "rl", &[]);
        assert_eq!(cached(&steps, "RUN"), vec![false]);
        let o = husk_in(&store, &["run", "--image", "rl"]);
        assert_eq!(stdout(&o), "made\nfile\n", "{}", stderr(&o));
        assert_eq!(
            run_sh(&store, "rl", "ls /data; stat -c %u:%g /made /f"),
            "b\n0:0\n0:0\n",
            "image root owns what RUN and COPY made"
        );
        let (steps, _) = build_ok(&store, &ctx, "rl", &[]);
        assert_eq!(cached(&steps, "RUN"), vec![true]);
    }
}
