//! Docker's habits with images and registries: `image rm` of several
//! names, `image ls` columns, one name for one image however it came in,
//! and `login` checked against the registry (tests/cli_habits.rs has the
//! command line's).
mod imagekit;
mod pullkit;
use imagekit::TempDir;
use std::process::{Command, Output};

fn husk(args: &[&str]) -> Command {
    let mut c = Command::new(imagekit::husk_bin());
    c.args(args).stdin(std::process::Stdio::null());
    c
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// A stored image named `name` (one small layer), in `store`.
fn image_named(dir: &TempDir, store: &std::path::Path, name: &str) {
    let layout = dir.join(&format!("layout-{}", name.replace(['/', ':'], "_")));
    let mut l = imagekit::Layout::new(&layout);
    l.image(
        &[imagekit::Layer::gzip(imagekit::Tar::new().file("etc/name", name.as_bytes()).finish())],
        serde_json::json!({}),
        None,
    );
    let o = imagekit::husk_in(store, &["image", "import", "--name", name, layout.to_str().unwrap()]);
    assert!(o.status.success(), "import {name}: {}", imagekit::stderr(&o));
}

/// `husk image rm` takes several names, as `docker rmi` does: each is
/// removed, one it cannot remove is named (exit 125) without keeping the
/// others.
#[test]
fn image_rm_removes_several_names_and_names_the_ones_it_could_not() {
    let dir = TempDir::new("image-rm");
    let store = dir.join("store");
    for n in ["one", "two", "three"] {
        image_named(&dir, &store, n);
    }
    let o = imagekit::husk_in(&store, &["image", "rm", "one", "two"]);
    assert!(o.status.success(), "{}", imagekit::stderr(&o));
    let o = imagekit::husk_in(&store, &["image", "rm", "--json", "nope", "three"]);
    assert_eq!(o.status.code(), Some(125), "{}", imagekit::stderr(&o));
    assert!(imagekit::stderr(&o).contains("nope"), "{}", imagekit::stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["removed"][0]["name"], "three:latest", "{v}");
    assert_eq!(v["errors"][0]["name"], "nope", "{v}");
    let ls = imagekit::husk_in(&store, &["image", "ls", "--json"]);
    assert_eq!(imagekit::stdout(&ls).trim(), "[]", "images left behind");
}

/// `husk image ls`: a name longer than the NAME column pushes the column
/// out instead of shifting its row's ID, LAYERS and SIZE under the wrong
/// headings.
#[test]
fn image_ls_columns_line_up_with_long_names() {
    let dir = TempDir::new("image-ls");
    let store = dir.join("store");
    image_named(&dir, &store, "short");
    image_named(&dir, &store, "registry.example.com:5000/team/some-rather-long-project/image:2026-12-07");
    let o = imagekit::husk_in(&store, &["image", "ls"]);
    let text = imagekit::stdout(&o);
    let col = |line: &str| {
        line.find(|c: char| c.is_whitespace()).map(|i| i + line[i..].find(|c: char| !c.is_whitespace()).unwrap())
    };
    let starts: Vec<Option<usize>> = text.lines().map(col).collect();
    assert_eq!(starts.len(), 3, "{text}");
    assert!(starts.windows(2).all(|w| w[0] == w[1]), "the ID column does not line up:\n{text}");
}

/// One image imported three ways (a layout named `busybox.oci`, one whose
/// index says `busybox:latest`, one whose containerd name is
/// `docker.io/library/busybox:latest`), and `--name docker.io/library/busybox`:
/// one stored name, `busybox:latest`, found by every Docker spelling of it.
#[test]
fn one_image_imported_three_ways_has_one_name() {
    let dir = TempDir::new("one-name");
    let store = dir.join("store");
    let layer = || imagekit::Layer::gzip(imagekit::Tar::new().file("etc/name", b"busybox").finish());
    let by_stem = dir.join("busybox.oci");
    imagekit::Layout::new(&by_stem).image(&[layer()], serde_json::json!({}), None);
    let by_ref = dir.join("by-ref");
    imagekit::Layout::new(&by_ref).image(&[layer()], serde_json::json!({}), Some("busybox:latest"));
    let by_containerd = dir.join("by-containerd");
    let mut l = imagekit::Layout::new(&by_containerd);
    l.image(&[layer()], serde_json::json!({}), None);
    l.manifests[0]["annotations"] =
        serde_json::json!({ "io.containerd.image.name": "docker.io/library/busybox:latest" });
    l.write_index();
    for (src, extra) in [
        (&by_stem, &[][..]),
        (&by_ref, &[][..]),
        (&by_containerd, &[][..]),
        (&by_stem, &["--name", "docker.io/library/busybox"][..]),
    ] {
        let mut args = vec!["image", "import", "--json", src.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = imagekit::husk_in(&store, &args);
        assert!(o.status.success(), "{src:?}: {}", imagekit::stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["name"], "busybox:latest", "{src:?} {extra:?}: {v}");
    }
    let ls: serde_json::Value =
        serde_json::from_slice(&imagekit::husk_in(&store, &["image", "ls", "--json"]).stdout).unwrap();
    let names: Vec<&str> = ls.as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["busybox:latest"], "{ls}");
    for spelling in ["busybox", "docker.io/library/busybox:latest", "index.docker.io/library/busybox"] {
        let o = imagekit::husk_in(&store, &["image", "inspect", spelling]);
        assert!(o.status.success(), "{spelling}: {}", imagekit::stderr(&o));
    }
}

/// `husk login` tries the credentials on the registry before storing them
/// (loopback docker-registry with htpasswd, and one without auth); a
/// refusal stores nothing; `--no-verify` stores without asking, and says so.
#[test]
fn login_checks_credentials_against_the_registry() {
    use pullkit::{Auth, Registry};
    let dir = TempDir::new("login");
    let store = dir.join("store");
    let login = |addr: &str, pw: &str, extra: &[&str]| {
        let mut args = vec!["login", addr, "-u", "tester", "--password-stdin"];
        args.extend_from_slice(extra);
        let mut c = husk(&args);
        c.env("HUSK_ROOT", &store).env_remove("DOCKER_CONFIG").env_remove("HUSK_ID_RANGE");
        c.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(pw.as_bytes()).unwrap();
        let o = child.wait_with_output().unwrap();
        let (out, err) = text(&o);
        (o.status.code(), out, err)
    };
    let basic = Registry::start(Auth::Basic("tester", "s3cret"));
    let (code, _, err) = login(&basic.addr, "wrong\n", &[]);
    assert_eq!(code, Some(125), "a wrong password was accepted: {err}");
    assert!(!store.join("auth.json").exists(), "refused credentials were stored");
    let (code, out, err) = login(&basic.addr, "s3cret\n", &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("accepted by the registry"), "{out}");
    let open = Registry::start(Auth::None);
    let (code, out, err) = login(&open.addr, "anything\n", &[]);
    assert_eq!(code, Some(0), "a registry without auth takes any login, as docker login does: {err}");
    assert!(out.contains("accepted by the registry"), "{out}");
    // Nothing listens here: checked, it is refused; --no-verify stores it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let (code, _, err) = login(&closed, "pw\n", &[]);
    assert_eq!(code, Some(125), "{err}");
    let (code, out, err) = login(&closed, "pw\n", &["--no-verify"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("not checked (--no-verify)"), "{out}");
}
