//! `husk cp` into and out of gVisor sandboxes (`--runtime runsc`): the
//! copier runs inside gVisor (`runsc exec` of husk's own binary), so trees
//! round-trip with their modes and the sandbox user as owner, a symlink in
//! the sandbox never makes husk read or write a host path, a hostile
//! stream cannot write through a symlink it planted (ELOOP, without
//! openat2 in gVisor), and the bounds hold. The native variants are in
//! tests/files.rs.
mod common;
mod sandboxkit;

use common::*;
use sandboxkit::*;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::{Output, Stdio};

fn create_runsc(s: &Sbx) -> String {
    let root = busybox_rootfs().display().to_string();
    s.create_with(&["--runtime", "runsc", "--rootfs", &root])
}

fn cp(s: &Sbx, args: &[&str]) -> Output {
    let mut a = vec!["cp"];
    a.extend_from_slice(args);
    s.out(&a)
}

fn ok(out: &Output) {
    assert!(out.status.success(), "husk cp failed ({:?}): {}", out.status, String::from_utf8_lossy(&out.stderr));
}

fn refused(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "expected a refusal (125): {err}");
    for n in needles {
        assert!(err.contains(n), "the refusal does not say {n:?}: {err}");
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// 3 MB of bytes that are not all alike.
fn pattern(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e3779b97f4a7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A stream on `husk cp - ID:DEST`'s stdin.
fn put_stream(s: &Sbx, id: &str, dest: &str, stream: &[u8]) -> Output {
    let mut put =
        s.husk(&["cp", "-", &format!("{id}:{dest}")]).stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(&mut put.stdin.take().unwrap(), stream).unwrap();
    put.wait_with_output().unwrap()
}

#[test]
fn runsc_cp_roundtrip_and_symlink_safety() {
    require_root!();
    require_runsc!();
    let s = Sbx::new();
    let id = create_runsc(&s);
    assert_eq!(s.inspect(&id)["backend"], "runsc");
    let host = TempDir::new("runsc-cp");

    // A tree in: modes, a symlink, an empty dir, a 3 MB file, an odd name.
    let src = host.join("tree");
    let big = pattern(3 << 20);
    std::fs::create_dir_all(src.join("sub/empty")).unwrap();
    std::fs::write(src.join("run.sh"), "#!/bin/sh\necho ran\n").unwrap();
    std::fs::write(src.join("secret"), "s3").unwrap();
    std::fs::write(src.join("sub/with space\nand newline"), "odd name").unwrap();
    std::fs::write(src.join("sub/big.bin"), &big).unwrap();
    symlink("sub/big.bin", src.join("link")).unwrap();
    for (p, m) in [("run.sh", 0o755), ("secret", 0o600), ("sub/empty", 0o750)] {
        std::fs::set_permissions(src.join(p), std::fs::Permissions::from_mode(m)).unwrap();
    }
    ok(&cp(&s, &[src.to_str().unwrap(), &format!("{id}:/tmp/")]));
    let (out, code) =
        s.sh(&id, "cd /tmp/tree && stat -c '%n %a %u' run.sh secret sub/empty && readlink link && uname -v && id -u");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(GVISOR_UNAME_V), "not under gVisor: {out}");
    let uid = out.lines().last().unwrap().to_string();
    assert!(
        out.starts_with(&format!("run.sh 755 {uid}\nsecret 600 {uid}\nsub/empty 750 {uid}\nsub/big.bin\n")),
        "{out}"
    );
    assert_eq!(s.sh(&id, "/tmp/tree/run.sh").0, "ran\n");

    // Out again, into a new name: the same bytes, modes and link.
    let back = host.join("back");
    ok(&cp(&s, &[&format!("{id}:/tmp/tree"), back.to_str().unwrap()]));
    assert_eq!(std::fs::read(back.join("sub/big.bin")).unwrap(), big);
    assert_eq!(std::fs::read_to_string(back.join("sub/with space\nand newline")).unwrap(), "odd name");
    assert_eq!(std::fs::read_link(back.join("link")).unwrap(), Path::new("sub/big.bin"));
    for p in ["run.sh", "secret", "sub/empty"] {
        assert_eq!(mode(&back.join(p)), mode(&src.join(p)), "{p}: mode differs");
    }
    // A single file by a relative path (the workdir's), and a tar stream out.
    ok(&cp(&s, &[src.join("secret").to_str().unwrap(), &format!("{id}:renamed")]));
    assert_eq!(s.sh(&id, "cat /workspace/renamed").0, "s3");
    let tar = s.husk(&["cp", &format!("{id}:/tmp/tree/secret"), "-"]).output().unwrap();
    ok(&tar);
    let listed = std::process::Command::new("tar").args(["-t", "-v", "-f", "-"]).stdin(Stdio::piped()).spawn();
    let mut listed = listed.unwrap();
    std::io::Write::write_all(&mut listed.stdin.take().unwrap(), &tar.stdout).unwrap();
    assert!(listed.wait().unwrap().success(), "GNU tar cannot read husk's stream from gVisor");

    // Symlinks in the sandbox pointing at a host path resolve inside the
    // sandbox's own view, never to the host's files: out, nothing comes;
    // in, nothing is written on the host.
    let victim = host.join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(victim.join("marker"), "host secret").unwrap();
    std::fs::write(host.join("payload"), "pwned").unwrap();
    let script = format!(
        "ln -s {v} /tmp/esc && ln -s /proc/self/root /tmp/magic && ln -s ../../../../../../{v} /tmp/up",
        v = victim.display()
    );
    assert_eq!(s.sh(&id, &script).1, 0);
    for link in ["/tmp/esc/marker", "/tmp/up/marker", "/tmp/magic/tmp/esc/marker"] {
        let out = cp(&s, &[&format!("{id}:{link}"), host.join("got").to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(125), "{link}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(!host.join("got").exists(), "{link}: something was copied out");
    }
    for dest in ["/tmp/esc/", "/tmp/up/x", "/tmp/magic/tmp/esc/x"] {
        let out = cp(&s, &[host.join("payload").to_str().unwrap(), &format!("{id}:{dest}")]);
        assert_eq!(out.status.code(), Some(125), "{dest}: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 1, "a copy in wrote into the host's directory");
    // A sandbox-made symlink to the victim lands on the host as a symlink,
    // never followed.
    let script = format!("mkdir /tmp/d && ln -s {v}/marker /tmp/d/f && ln -s /etc /tmp/d/etc", v = victim.display());
    assert_eq!(s.sh(&id, &script).1, 0);
    let out_dir = host.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    ok(&cp(&s, &[&format!("{id}:/tmp/d"), out_dir.to_str().unwrap()]));
    assert!(std::fs::symlink_metadata(out_dir.join("d/f")).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_link(out_dir.join("d/etc")).unwrap(), Path::new("/etc"));
    assert_eq!(std::fs::read_to_string(victim.join("marker")).unwrap(), "host secret");

    // A stream that plants `l -> /etc` and then writes `l/passwd`: refused
    // with ELOOP inside gVisor (no openat2 there: one component at a time,
    // O_NOFOLLOW, checked on the fd), the sandbox's /etc untouched.
    let d = host.join("link-then-file");
    std::fs::create_dir_all(d.join("real")).unwrap();
    std::fs::write(d.join("real/passwd"), "x").unwrap();
    symlink("/tmp", d.join("l")).unwrap();
    let first = std::process::Command::new("tar").args(["-c", "-f", "-", "l"]).current_dir(&d).output().unwrap();
    let second = std::process::Command::new("tar")
        .args(["-c", "-f", "-", "--transform", "s,^real,l,", "real/passwd"])
        .current_dir(&d)
        .output()
        .unwrap();
    let mut stream = first.stdout.clone();
    while stream.ends_with(&[0u8; 512]) {
        stream.truncate(stream.len() - 512);
    }
    stream.extend_from_slice(&second.stdout);
    assert_eq!(s.sh(&id, "mkdir /tmp/in").1, 0);
    refused(&put_stream(&s, &id, "/tmp/in", &stream), &["ELOOP"]);
    assert_eq!(
        s.sh(&id, "readlink /tmp/in/l; ls /tmp/passwd 2>&1").0,
        "/tmp\nls: /tmp/passwd: No such file or directory\n"
    );
    // `..` in a stream is refused, not cleaned.
    std::fs::write(d.join("x"), "x").unwrap();
    let dotdot =
        std::process::Command::new("tar").args(["-c", "-P", "-f", "-", "../x"]).current_dir(d.join("real")).output();
    let dotdot = dotdot.unwrap();
    assert!(!dotdot.stdout.is_empty(), "{}", String::from_utf8_lossy(&dotdot.stderr));
    refused(&put_stream(&s, &id, "/tmp/in", &dotdot.stdout), &["refused"]);

    // Bounds, and a read-only place named with the writable ones.
    let out = cp(&s, &["--max-bytes", "1M", src.join("sub/big.bin").to_str().unwrap(), &format!("{id}:/tmp/b/")]);
    refused(&out, &["--max-bytes 1048576"]);
    let out = cp(&s, &["--max-bytes", "1M", &format!("{id}:/tmp/tree/sub/big.bin"), host.join("b").to_str().unwrap()]);
    refused(&out, &["--max-bytes"]);
    assert!(!host.join("b").exists());
    let out = cp(&s, &[host.join("payload").to_str().unwrap(), &format!("{id}:/etc/payload")]);
    refused(&out, &["EROFS", "/workspace"]);

    let rec = s.inspect(&id);
    s.rm(&id);
    assert_gone(&s, &rec, None);
}
