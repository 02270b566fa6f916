//! `husk pull` and `--image REF --pull` against a real registry (Debian's
//! docker-registry, filled with skopeo) and, for the hostile cases, a
//! loopback server that lies. Root only (the store shifts owners).
mod imagekit;
mod pullkit;
use imagekit::*;
use pullkit::*;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;

fn marker_layer(text: &str) -> Layer {
    Layer::gzip(Tar::new().dir("etc/", 0o755).file("etc/marker", text.as_bytes()).finish())
}

/// A busybox image with a marker layer on top; the layout and its
/// manifest descriptor.
fn busybox_image(dir: &Path, marker: &str) -> (Layout, Value) {
    let mut l = Layout::new(dir);
    let d = l.image(&[Layer::gzip(busybox_tar()), marker_layer(marker)], json!({"Cmd": ["cat", "/etc/marker"]}), None);
    (l, d)
}

/// `husk pull --json ...`: the result object (the last line) and the events.
fn pull_json(store: &Path, args: &[&str]) -> (Value, Vec<Value>) {
    let mut a = vec!["pull", "--json"];
    a.extend_from_slice(args);
    let o = husk_in(store, &a);
    let lines: Vec<Value> =
        stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect();
    assert!(o.status.success(), "pull {args:?} failed: {}\n{}", stderr(&o), stdout(&o));
    let result = lines.last().cloned().expect("a result line");
    (result, lines)
}

fn pull_err(store: &Path, args: &[&str]) -> String {
    let mut a = vec!["pull"];
    a.extend_from_slice(args);
    let o = husk_in(store, &a);
    assert_eq!(o.status.code(), Some(125), "pull {args:?} should fail: {}", stdout(&o));
    stderr(&o)
}

fn run_out(store: &Path, image: &str, extra: &[&str], cmd: &[&str]) -> String {
    let mut a = vec!["run", "--json", "--image", image];
    a.extend_from_slice(extra);
    a.push("--");
    a.extend_from_slice(cmd);
    let o = husk_in(store, &a);
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("no verdict ({e}): {} / {}", stdout(&o), stderr(&o)));
    assert_eq!(v["termination"], "exited", "{v} {}", stderr(&o));
    v["stdout"]["text"].as_str().unwrap_or_default().to_string()
}

#[test]
fn pull_by_tag_then_run() {
    let tmp = TempDir::new("pull-tag");
    let reg = Registry::start(Auth::None);
    let (_, desc) = busybox_image(&tmp.join("img"), "tagged\n");
    reg.push(&tmp.join("img"), "tools/busybox:1.0", None, false);
    let store = tmp.join("store");
    let reference = format!("{}/tools/busybox:1.0", reg.addr);
    let (res, events) = pull_json(&store, &[&reference]);
    assert_eq!(res["event"], "result");
    assert_eq!(res["name"], reference);
    assert_eq!(res["digest"], desc["digest"], "the manifest digest is recorded");
    assert_eq!(res["repository"], "tools/busybox");
    assert_eq!(res["tag"], "1.0");
    assert_eq!(res["extracted"], 2);
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"resolved"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "downloaded").count(), 2, "{kinds:?}");

    // The image runs with --pull never: it is stored under its reference.
    assert_eq!(run_out(&store, &reference, &["--pull", "never"], &[]), "tagged\n");
    let ls = husk_in(&store, &["image", "ls", "--json"]);
    let rows: Value = serde_json::from_slice(&ls.stdout).unwrap();
    assert_eq!(rows[0]["name"], reference, "{rows}");
    let inspect = husk_in(&store, &["image", "inspect", &reference, "--json"]);
    let v: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(v["manifest"], desc["digest"], "{v}");
    assert_eq!(v["pulled"]["repository"], "tools/busybox", "{v}");
    assert_eq!(v["pulled"]["tag"], "1.0", "{v}");

    // Pulling again downloads nothing.
    let (again, _) = pull_json(&store, &[&reference]);
    assert_eq!(again["extracted"], 0);
    assert_eq!(again["reused"], 2);
}

#[test]
fn pull_policy_never_fails_clearly_when_missing() {
    let tmp = TempDir::new("pull-never");
    let store = tmp.join("store");
    let o = husk_in(&store, &["run", "--image", "127.0.0.1:1/nothing/here:1", "--pull", "never", "--", "true"]);
    assert_eq!(o.status.code(), Some(125));
    let e = stderr(&o);
    assert!(e.contains("not in the store") && e.contains("--pull never") && e.contains("husk pull"), "{e}");
}

/// A hostile registry: serves `layout` (see `layout_reply`) unless `hook`
/// answers first.
fn hostile(layout: &Path, hook: impl Fn(&Request) -> Option<Reply> + Send + Sync + 'static) -> Server {
    let layout = layout.to_path_buf();
    Server::start(Arc::new(move |req: &Request| hook(req).unwrap_or_else(|| layout_reply(&layout, req))))
}

/// A two-layer image whose top layer is a plain tar (tamperable without
/// breaking its compression); the layout and the top layer's digest.
fn plain_top_image(dir: &Path) -> (Layout, String, String) {
    let mut l = Layout::new(dir);
    let top = Layer::plain(Tar::new().dir("etc/", 0o755).file("etc/marker", b"genuine\n").finish());
    let top_diff = sha256(&top.tar);
    let top_blob = sha256(&top.blob);
    l.image(&[Layer::gzip(busybox_tar()), top], json!({}), None);
    (l, top_blob, top_diff)
}

fn is_blob(req: &Request, digest: &str) -> bool {
    req.path.ends_with(&format!("/blobs/{digest}"))
}

/// Nothing named, nothing half-built: no record, no build in tmp/, and
/// not the refused layer.
fn assert_nothing_published(store: &Path, refused_diff_id: Option<&str>) {
    assert!(tree(&store.join("images")).is_empty(), "a record was written: {:?}", tree(&store.join("images")));
    assert!(tree(&store.join("tmp")).is_empty(), "partial builds: {:?}", tree(&store.join("tmp")));
    if let Some(d) = refused_diff_id {
        let hex = d.trim_start_matches("sha256:");
        let layers = tree(&store.join("layers"));
        assert!(!layers.iter().any(|l| l.starts_with(hex)), "the refused layer was published: {layers:?}");
    }
}

#[test]
fn tampered_blob_refused_nothing_published() {
    let tmp = TempDir::new("pull-tamper");
    let (l, top_blob, top_diff) = plain_top_image(&tmp.join("img"));
    let layout = l.dir.clone();
    let want = top_blob.clone();
    let srv = hostile(&l.dir, move |req| {
        is_blob(req, &want).then(|| {
            let mut body = std::fs::read(layout.join("blobs/sha256").join(want.trim_start_matches("sha256:"))).unwrap();
            let at = body.windows(7).position(|w| w == b"genuine").unwrap();
            body[at..at + 7].copy_from_slice(b"evil!!!");
            Reply::ok(body)
        })
    });
    let store = tmp.join("store");
    let e = pull_err(&store, &[&format!("{}/x/y:1", srv.addr)]);
    assert!(e.contains(&top_blob) && e.contains("has digest"), "{e}");
    assert_nothing_published(&store, Some(&top_diff));
}

#[test]
fn blob_larger_than_its_descriptor_refused() {
    let tmp = TempDir::new("pull-long");
    let (l, top_blob, top_diff) = plain_top_image(&tmp.join("img"));
    let layout = l.dir.clone();
    let want = top_blob.clone();
    let srv = hostile(&l.dir, move |req| {
        is_blob(req, &want).then(|| {
            let mut body = std::fs::read(layout.join("blobs/sha256").join(want.trim_start_matches("sha256:"))).unwrap();
            body.extend(std::iter::repeat_n(0u8, 1 << 20));
            Reply::ok(body)
        })
    });
    let store = tmp.join("store");
    let e = pull_err(&store, &[&format!("{}/x/y:1", srv.addr)]);
    assert!(e.contains(&top_blob) && e.contains("is longer than"), "{e}");
    assert_nothing_published(&store, Some(&top_diff));
}

#[test]
fn oversized_manifest_refused() {
    let tmp = TempDir::new("pull-big");
    let (l, _, _) = plain_top_image(&tmp.join("img"));
    let srv = hostile(&l.dir, |req| {
        req.path.contains("/manifests/").then(|| {
            let mut body = b"{\"schemaVersion\":2,\"pad\":\"".to_vec();
            body.extend(std::iter::repeat_n(b'x', 5 << 20));
            body.extend(b"\"}");
            Reply::ok(body)
        })
    });
    let store = tmp.join("store");
    let e = pull_err(&store, &[&format!("{}/x/y:1", srv.addr)]);
    assert!(e.contains("over the bound"), "{e}");
    assert_nothing_published(&store, None);
}

#[test]
fn redirect_loop_refused() {
    let tmp = TempDir::new("pull-loop");
    let (l, _, _) = plain_top_image(&tmp.join("img"));
    // a -> b -> a: a loop however many hops are allowed.
    let srv = hostile(&l.dir, |req| {
        let to = if req.path.ends_with("/manifests/1") { "/v2/x/y/manifests/2" } else { "/v2/x/y/manifests/1" };
        req.path.contains("/manifests/").then(|| Reply::status(307).header("Location", to))
    });
    let store = tmp.join("store");
    let e = pull_err(&store, &[&format!("{}/x/y:1", srv.addr)]);
    assert!(e.contains("redirect loop"), "{e}");
    assert!(srv.count(|_| true) <= 3, "followed the loop {} times", srv.count(|_| true));
    assert_nothing_published(&store, None);
}

#[test]
fn insecure_http_refused_for_non_loopback() {
    let tmp = TempDir::new("pull-insecure");
    let (l, top_blob, top_diff) = plain_top_image(&tmp.join("img"));
    // A loopback registry (plain HTTP is fine there) that sends a blob to
    // plain HTTP on another host (TEST-NET-1: never reached).
    let want = top_blob.clone();
    let srv = hostile(&l.dir, move |req| {
        is_blob(req, &want).then(|| Reply::status(307).header("Location", &format!("http://192.0.2.1:5000/b/{want}")))
    });
    let store = tmp.join("store");
    let e = pull_err(&store, &[&format!("{}/x/y:1", srv.addr)]);
    assert!(e.contains("plain HTTP") && e.contains("--insecure-registry 192.0.2.1:5000"), "{e}");
    assert_nothing_published(&store, Some(&top_diff));
}

#[test]
fn bad_digests_and_foreign_layers_in_a_manifest_are_refused() {
    let tmp = TempDir::new("pull-baddigest");
    let (l, _, _) = plain_top_image(&tmp.join("img"));
    let cfg = json!({"mediaType": "application/vnd.oci.image.config.v1+json", "size": 2,
        "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"});
    let manifest = |layer_digest: &str, media: &str| {
        json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": cfg,
            "layers": [{"mediaType": media, "size": 10, "digest": layer_digest}]})
    };
    let cases = [
        (manifest(&format!("sha512:{}", "a".repeat(128)), GZIP), "only sha256"),
        (manifest("sha256:../../../../etc/passwd", GZIP), "64 lowercase hex"),
        (
            manifest(
                &format!("sha256:{}", "b".repeat(64)),
                "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
            ),
            "foreign",
        ),
        (
            manifest(
                &format!("sha256:{}", "c".repeat(64)),
                "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
            ),
            "non-distributable",
        ),
    ];
    for (m, want) in cases {
        let body = serde_json::to_vec(&m).unwrap();
        let srv = hostile(&l.dir, move |req| req.path.contains("/manifests/").then(|| Reply::ok(body.clone())));
        let store = tmp.join("store");
        let e = pull_err(&store, &[&format!("{}/x/y:1", srv.addr)]);
        assert!(e.contains(want), "{want}: {e}");
        assert!(srv.count(|r| r.path.contains("/blobs/")) == 0, "a blob was fetched for a refused manifest");
        assert_nothing_published(&store, None);
    }
}

#[test]
fn rate_limited_registry_is_retried_after_retry_after() {
    let tmp = TempDir::new("pull-429");
    let (l, _, _) = plain_top_image(&tmp.join("img"));
    let first = std::sync::atomic::AtomicBool::new(true);
    let srv = hostile(&l.dir, move |req| {
        (req.path.contains("/manifests/") && first.swap(false, std::sync::atomic::Ordering::SeqCst))
            .then(|| Reply::status(429).header("Retry-After", "1"))
    });
    let store = tmp.join("store");
    let o = husk_in(&store, &["pull", &format!("{}/x/y:1", srv.addr)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("429"), "the retry is reported: {}", stderr(&o));
    assert_eq!(srv.count(|r| r.path.contains("/manifests/")), 2);
}

/// A hostile registry whose Bearer challenge names a token realm on
/// another origin must not collect the registry's Basic credential: the
/// realm (a loopback listener on another port) records what it got.
#[test]
fn token_realm_on_another_origin_gets_no_credential() {
    use base64::Engine;
    let tmp = TempDir::new("pull-realm");
    let (l, _, _) = plain_top_image(&tmp.join("img"));
    // The realm hands out a token only to a caller with a credential.
    let realm = Server::start(Arc::new(|req: &Request| {
        if req.authorization.is_some() { Reply::ok(br#"{"token":"tok"}"#.to_vec()) } else { Reply::status(401) }
    }));
    let challenge = format!("Bearer realm=\"http://{}/token\",service=\"evil\"", realm.addr);
    let srv = hostile(&l.dir, move |req| {
        (req.authorization.as_deref() != Some("Bearer tok"))
            .then(|| Reply::status(401).header("WWW-Authenticate", &challenge))
    });
    let docker = tmp.join("docker");
    std::fs::create_dir_all(&docker).unwrap();
    let auth = base64::engine::general_purpose::STANDARD.encode("tester:s3cret");
    std::fs::write(docker.join("config.json"), json!({"auths": {srv.addr.clone(): {"auth": auth}}}).to_string())
        .unwrap();
    let store = tmp.join("store");
    let reference = format!("{}/x/y:1", srv.addr);
    let o = husk_with(&store, &["pull", &reference], "", &[("DOCKER_CONFIG", &docker)]);
    assert_eq!(o.status.code(), Some(125), "the pull should fail: {}", stdout(&o));
    let e = stderr(&o);
    assert!(e.contains("HUSK_TRUSTED_TOKEN_REALMS") && e.contains(&realm.addr), "{e}");
    assert!(realm.count(|_| true) > 0, "the realm was not asked at all");
    assert_eq!(realm.count(|r| r.authorization.is_some()), 0, "the credential went to another origin");
    assert_nothing_published(&store, None);
    // `husk login` does not store what it could not check.
    let login = husk_with(&store, &["login", &srv.addr, "-u", "tester", "--password-stdin"], "s3cret", &[]);
    assert_eq!(login.status.code(), Some(125), "{}", stdout(&login));
    assert!(stderr(&login).contains("HUSK_TRUSTED_TOKEN_REALMS"), "{}", stderr(&login));
    assert_eq!(realm.count(|r| r.authorization.is_some()), 0, "login sent the credential to another origin");
    assert!(!store.join("auth.json").exists(), "unchecked credentials were stored");

    // Trusted by configuration, the realm gets it and the pull works.
    let origin = format!("http://{}", realm.addr);
    let env = [("DOCKER_CONFIG", docker.as_path()), ("HUSK_TRUSTED_TOKEN_REALMS", Path::new(&origin))];
    let o = husk_with(&store, &["pull", &reference], "", &env);
    assert!(o.status.success(), "{}", stderr(&o));
    let sent = format!("Basic {auth}");
    assert!(realm.count(|r| r.authorization.as_deref() == Some(sent.as_str())) > 0);
}

/// A manifest listing 5000 layers (all the same small blob, so most would
/// be "already stored") is refused before any blob is fetched, naming the
/// bound; so is one whose layers declare more bytes than the bound.
#[test]
fn manifest_with_too_many_layers_or_bytes_refused() {
    let tmp = TempDir::new("pull-layers");
    let (l, _, _) = plain_top_image(&tmp.join("img"));
    let index: Value = serde_json::from_slice(&std::fs::read(l.dir.join("index.json")).unwrap()).unwrap();
    let mdigest = index["manifests"][0]["digest"].as_str().unwrap().trim_start_matches("sha256:").to_string();
    let real: Value =
        serde_json::from_slice(&std::fs::read(l.dir.join("blobs/sha256").join(&mdigest)).unwrap()).unwrap();
    let one = real["layers"][1].clone();
    let many = |n: usize, size: Option<u64>| {
        let mut m = real.clone();
        let mut layer = one.clone();
        if let Some(s) = size {
            layer["size"] = json!(s);
        }
        m["layers"] = Value::Array(vec![layer; n]);
        serde_json::to_vec(&m).unwrap()
    };
    for (body, want) in
        [(many(5000, None), "5000 layers, over husk's bound of 256"), (many(3, Some(30 << 30)), "bytes (64 GiB)")]
    {
        let srv = hostile(&l.dir, move |req| req.path.contains("/manifests/").then(|| Reply::ok(body.clone())));
        let store = tmp.join("store");
        let e = pull_err(&store, &[&format!("{}/x/y:1", srv.addr)]);
        assert!(e.contains(want), "{want}: {e}");
        assert_eq!(srv.count(|r| r.path.contains("/blobs/")), 0, "a blob was fetched for a refused manifest");
        assert_nothing_published(&store, None);
    }
}

/// A registry answering every request `429 Retry-After: 3600` ends the
/// pull once the retry budget is spent, saying so (the budget is set to
/// 2 s here; by default 60 s, not 30 s per attempt and request).
#[test]
fn retry_after_storm_is_bounded_by_the_retry_budget() {
    let tmp = TempDir::new("pull-storm");
    let (l, _, _) = plain_top_image(&tmp.join("img"));
    let srv = hostile(&l.dir, |req| {
        req.path.contains("/manifests/").then(|| Reply::status(429).header("Retry-After", "3600"))
    });
    let store = tmp.join("store");
    let o = husk_with(
        &store,
        &["pull", &format!("{}/x/y:1", srv.addr)],
        "",
        &[("HUSK_REGISTRY_RETRY_BUDGET", Path::new("2"))],
    );
    assert_eq!(o.status.code(), Some(125), "{}", stdout(&o));
    let e = stderr(&o);
    assert!(e.contains("429") && e.contains("the 2 s this pull may spend waiting"), "{e}");
    assert_nothing_published(&store, None);
}

#[test]
fn pull_by_digest_pins_content() {
    let tmp = TempDir::new("pull-digest");
    let reg = Registry::start(Auth::None);
    let (_, first) = busybox_image(&tmp.join("a"), "first\n");
    reg.push(&tmp.join("a"), "app:stable", None, false);
    let (_, second) = busybox_image(&tmp.join("b"), "second\n");
    // The tag moves on; the digest still names the first image.
    reg.push(&tmp.join("b"), "app:stable", None, false);
    assert_ne!(first["digest"], second["digest"]);
    let store = tmp.join("store");
    let pinned = format!("{}/app@{}", reg.addr, first["digest"].as_str().unwrap());
    let (res, _) = pull_json(&store, &[&pinned]);
    assert_eq!(res["name"], pinned);
    assert_eq!(res["digest"], first["digest"]);
    assert_eq!(run_out(&store, &pinned, &["--pull", "never"], &[]), "first\n");
    // By tag (pulled on the fly by run, --pull missing): the moved tag.
    assert_eq!(run_out(&store, &format!("{}/app:stable", reg.addr), &[], &[]), "second\n");
    // A digest the registry does not have.
    let e = pull_err(&store, &[&format!("{}/app@sha256:{}", reg.addr, "0".repeat(64))]);
    assert!(e.contains("404"), "{e}");
}

#[test]
fn pull_multiplatform_index_picks_linux_amd64() {
    let tmp = TempDir::new("pull-multi");
    let reg = Registry::start(Auth::None);
    let mut l = Layout::new(&tmp.join("img"));
    let mut descs = Vec::new();
    for arch in ["arm64", "amd64", "s390x"] {
        let layers = [Layer::gzip(busybox_tar()), marker_layer(&format!("{arch}\n"))];
        let mut d = l.manifest(&layers, &Layout::config(&layers, json!({}), arch));
        d["platform"] = json!({"os": "linux", "architecture": arch});
        descs.push(d);
    }
    let index = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": descs});
    let idx = l.put(&serde_json::to_vec(&index).unwrap(), "application/vnd.oci.image.index.v1+json");
    l.manifests = vec![idx];
    l.write_index();
    reg.push(&l.dir, "multi:1", None, true);
    let reference = format!("{}/multi:1", reg.addr);
    let store = tmp.join("store");
    let (res, _) = pull_json(&store, &[&reference]);
    assert_eq!(res["platform"], "linux/amd64");
    assert_eq!(res["digest"], descs[1]["digest"]);
    assert_eq!(run_out(&store, &reference, &["--pull", "never"], &["cat", "/etc/marker"]), "amd64\n");
    let other = tmp.join("store-arm");
    let (res, _) = pull_json(&other, &["--platform", "linux/arm64", &reference]);
    assert_eq!(res["platform"], "linux/arm64");
    assert_eq!(res["digest"], descs[0]["digest"]);
    let e = pull_err(&other, &["--platform", "linux/riscv64", &reference]);
    assert!(e.contains("no manifest for linux/riscv64") && e.contains("linux/s390x"), "{e}");
}

#[test]
fn shared_layer_not_downloaded_twice() {
    let tmp = TempDir::new("pull-shared");
    let reg = Registry::start(Auth::None);
    busybox_image(&tmp.join("x"), "x\n");
    busybox_image(&tmp.join("y"), "y\n");
    reg.push(&tmp.join("x"), "x:1", None, false);
    reg.push(&tmp.join("y"), "y:1", None, false);
    let base = sha256(&Layer::gzip(busybox_tar()).blob);
    let store = tmp.join("store");
    pull_json(&store, &[&format!("{}/x:1", reg.addr)]);
    let (res, _) = pull_json(&store, &[&format!("{}/y:1", reg.addr)]);
    assert_eq!((res["extracted"].as_u64(), res["reused"].as_u64()), (Some(1), Some(1)), "{res}");
    assert_eq!(reg.blob_gets(&base), 1, "the shared base layer was fetched again:\n{}", reg.access_log());
    // A layer an import brought is not downloaded either.
    let imported = tmp.join("store-imported");
    import_ok(&imported, &tmp.join("x"), &[]);
    pull_json(&imported, &[&format!("{}/y:1", reg.addr)]);
    assert_eq!(reg.blob_gets(&base), 1, "a layer the store had from an import was fetched");
}

#[test]
fn concurrent_pulls_of_one_image_one_copy() {
    let tmp = TempDir::new("pull-concurrent");
    let reg = Registry::start(Auth::None);
    let (l, _) = busybox_image(&tmp.join("img"), "c\n");
    reg.push(&l.dir, "c:1", None, false);
    let store = tmp.join("store");
    let reference = format!("{}/c:1", reg.addr);
    let spawn = || {
        std::process::Command::new(husk_bin())
            .args(["pull", "--quiet", &reference])
            .env("HUSK_ROOT", &store)
            .env_remove("HUSK_ID_RANGE")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    for c in [a, b] {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(stdout(&o).trim(), reference);
    }
    let base = sha256(&Layer::gzip(busybox_tar()).blob);
    let top = sha256(&marker_layer("c\n").blob);
    assert_eq!((reg.blob_gets(&base), reg.blob_gets(&top)), (1, 1), "{}", reg.access_log());
    let dirs: Vec<String> = std::fs::read_dir(store.join("layers"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    assert!(tree(&store.join("tmp")).is_empty());
}

#[test]
fn progress_events_json_schema() {
    let tmp = TempDir::new("pull-events");
    let (l, _, _) = plain_top_image(&tmp.join("img"));
    let srv = hostile(&l.dir, |_| None);
    let store = tmp.join("store");
    let (_, lines) = pull_json(&store, &[&format!("{}/x/y:1", srv.addr)]);
    let is_digest = |v: &Value| v.as_str().is_some_and(|s| s.starts_with("sha256:") && s.len() == 71);
    let (last, events) = lines.split_last().unwrap();
    for e in events {
        match e["event"].as_str() {
            Some("resolved") => {
                assert!(is_digest(&e["digest"]) && e["layers"] == 2 && e["platform"] == "linux/amd64", "{e}");
                assert_eq!(e["reference"], format!("{}/x/y:1", srv.addr));
            }
            Some("downloading") | Some("downloaded") => assert!(is_digest(&e["digest"]) && e["size"].is_u64(), "{e}"),
            _ => panic!("unexpected event before the result: {e}"),
        }
    }
    assert_eq!(events.iter().filter(|e| e["event"] == "downloaded").count(), 2);
    assert_eq!(last["event"], "result", "{last}");
    for k in ["name", "reference", "registry", "repository", "tag", "platform"] {
        assert!(last[k].is_string(), "result.{k}: {last}");
    }
    assert!(is_digest(&last["digest"]) && last["layers"].as_array().unwrap().len() == 2, "{last}");
    assert!(last["layers"].as_array().unwrap().iter().all(|l| l["status"] == "extracted"), "{last}");
    // A failure ends the stream with one error object.
    let o = husk_in(&store, &["pull", "--json", &format!("{}/x/y@sha256:{}", srv.addr, "1".repeat(64))]);
    let out = stdout(&o);
    let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "error", "{out}");
    assert_eq!((last["termination"].as_str(), last["error"]["step"].as_str()), (Some("setup_failed"), Some("pull")));
    assert!(last["error"]["message"].is_string(), "{last}");
}

/// husk with HUSK_ROOT=`store`, `stdin` fed, extra environment.
fn husk_with(store: &Path, args: &[&str], stdin: &str, env: &[(&str, &Path)]) -> std::process::Output {
    use std::io::Write;
    let mut cmd = std::process::Command::new(husk_bin());
    cmd.args(args).env("HUSK_ROOT", store).env_remove("HUSK_ID_RANGE").env_remove("DOCKER_CONFIG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn basic_auth_from_login_and_docker_config() {
    use base64::Engine;
    let tmp = TempDir::new("pull-basic");
    let reg = Registry::start(Auth::Basic("tester", "s3cret"));
    let (l, _) = busybox_image(&tmp.join("img"), "basic\n");
    reg.push(&l.dir, "private/app:1", Some("tester:s3cret"), false);
    let reference = format!("{}/private/app:1", reg.addr);
    let store = tmp.join("store");
    let e = pull_err(&store, &[&reference]);
    assert!(e.contains(&format!("husk login {}", reg.addr)), "{e}");

    let login = |pw: &str| husk_with(&store, &["login", &reg.addr, "-u", "tester", "--password-stdin"], pw, &[]);
    let bad = login("wrong\n");
    assert_eq!(bad.status.code(), Some(125), "{}", stdout(&bad));
    assert!(stderr(&bad).contains("refused"), "{}", stderr(&bad));
    assert!(!store.join("auth.json").exists(), "refused credentials were stored");
    let ok = login("s3cret\n");
    assert!(ok.status.success(), "{}", stderr(&ok));
    let meta = std::fs::metadata(store.join("auth.json")).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o600);
    pull_json(&store, &[&reference]);

    // Docker's config, read-only: a fresh store with no husk login.
    let docker = tmp.join("docker");
    std::fs::create_dir_all(&docker).unwrap();
    let auth = base64::engine::general_purpose::STANDARD.encode("tester:s3cret");
    let config = json!({"auths": {reg.addr.clone(): {"auth": auth}}});
    std::fs::write(docker.join("config.json"), serde_json::to_vec(&config).unwrap()).unwrap();
    let other = tmp.join("store2");
    let o = husk_with(&other, &["pull", "--quiet", &reference], "", &[("DOCKER_CONFIG", &docker)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(docker.join("config.json")).unwrap(), serde_json::to_vec(&config).unwrap());
    let o = husk_with(&other, &["logout", &reg.addr], "", &[]);
    assert_eq!(o.status.code(), Some(125), "nothing was stored by husk in store2");
}

#[test]
fn bearer_token_flow() {
    let tmp = TempDir::new("pull-bearer");
    let issuer = TokenIssuer::start("tester", "t0ken");
    let reg = Registry::start(Auth::Token { realm: issuer.realm(), cert: issuer.cert.clone() });
    let (l, _) = busybox_image(&tmp.join("img"), "bearer\n");
    reg.push(&l.dir, "team/app:1", Some("tester:t0ken"), false);
    let reference = format!("{}/team/app:1", reg.addr);
    let store = tmp.join("store");
    let e = pull_err(&store, &[&reference]);
    assert!(e.contains("token service") && e.contains("husk login"), "{e}");
    let before = issuer.requests();
    // The issuer listens on another port than the registry: another
    // origin, trusted with the credential only by configuration.
    let issuer_origin = format!("http://{}", issuer.server.addr);
    let trust = [("HUSK_TRUSTED_TOKEN_REALMS", Path::new(&issuer_origin))];
    let ok = husk_with(&store, &["login", &reg.addr, "-u", "tester", "--password-stdin"], "t0ken", &trust);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let o = husk_with(&store, &["pull", "--json", &reference], "", &trust);
    assert!(o.status.success(), "{}", stderr(&o));
    let res: Value = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
    assert_eq!(res["extracted"], 2);
    assert!(issuer.requests() > before, "no token was asked for");
    assert_eq!(run_out(&store, &reference, &["--pull", "never"], &[]), "bearer\n");
}

#[test]
fn pull_resumes_after_kill() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = TempDir::new("pull-resume");
    let (l, top_blob, top_diff) = plain_top_image(&tmp.join("img"));
    let base_blob = sha256(&Layer::gzip(busybox_tar()).blob);
    let base_diff = sha256(&busybox_tar());
    // The top layer's blob hangs until released: the pull is killed
    // while it waits, after the base layer was published.
    let hold = Arc::new(AtomicBool::new(true));
    let (h, want) = (hold.clone(), top_blob.clone());
    let srv = hostile(&l.dir, move |req| {
        if !is_blob(req, &want) || !h.load(Ordering::SeqCst) {
            return None;
        }
        while h.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Some(Reply::status(500))
    });
    let store = tmp.join("store");
    let reference = format!("{}/x/y:1", srv.addr);
    let mut child = std::process::Command::new(husk_bin())
        .args(["pull", "--quiet", &reference])
        .env("HUSK_ROOT", &store)
        .env_remove("HUSK_ID_RANGE")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let base_published = || {
        std::fs::read_dir(store.join("layers")).is_ok_and(|rd| {
            rd.flatten().any(|e| e.path().is_dir() && e.file_name().to_string_lossy().starts_with(&base_diff[7..]))
        })
    };
    let mut ready = false;
    for _ in 0..3000 {
        if base_published() && srv.count(|r| is_blob(r, &top_blob)) == 1 {
            ready = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(ready, "the pull never reached the held layer with the base published");
    child.kill().unwrap();
    child.wait().unwrap();
    hold.store(false, Ordering::SeqCst);
    assert!(tree(&store.join("images")).is_empty(), "a killed pull wrote a record");

    let (res, _) = pull_json(&store, &[&reference]);
    assert_eq!((res["extracted"].as_u64(), res["reused"].as_u64()), (Some(1), Some(1)), "{res}");
    assert_eq!(srv.count(|r| is_blob(r, &base_blob)), 1, "the completed layer was fetched again");
    assert_eq!(srv.count(|r| is_blob(r, &top_blob)), 2);
    assert!(tree(&store.join("tmp")).is_empty(), "the killed pull's partial build is left");
    let hex = &top_diff[7..];
    assert!(tree(&store.join("layers")).iter().any(|p| p.starts_with(hex)));
}

#[test]
fn selftest_image_is_resolved_once_by_its_pull_policy() {
    let tmp = TempDir::new("pull-selftest");
    let (l, _, _) = plain_top_image(&tmp.join("img"));
    let srv = hostile(&l.dir, |_| None);
    let store = tmp.join("store");
    let reference = format!("{}/x/y:1", srv.addr);
    let args = |policy: &'static str| {
        vec!["selftest", "--json", "--probe", "/bin/busybox", "--only", "capabilities", "--pull", policy]
    };
    let mut a = args("never");
    a.extend(["--image", &reference]);
    let o = husk_in(&store, &a);
    assert_eq!(o.status.code(), Some(125));
    assert!(stderr(&o).contains("--pull never"), "{}", stderr(&o));
    assert_eq!(srv.count(|_| true), 0, "--pull never reached the registry");
    let mut a = args("missing");
    a.extend(["--image", &reference]);
    husk_in(&store, &a);
    assert_eq!(srv.count(|r| r.path.contains("/manifests/")), 1, "pulled once for every probe run");
    let ls: Value = serde_json::from_slice(&husk_in(&store, &["image", "ls", "--json"]).stdout).unwrap();
    assert_eq!(ls[0]["name"], reference);
}
