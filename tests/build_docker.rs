//! `husk build` against `docker build`: for a Dockerfile with no network
//! steps, the image husk builds and the one a private dockerd builds give
//! the same root filesystem. Root pass (dockerd is started privately by
//! tests/dockerkit and stopped by pid).
mod dockerkit;
mod imagekit;
use imagekit::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;

/// Every instruction kind that makes a layer, without network: COPY (with
/// --chown, a directory, into WORKDIR; not --chmod, which Docker 20.10's
/// legacy builder refuses and its BuildKit needs buildx for), ADD of a local tar (its
/// owners kept), RUN as root (setuid bit, symlink, hard link, chown,
/// removal of a base file, a whole directory replaced: an opaque dir) and
/// RUN as a non-root USER.
const DOCKERFILE: &str = "FROM bb
ARG V=7
ENV APP=/app
WORKDIR /app
COPY own ./
COPY --chown=1000:50 own /app/own2
COPY dir /app/dir/
ADD arch.tar /opt/
RUN chmod 640 /app/own2 && mkdir -p /srv/x && echo hi > /srv/x/f && chmod 4755 /srv/x/f && ln -s f /srv/x/l && ln /srv/x/f /srv/x/hard \\
 && rm /data/a && chown -R 1000:50 /srv/x && mkdir /data/new && echo $V > /data/new/v && chmod 700 /data/new
RUN rm -rf /keep && mkdir /keep && echo again > /keep/c && chown 1000 /keep/c
USER 1000
RUN echo user > /tmp/u && mkdir -p /home/user/d && echo mine > /home/user/d/m
CMD [\"sh\"]
";

/// The merged root of `image` as Docker exports it (`docker create` +
/// `docker export`), by path.
fn exported(docker: &dockerkit::Dockerd, image: &str, out: &Path) -> BTreeMap<String, Member> {
    let id = docker.ok(&["create", "--network", "none", image]).trim().to_string();
    docker.ok(&["export", "-o", out.to_str().unwrap(), &id]);
    docker.ok(&["rm", &id]);
    read_tar(&std::fs::read(out).unwrap()).into_iter().map(|m| (m.path.clone(), m)).collect()
}

#[test]
fn same_tree_as_docker_build() {
    let t = TempDir::new("build-docker");
    let store = t.join("store");
    let extra = Tar::new().file("data/a", b"a").file("data/b", b"b").file("keep/x", b"x").finish();
    let mut l = Layout::new(&t.join("bb"));
    l.image(&[Layer::gzip(busybox_tar()), Layer::plain(extra)], json!({"Env": ["PATH=/bin"], "Cmd": ["sh"]}), None);
    import_ok(&store, &l.dir, &["--name", "bb"]);

    let ctx = t.join("ctx");
    std::fs::create_dir_all(ctx.join("dir/sub")).unwrap();
    std::fs::write(ctx.join("Dockerfile"), DOCKERFILE).unwrap();
    std::fs::write(ctx.join("own"), "mine\n").unwrap();
    std::fs::write(ctx.join("dir/a"), "a\n").unwrap();
    std::fs::write(ctx.join("dir/sub/b"), "b\n").unwrap();
    let arch = Tar::new().dir("tool/", 0o750).file_mode("tool/run", 0o755, 1000, b"#!/bin/sh\n").finish();
    std::fs::write(ctx.join("arch.tar"), arch).unwrap();

    let o = husk_in(&store, &["build", "-t", "same:1", ctx.to_str().unwrap()]);
    assert!(o.status.success(), "husk build: {}{}", stdout(&o), stderr(&o));
    // The base and husk's image go to Docker the same way (docker load).
    let docker = dockerkit::Dockerd::start(&[]);
    for (name, file) in [("bb", "bb.tar"), ("same:1", "same.tar")] {
        let archive = t.join(file);
        let o =
            husk_in(&store, &["image", "export", name, "-o", archive.to_str().unwrap(), "--format", "docker-archive"]);
        assert!(o.status.success(), "export {name}: {}", stderr(&o));
        docker.ok(&["load", "-i", archive.to_str().unwrap()]);
    }
    // The legacy builder: this Docker has no buildx, which BuildKit needs.
    let o = docker
        .cmd()
        .env("DOCKER_BUILDKIT", "0")
        .args(["build", "--network", "none", "-t", "same-docker:1"])
        .arg(&ctx)
        .output()
        .unwrap();
    assert!(o.status.success(), "docker build: {}{}", stdout(&o), stderr(&o));

    let ours = exported(&docker, "same:1", &t.join("ours.tar"));
    let theirs = exported(&docker, "same-docker:1", &t.join("theirs.tar"));
    let mut diffs = Vec::new();
    for path in ours.keys().chain(theirs.keys()).collect::<std::collections::BTreeSet<_>>() {
        match (ours.get(path), theirs.get(path)) {
            (Some(a), Some(b)) if a == b => {}
            (a, b) => diffs.push(format!("{path}:\n  husk:   {a:?}\n  docker: {b:?}")),
        }
    }
    assert!(diffs.is_empty(), "{} differences:\n{}", diffs.len(), diffs.join("\n"));
    // The tree is not trivially empty: what the steps made is in it.
    for p in ["app/own2", "app/dir/sub/b", "opt/tool/run", "srv/x/hard", "keep/c", "home/user/d/m", "tmp/u"] {
        assert!(ours.contains_key(p), "{p} missing");
    }
    assert!(!ours.contains_key("data/a") && !ours.contains_key("keep/x"));
}
