//! Where a pull fetches from and how it talks to the user: registry
//! mirrors (real docker-registry instances), credential helpers, partial
//! downloads left by a killed pull, progress on a terminal. Root only.
mod imagekit;
mod pullkit;
use imagekit::*;
use pullkit::*;
use serde_json::{Value, json};
use std::path::Path;

fn busybox_image(dir: &Path, marker: &str) -> Layout {
    let mut l = Layout::new(dir);
    let top = Layer::gzip(Tar::new().dir("etc/", 0o755).file("etc/marker", marker.as_bytes()).finish());
    l.image(&[Layer::gzip(busybox_tar()), top], json!({"Cmd": ["cat", "/etc/marker"]}), None);
    l
}

fn husk_env(store: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(husk_bin());
    cmd.args(args)
        .env("HUSK_ROOT", store)
        .env_remove("HUSK_ID_RANGE")
        .env_remove("HUSK_REGISTRY_MIRROR")
        .env_remove("DOCKER_CONFIG")
        .stdin(std::process::Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn manifest_gets(reg: &Registry, repo: &str) -> usize {
    reg.access_log().lines().filter(|l| l.contains(&format!("\"GET /v2/{repo}/manifests/"))).count()
}

#[test]
fn registry_mirror_is_tried_first_and_the_origin_after_it() {
    let tmp = TempDir::new("pull-mirror");
    let origin = Registry::start(Auth::None);
    let mirror = Registry::start(Auth::None);
    let l = busybox_image(&tmp.join("img"), "mirrored\n");
    mirror.push(&l.dir, "library/hello:1", None, false);
    mirror.push(&l.dir, "team/app:1", None, false);
    origin.push(&l.dir, "only/origin:1", None, false);
    let store = tmp.join("store");
    let mirror_url = format!("http://{}", mirror.addr);

    // A bare URL mirrors Docker Hub (Docker's flag): `husk run --image
    // hello:1` is served by the mirror; registry-1.docker.io is never
    // asked (this machine cannot reach it) and the image keeps its name.
    let o = husk_env(
        &store,
        &["run", "--json", "--registry-mirror", &mirror_url, "--image", "hello:1", "--", "cat", "/etc/marker"],
        &[],
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    assert_eq!(v["stdout"]["text"], "mirrored\n", "{v} {}", stderr(&o));
    assert_eq!(manifest_gets(&mirror, "library/hello"), 1);
    let ls: Value = serde_json::from_slice(&husk_in(&store, &["image", "ls", "--json"]).stdout).unwrap();
    assert_eq!(ls[0]["name"], "hello:1", "{ls}");

    // A mirror that lacks the image: the origin serves it, and stderr
    // says the mirror was passed over. Mirrors of other registries come
    // from <store root>/registries.json.
    let config = json!({"mirrors": {origin.addr.clone(): [mirror_url.clone()]}});
    std::fs::write(store.join("registries.json"), config.to_string()).unwrap();
    let reference = format!("{}/only/origin:1", origin.addr);
    let o = husk_env(&store, &["pull", "--quiet", &reference], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), reference);
    assert!(stderr(&o).contains(&format!("mirror {mirror_url} of {}", origin.addr)), "{}", stderr(&o));
    assert_eq!(manifest_gets(&mirror, "only/origin"), 1, "the mirror was not asked first");
    assert_eq!(manifest_gets(&origin, "only/origin"), 1);

    // The origin is down: its mirror (here from HUSK_REGISTRY_MIRROR)
    // serves the image under the origin's name.
    let origin_addr = origin.addr.clone();
    drop(origin);
    let env = format!("{origin_addr}={mirror_url}");
    let reference = format!("{origin_addr}/team/app:1");
    let o = husk_env(&store, &["pull", "--quiet", &reference], &[("HUSK_REGISTRY_MIRROR", &env)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), reference);
    assert_eq!(manifest_gets(&mirror, "team/app"), 1);
}

#[test]
fn malformed_registry_flags_are_refused_before_anything_runs() {
    let tmp = TempDir::new("pull-mirror-bad");
    let store = tmp.join("store");
    for args in [
        vec!["pull", "--registry-mirror", "mirror.example", "busybox"],
        vec!["run", "--registry-mirror", "ftp://m.example", "--", "true"],
        vec!["run", "--platform", "linux", "--", "true"],
    ] {
        let o = husk_env(&store, &args, &[]);
        assert_eq!(o.status.code(), Some(125), "{args:?}: {}", stdout(&o));
        let e = stderr(&o);
        assert!(e.contains("expected URL") || e.contains("expected OS/ARCH"), "{args:?}: {e}");
    }
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join("registries.json"), r#"{"mirrors": {"docker.io": ["mirror.example"]}}"#).unwrap();
    let o = husk_env(&store, &["pull", "busybox"], &[]);
    assert_eq!(o.status.code(), Some(125));
    assert!(stderr(&o).contains("registries.json") && stderr(&o).contains("expected http(s)://"), "{}", stderr(&o));
}

#[test]
fn prune_removes_a_killed_pulls_partial_download() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = TempDir::new("pull-prune");
    let mut l = Layout::new(&tmp.join("img"));
    let top = Layer::plain(Tar::new().dir("etc/", 0o755).file("etc/marker", b"partial\n").finish());
    let top_blob = sha256(&top.blob);
    l.image(&[Layer::gzip(busybox_tar()), top], json!({}), None);
    // The top layer's blob is held: the pull is killed while its build
    // directory exists in tmp/.
    let hold = Arc::new(AtomicBool::new(true));
    let (h, want, dir) = (hold.clone(), top_blob.clone(), l.dir.clone());
    let srv = Server::start(Arc::new(move |req: &Request| {
        if req.path.ends_with(&format!("/blobs/{want}")) {
            while h.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            return Reply::status(500);
        }
        layout_reply(&dir, req)
    }));
    let store = tmp.join("store");
    let mut child = std::process::Command::new(husk_bin())
        .args(["pull", "--quiet", &format!("{}/x/y:1", srv.addr)])
        .env("HUSK_ROOT", &store)
        .env_remove("HUSK_ID_RANGE")
        .env_remove("HUSK_REGISTRY_MIRROR")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let base_published =
        || std::fs::read_dir(store.join("layers")).is_ok_and(|rd| rd.flatten().any(|e| e.path().is_dir()));
    let held = || {
        base_published()
            && srv.count(|r| r.path.ends_with(&format!("/blobs/{top_blob}"))) == 1
            && !tree(&store.join("tmp")).is_empty()
    };
    let mut ready = false;
    for _ in 0..3000 {
        if held() {
            ready = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(ready, "the pull never reached the held layer with the base published");
    child.kill().unwrap();
    child.wait().unwrap();
    hold.store(false, Ordering::SeqCst);
    assert!(!tree(&store.join("tmp")).is_empty(), "the killed pull left no partial download to prune");

    let o = husk_in(&store, &["image", "prune", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["partial_builds_removed"], 1, "{r}");
    assert_eq!(r["layers_removed"], 1, "the completed base layer has no image: {r}");
    assert!(tree(&store.join("tmp")).is_empty(), "{:?}", tree(&store.join("tmp")));
    assert!(tree(&store.join("layers")).is_empty(), "{:?}", tree(&store.join("layers")));
}

#[test]
fn progress_is_a_live_bar_per_layer_on_a_tty_and_a_line_per_layer_otherwise() {
    let tmp = TempDir::new("pull-progress");
    let reg = Registry::start(Auth::None);
    let l = busybox_image(&tmp.join("img"), "progress\n");
    reg.push(&l.dir, "p/bars:1", None, false);
    let reference = format!("{}/p/bars:1", reg.addr);
    let base = sha256(&Layer::gzip(busybox_tar()).blob);
    let top = sha256(&Layer::gzip(Tar::new().dir("etc/", 0o755).file("etc/marker", b"progress\n").finish()).blob);
    let shorts = [&base[7..19], &top[7..19]];

    // A real terminal: script(1) runs the pull on a pty and copies what
    // it drew (stdout and stderr) to its stdout.
    let store = tmp.join("tty-store");
    let cmd = format!("{} pull {reference}", husk_bin().display());
    let o = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("HUSK_ROOT", &store)
        .env_remove("HUSK_ID_RANGE")
        .env_remove("HUSK_REGISTRY_MIRROR")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script (util-linux)");
    let screen = stdout(&o);
    assert!(o.status.success(), "{screen}\n{}", stderr(&o));
    // Every redraw first moves the cursor up over the two bars.
    assert!(screen.contains("\x1b[2A"), "no redraw in place: {screen:?}");
    let last = screen.rsplit("\x1b[2A").next().unwrap();
    for s in shorts {
        let bar = last.lines().find(|line| line.contains(s)).unwrap_or_else(|| panic!("no bar for {s}: {last:?}"));
        assert!(bar.contains(&format!("[{}]", "#".repeat(30))) && bar.trim_end().ends_with("done"), "{bar:?}");
    }
    assert!(!screen.contains("downloading"), "per-layer lines on a TTY: {screen:?}");
    assert!(screen.contains(&format!("pulled {reference}")), "{screen:?}");

    // Not a terminal: one line per layer event, no escape sequences.
    let o = husk_in(&tmp.join("pipe-store"), &["pull", &reference]);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(!e.contains('\x1b'), "{e:?}");
    for s in shorts {
        assert_eq!(e.lines().filter(|l| l.starts_with(s) && l.contains(": downloaded ")).count(), 1, "{e}");
    }
}

#[test]
fn credential_helper_from_docker_config_is_asked_with_the_registry_on_stdin() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = TempDir::new("pull-credhelper");
    let reg = Registry::start(Auth::Basic("tester", "s3cret"));
    let l = busybox_image(&tmp.join("img"), "helper\n");
    reg.push(&l.dir, "private/app:1", Some("tester:s3cret"), false);
    let reference = format!("{}/private/app:1", reg.addr);
    let bin = tmp.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let asked = tmp.join("asked");
    let helper = |name: &str, body: &str| {
        let p = bin.join(format!("docker-credential-{name}"));
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    helper(
        "good",
        &format!(
            "[ \"$1\" = get ] || exit 2\ncat > {}\necho '{{\"ServerURL\":\"x\",\"Username\":\"tester\",\"Secret\":\"s3cret\"}}'",
            asked.display()
        ),
    );
    helper("flood", "cat >/dev/null; exec yes '{\"Username\":'");
    helper("broken", "cat >/dev/null; echo 'keychain locked'; exit 1");
    let docker = tmp.join("docker");
    std::fs::create_dir_all(&docker).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let pull = |store: &str, config: Value| {
        std::fs::write(docker.join("config.json"), config.to_string()).unwrap();
        let env = [("DOCKER_CONFIG", docker.to_str().unwrap()), ("PATH", path.as_str())];
        husk_env(&tmp.join(store), &["pull", "--quiet", &reference], &env)
    };

    // credHelpers: the helper gets `get` and the registry on stdin.
    let o = pull("s1", json!({"credHelpers": {reg.addr.clone(): "good"}}));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&asked).unwrap(), reg.addr);
    // credsStore: the default helper for every registry.
    std::fs::remove_file(&asked).unwrap();
    let o = pull("s2", json!({"credsStore": "good"}));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&asked).unwrap(), reg.addr);

    // Bounded output, a failure's own words, a missing helper: each named.
    for (helper, want) in
        [("flood", "more than 64 KiB"), ("broken", "keychain locked"), ("absent", "not found on PATH")]
    {
        let o = pull(&format!("bad-{helper}"), json!({"credHelpers": {reg.addr.clone(): helper}}));
        assert_eq!(o.status.code(), Some(125), "{helper}: {}", stdout(&o));
        let e = stderr(&o);
        assert!(e.contains(&format!("docker-credential-{helper}")) && e.contains(want), "{helper}: {e}");
    }
}
