//! Images out of husk: `husk image export` (loaded by Docker, imported
//! back), `husk push` (pulled back by husk and Docker with the same
//! digest), `husk commit` and `husk fork` of live sandboxes. Root pass.
mod dockerkit;
mod imagekit;
mod pullkit;
use imagekit::*;
use serde_json::{Value, json};
use std::path::Path;

/// `husk build -t TAG` of `dockerfile` (context: the Dockerfile and `own`).
fn build(t: &TempDir, store: &Path, tag: &str, dockerfile: &str) -> Value {
    let ctx = t.join(&format!("ctx-{}", tag.replace([':', '/'], "-")));
    std::fs::create_dir_all(&ctx).unwrap();
    std::fs::write(ctx.join("Dockerfile"), dockerfile).unwrap();
    std::fs::write(ctx.join("own"), "mine\n").unwrap();
    let o = husk_in(store, &["build", "--json", "-t", tag, ctx.to_str().unwrap()]);
    assert!(o.status.success(), "build {tag}: {}{}", stdout(&o), stderr(&o));
    stdout(&o).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|e| e["event"] == "result").unwrap()
}

fn husk_ok(store: &Path, args: &[&str]) -> String {
    let o = husk_in(store, args);
    assert!(o.status.success(), "husk {args:?}: {}{}", stdout(&o), stderr(&o));
    stdout(&o)
}

/// What a root looks like from inside: listing, contents, owners, links.
const LOOK: &str =
    "ls -a /data | tr '\\n' ' '; echo; cat /data/b /data/c; stat -c '%n %u:%g %a' /data/c /data/own; readlink /data/l";

/// A built image with a whiteout, an owner other than root and a symlink.
const DOCKERFILE: &str = "FROM bb\nRUN rm /data/a && echo built > /data/c && ln -s c /data/l\nCOPY --chown=1000:50 --chmod=640 own /data/own\nCMD [\"sh\", \"-c\", \"cat /data/c\"]\n";

#[test]
fn export_loads_in_docker_and_runs() {
    let t = TempDir::new("export-docker");
    let store = busybox_data_store(&t);
    build(&t, &store, "exp:1", DOCKERFILE);
    let want = husk_ok(&store, &["run", "--image", "exp:1", "--", "sh", "-c", LOOK]);
    assert!(want.contains(". .. b c l own") && want.contains("/data/own 1000:50 640"), "husk's own view: {want}");

    let archive = t.join("exp.docker.tar");
    let r: Value = serde_json::from_str(&husk_ok(
        &store,
        &["image", "export", "exp:1", "-o", archive.to_str().unwrap(), "--format", "docker-archive", "--json"],
    ))
    .unwrap();
    assert_eq!(r["layers"], 4, "{r}");
    // A layer husk built is written again byte for byte (the imported
    // base's gzip layers are not: they get new diff_ids).
    let o = std::process::Command::new("tar").arg("-xOf").arg(&archive).arg("manifest.json").output().unwrap();
    let m: Value = serde_json::from_slice(&o.stdout).unwrap();
    let stored: Value = serde_json::from_str(&husk_ok(&store, &["image", "inspect", "exp:1"])).unwrap();
    for i in 2..4 {
        let hex = stored["layers"][i]["diff_id"].as_str().unwrap().trim_start_matches("sha256:").to_string();
        assert_eq!(m[0]["Layers"][i], format!("{hex}/layer.tar"), "built layer {i} keeps its diff_id: {m}");
    }
    assert_eq!(m[0]["RepoTags"], json!(["exp:1"]));

    let docker = dockerkit::Dockerd::start(&[]);
    let loaded = docker.ok(&["load", "-i", archive.to_str().unwrap()]);
    assert!(loaded.contains("exp:1"), "docker load: {loaded}");
    assert_eq!(docker.ok(&["run", "--rm", "--network", "none", "exp:1"]), "built\n", "the image's CMD under Docker");
    let seen = docker.ok(&["run", "--rm", "--network", "none", "exp:1", "sh", "-c", LOOK]);
    assert_eq!(seen, want, "Docker sees the tree husk runs (whiteout, owners, modes, link)");

    // The OCI forms go back into a store and run the same.
    for (format, path) in [("oci", t.join("exp.oci")), ("oci-archive", t.join("exp.oci.tar"))] {
        husk_ok(&store, &["image", "export", "exp:1", "-o", path.to_str().unwrap(), "--format", format]);
        let other = t.join(&format!("store-{format}"));
        import_ok(&other, &path, &["--name", "back"]);
        assert_eq!(husk_ok(&other, &["run", "--image", "back", "--", "sh", "-c", LOOK]), want, "{format} round trip");
    }
}

#[test]
fn export_refuses_unknown_image_and_nonempty_directory() {
    let t = TempDir::new("export-bad");
    let store = busybox_data_store(&t);
    let o = husk_in(&store, &["image", "export", "nope", "-o", t.join("x.tar").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains("no image named \"nope:latest\""), "{}", stderr(&o));
    assert!(!t.join("x.tar").exists());
    let dir = t.join("full");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("keep"), b"k").unwrap();
    let o = husk_in(&store, &["image", "export", "bb", "-o", dir.to_str().unwrap(), "--format", "oci"]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains("not empty"), "{}", stderr(&o));
    assert_eq!(std::fs::read(dir.join("keep")).unwrap(), b"k");
    // Nothing half-written is left beside the target.
    let left: Vec<_> = tree(t.path()).into_iter().filter(|p| p.contains("husk-export")).collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn push_then_pull_same_digest() {
    let t = TempDir::new("push");
    let store = busybox_data_store(&t);
    build(&t, &store, "exp:1", DOCKERFILE);
    let want = husk_ok(&store, &["run", "--image", "exp:1", "--", "sh", "-c", LOOK]);
    let reg = pullkit::Registry::start(pullkit::Auth::None);
    let target = format!("{}/tools/exp:1", reg.addr);
    let pushed: Value = serde_json::from_str(&husk_ok(&store, &["push", "exp:1", &target, "--json"])).unwrap();
    assert_eq!((pushed["blobs_uploaded"].as_u64(), pushed["blobs_skipped"].as_u64()), (Some(5), Some(0)), "{pushed}");
    let digest = pushed["manifest"].as_str().unwrap().to_string();
    // Again: the registry has every blob; only the manifest is put.
    let again: Value = serde_json::from_str(&husk_ok(&store, &["push", "exp:1", &target, "--json"])).unwrap();
    assert_eq!((again["blobs_uploaded"].as_u64(), again["blobs_skipped"].as_u64()), (Some(0), Some(5)), "{again}");
    assert_eq!(again["manifest"], pushed["manifest"]);

    // husk pull into another store: the same manifest digest, the same tree.
    let other = t.join("store-pulled");
    let o = husk_in(&other, &["pull", "--json", &target]);
    assert!(o.status.success(), "pull: {}", stderr(&o));
    let inspect: Value = serde_json::from_str(&husk_ok(&other, &["image", "inspect", &target])).unwrap();
    assert_eq!(inspect["id"], json!(digest), "husk pull gets the pushed manifest: {inspect}");
    assert_eq!(husk_ok(&other, &["run", "--image", &target, "--", "sh", "-c", LOOK]), want);

    // docker pull: the same digest, the same tree.
    let docker = dockerkit::Dockerd::start(&[&reg.addr]);
    docker.ok(&["pull", &target]);
    let repo_digests = docker.ok(&["image", "inspect", "--format", "{{json .RepoDigests}}", &target]);
    assert!(repo_digests.contains(&digest), "docker pull gets {digest}: {repo_digests}");
    assert_eq!(docker.ok(&["run", "--rm", "--network", "none", &target, "sh", "-c", LOOK]), want);
}

#[test]
fn push_refuses_digest_target_and_unreachable_registry() {
    let t = TempDir::new("push-bad");
    let store = busybox_data_store(&t);
    let pinned = format!("127.0.0.1:1/x@sha256:{}", "a".repeat(64));
    let o = husk_in(&store, &["push", "bb", &pinned]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains("push to a tag"), "{}", stderr(&o));
    // A closed port: the error names the registry URL.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let o = husk_in(&store, &["push", "bb", &format!("127.0.0.1:{port}/x:1")]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("127.0.0.1:{port}/v2/x/")), "{}", stderr(&o));
    // Nothing left in the store's tmp/.
    assert!(tree(&store.join("tmp")).is_empty(), "{:?}", tree(&store.join("tmp")));
}

#[test]
fn push_needs_and_uses_login_credentials() {
    let t = TempDir::new("push-auth");
    let store = busybox_data_store(&t);
    let reg = pullkit::Registry::start(pullkit::Auth::Basic("pusher", "s3cret"));
    let target = format!("{}/private/bb:1", reg.addr);
    let o = husk_in(&store, &["push", "bb", &target]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("husk login {}", reg.addr)), "{}", stderr(&o));
    let mut login = std::process::Command::new(husk_bin())
        .args(["login", &reg.addr, "-u", "pusher", "--password-stdin"])
        .env("HUSK_ROOT", &store)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    login.stdin.take().unwrap().write_all(b"s3cret\n").unwrap();
    let lo = login.wait_with_output().unwrap();
    assert!(lo.status.success(), "login: {}", stderr(&lo));
    let pushed: Value = serde_json::from_str(&husk_ok(&store, &["push", "bb", &target, "--json"])).unwrap();
    let o = husk_in(&store, &["pull", "--json", &target]);
    assert!(o.status.success(), "pull with the same login: {}", stderr(&o));
    let inspect: Value = serde_json::from_str(&husk_ok(&store, &["image", "inspect", &target])).unwrap();
    assert_eq!(inspect["id"], pushed["manifest"]);
}

#[test]
fn commit_captures_workdir_and_upper() {
    let t = TempDir::new("commit");
    let live = Live::new(&t, busybox_data_store(&t));
    let id = live.create(&["--image", "bb", "--writable", "-e", "STAGE=prepared", "--workdir", "/work"]);
    live.sh(
        &id,
        "rm /data/a && echo changed > /data/b && chmod 600 /data/b && mkdir -p /opt/tool && echo v1 > /opt/tool/bin \
         && ln -s /opt/tool/bin /opt/link && echo result > /work/out.txt && echo scratch > /tmp/t",
    );
    let r: Value = serde_json::from_str(&live.ok(&["commit", &id, "snap:1", "--json"])).unwrap();
    assert_eq!(r["base"], "bb:latest", "{r}");
    assert_eq!(r["changes"]["whiteouts"], 1, "one removed file: {r}");
    // The sandbox goes on (thawed) and its later changes are not in the image.
    live.sh(&id, "echo later > /data/later");

    // The committed image, run on another workdir.
    let script = "ls /data | tr '\\n' ' '; cat /data/b /opt/tool/bin /work/out.txt; stat -c '%a' /data/b; \
                  readlink /opt/link; ls /tmp; echo STAGE=$STAGE; pwd";
    let o = live.husk(&["run", "--image", "snap:1", "--workdir", "/elsewhere", "--", "sh", "-c", script]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "b changed\nv1\nresult\n600\n/opt/tool/bin\nSTAGE=prepared\n/elsewhere\n",
        "upper + workdir, not /tmp"
    );
    // On its own workdir the committed files show too: the workdir is an
    // overlay of the image's files there under a fresh tmpfs upper.
    let o = live.husk(&["run", "--image", "snap:1", "--", "sh", "-c", "cat out.txt; pwd; echo new > n && cat n"]);
    assert_eq!(stdout(&o), "result\n/work\nnew\n", "{}", stderr(&o));
    let inspect: Value = serde_json::from_str(&live.ok(&["image", "inspect", "snap:1"])).unwrap();
    assert_eq!(inspect["config"]["WorkingDir"], "/work");
    assert!(inspect["config"]["Env"].as_array().unwrap().contains(&json!("STAGE=prepared")), "{inspect}");
    // Nothing of husk's own /etc (hosts, resolv.conf, skeleton) in the layer.
    let top = inspect["layers"].as_array().unwrap().last().unwrap()["path"].as_str().unwrap().to_string();
    let files = tree(Path::new(&top));
    assert!(!files.iter().any(|f| f.starts_with("etc/")), "{files:?}");
}

#[test]
fn commit_refuses_unknown_sandbox_and_host_root() {
    let t = TempDir::new("commit-bad");
    let live = Live::new(&t, busybox_data_store(&t));
    let o = live.husk(&["commit", "nosuchsandbox", "x:1"]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    let id = live.create(&["--rootfs", t.join("bb").to_str().unwrap()]);
    let o = live.husk(&["commit", &id, "x:1"]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains("only an image's sandbox can be committed"), "{}", stderr(&o));
    assert!(live.husk(&["image", "inspect", "x:1"]).status.code() != Some(0));
}
