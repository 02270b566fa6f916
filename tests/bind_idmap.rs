//! `--bind SRC:DST:rw`: the sandbox's root (or `--user`) writes into a
//! directory an unprivileged host user owns as that owner (an idmapped
//! mount), and never as host root, nor outside the bound directory.
mod common;
use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// The host user that owns bound directories in these tests (not root,
/// not an id of the sandbox's own range).
const OWNER: (u32, u32) = (1000, 1000);

/// A fresh directory owned by `OWNER`, mode 0755 (only its owner writes).
fn owned_dir(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    std::os::unix::fs::chown(dir.path(), Some(OWNER.0), Some(OWNER.1)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn bind_rw(dir: &Path, target: &str) -> String {
    format!("{}:{target}:rw", dir.display())
}

/// `sh -c script` in a host-mode sandbox with `extra`; (stdout, verdict).
fn shell(extra: &[&str], script: &str) -> (String, serde_json::Value) {
    let run = script_in(Root::Host, extra, script);
    (stdout_of(&run.verdict), run.verdict)
}

/// The first minute: `mkdir share; husk run --bind share:/data:rw
/// -- sh -c 'echo x > /data/out'` failed with EACCES, and after chmod 777
/// the file belonged to husk's host uid. Now sandbox root sees the
/// directory as its own and what it writes belongs to the directory's
/// owner on the host.
#[test]
fn rw_bind_is_writable_by_sandbox_root_and_lands_as_dir_owner() {
    require_root!();
    let dir = owned_dir("idmap-root");
    let bind = bind_rw(dir.path(), "/data");
    let (out, v) = shell(
        &["--bind", &bind],
        "stat -c 'dir %u:%g' /data && echo x > /data/out && mkdir /data/sub && stat -c 'file %u:%g' /data/out",
    );
    assert_eq!(v["exit_code"], 0, "{v:#}");
    assert!(out.contains("dir 0:0"), "the directory shows as sandbox root's: {out}");
    assert!(out.contains("file 0:0"), "{out}");
    assert_eq!(owner(&dir.join("out")), OWNER, "a file sandbox root wrote belongs to the directory's owner");
    assert_eq!(owner(&dir.join("sub")), OWNER);
    assert_eq!(std::fs::read_to_string(dir.join("out")).unwrap(), "x\n");
}

/// With `--user U:G` the directory's owner is folded onto U instead: U
/// sees the directory as its own, writes there, and its files belong to
/// the directory's owner on the host.
#[test]
fn rw_bind_as_user() {
    require_root!();
    let dir = owned_dir("idmap-user");
    let bind = bind_rw(dir.path(), "/data");
    for user in ["1000:1000", "2000:3000"] {
        let name = format!("by-{}", user.replace(':', "-"));
        let script =
            format!("id -u; stat -c 'dir %u:%g' /data && echo x > /data/{name} && stat -c 'file %u:%g' /data/{name}");
        let (out, v) = shell(&["--bind", &bind, "--user", user], &script);
        assert_eq!(v["exit_code"], 0, "--user {user}: {v:#}");
        assert!(out.contains(&format!("dir {user}")), "--user {user}: {out}");
        assert!(out.contains(&format!("file {user}")), "--user {user}: {out}");
        assert_eq!(owner(&dir.join(&name)), OWNER, "--user {user}: host owner");
    }
}

/// The bind must not hand the sandbox host root, nor another host user: in
/// an idmapped bind chown to any id but its own fails (the others are not
/// mapped there), and a setuid file it makes is the directory owner's,
/// never host root's. A directory host root owns is not idmapped at all:
/// the sandbox writes there (where the mode lets it) as its own
/// unprivileged host uid, as before.
#[test]
fn rw_bind_cannot_create_host_root_or_foreign_owned_files() {
    require_root!();
    let dir = owned_dir("idmap-suid");
    let bind = bind_rw(dir.path(), "/data");
    let (out, v) = shell(
        &["--bind", &bind],
        "cp /bin/true /data/suid && chmod 4755 /data/suid && chown 0:0 /data/suid; \
         touch /data/f; if chown 5:5 /data/f 2>/dev/null; then echo chown5=ok; else echo chown5=refused; fi",
    );
    assert_eq!(v["exit_code"], 0, "{v:#}");
    assert!(out.contains("chown5=refused"), "{out}");
    let md = std::fs::metadata(dir.join("suid")).unwrap();
    assert_eq!((md.uid(), md.gid()), OWNER, "the setuid file is the owner's, not host root's");
    assert_eq!(owner(&dir.join("f")), OWNER);

    let rootdir = TempDir::new("idmap-rootowned");
    std::fs::set_permissions(rootdir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let bind = bind_rw(rootdir.path(), "/data");
    let (out, v) =
        shell(&["--bind", &bind], "stat -c 'dir %u' /data; cp /bin/true /data/suid && chmod 4755 /data/suid");
    assert_eq!(v["exit_code"], 0, "{v:#}");
    assert!(!out.contains("dir 0"), "host root's directory must not show as sandbox root's: {out}");
    let (uid, _) = mapped_root();
    assert_eq!(owner(&rootdir.join("suid")).0, uid, "written as the sandbox's own host uid");
}

/// A symlink in the bound directory pointing out of it (absolute, or up
/// with `..`) resolves inside the sandbox's own root, so writing through it
/// never reaches the host path it names.
#[test]
fn rw_bind_symlink_pointing_out_stays_in_the_sandbox() {
    require_root!();
    let dir = owned_dir("idmap-link");
    let outside = TempDir::new("idmap-outside");
    std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.join("abs")).unwrap();
    let up = format!("../../../../../../..{}", outside.path().display());
    std::os::unix::fs::symlink(&up, dir.join("rel")).unwrap();
    let bind = bind_rw(dir.path(), "/data");
    let (_, v) = shell(&["--bind", &bind], "echo a > /data/abs/pwn; echo b > /data/rel/pwn2; true");
    assert_eq!(v["exit_code"], 0, "{v:#}");
    let left: Vec<_> = std::fs::read_dir(outside.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "the sandbox wrote outside its bind: {left:?}");
}

/// A filesystem without idmapped-mount support (ramfs) cannot give the
/// promise, so the run is refused before anything starts, saying which
/// bind, which call, the errno and what to do. The ramfs is mounted in a
/// private mount namespace of the test's own (unshare -m), so the host's
/// mount table never sees it.
#[test]
fn idmap_unsupported_filesystem_refused_with_reason() {
    require_root!();
    let dir = TempDir::new("idmap-ramfs");
    let husk = husk_bin();
    let script = format!(
        "mount -t ramfs none {d} && chown {u}:{g} {d} && exec {husk} run --json --bind {d}:/data:rw -- sh -c 'echo x > /data/out'",
        d = dir.path().display(),
        u = OWNER.0,
        g = OWNER.1,
        husk = husk.display(),
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("unshare (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    let v = verdict_of(&out);
    assert_eq!(v["error"]["step"], "open_sources", "{v:#}");
    assert_eq!(v["error"]["errno"], "EINVAL", "{v:#}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("does not support idmapped mounts"), "{msg}");
    assert!(msg.contains(&dir.path().display().to_string()), "names the bind: {msg}");
    assert!(msg.contains("MOUNT_ATTR_IDMAP"), "{msg}");
}

/// gVisor's gofer serves a bind as its own root and fails on the ids an
/// idmapped tree leaves unmapped (EOVERFLOW for `--user`), so under
/// `--runtime runsc` a `:rw` bind stays a plain bind: the sandbox writes
/// as its own mapped host ids, where the directory's mode lets it.
#[test]
fn rw_bind_under_runsc_stays_a_plain_bind() {
    require_root!();
    require_runsc!();
    let dir = owned_dir("idmap-runsc");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let bind = bind_rw(dir.path(), "/data");
    let (_, v) = shell(&["--runtime", "runsc", "--bind", &bind, "--user", "1000:1000"], "echo x > /data/f");
    assert_eq!(v["exit_code"], 0, "{v:#}");
    let (uid, gid) = mapped_root();
    assert_eq!(owner(&dir.join("f")), (uid + 1000, gid + 1000));
}

mod rootless {
    use super::*;

    /// As root and rootless alike, what the sandbox's root writes through
    /// a `:rw` bind belongs on the host to the directory's owner (rootless
    /// the sandbox's root already is the invoking user, who owns it).
    #[test]
    fn rw_bind_files_land_as_dir_owner() {
        let dir = if is_root() { owned_dir("idmap-any") } else { TempDir::new("idmap-any") };
        let want = owner(dir.path());
        let bind = bind_rw(dir.path(), "/data");
        let (out, v) = shell(&["--bind", &bind], "echo x > /data/out && stat -c 'file %u' /data/out");
        assert_eq!(v["exit_code"], 0, "{v:#}");
        assert!(out.contains("file 0"), "{out}");
        assert_eq!(owner(&dir.join("out")), want);
    }
}

/// A `:rw` bind of a directory host root owns (what `mkdir share` as root
/// makes) is not idmapped, so the sandbox's root meets EACCES there: husk
/// says so before the run, with the two ways to let it write, instead of
/// leaving a Docker user with a bare "Permission denied" from inside.
#[test]
fn rw_bind_of_root_owned_dir_says_how_to_let_the_sandbox_write() {
    require_root!();
    let dir = TempDir::new("idmap-rootdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bind = bind_rw(dir.path(), "/data");
    let out = husk(&["run", "--bind", &bind, "--", "sh", "-c", "echo x > /data/out"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "sandbox root wrote into a root-owned 0755 directory: {err}");
    assert!(err.contains("belongs to host root") && err.contains("chown 1000:1000"), "no hint: {err}");
    // An owned directory is idmapped and gets no warning.
    let owned = owned_dir("idmap-nowarn");
    let bind = bind_rw(owned.path(), "/data");
    let out = husk(&["run", "--bind", &bind, "--", "sh", "-c", "echo x > /data/out"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"), "{}", String::from_utf8_lossy(&out.stderr));
}
