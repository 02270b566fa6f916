//! Files in and out of live sandboxes (`husk cp`) and code by stdin
//! (`husk exec ID -- sh -s`): trees round-trip with their modes, a
//! sandbox-made symlink is never followed on either side, copies are
//! bounded, and writes to read-only places are refused with the places
//! that are writable.
mod common;
mod sandboxkit;

use common::*;
use sandboxkit::*;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::{Output, Stdio};

/// Deterministic bytes (no /dev/urandom: a failure must be reproducible).
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn sha256_hex(data: &[u8]) -> String {
    let mut c = std::process::Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = c.stdin.take().unwrap();
    let data = data.to_vec();
    let w = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &data));
    let out = c.wait_with_output().unwrap();
    w.join().unwrap().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().to_string()
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

/// The tree every round trip copies: modes, a symlink, empty dirs, a
/// 10 MB file, names with spaces and newlines.
fn make_tree(root: &Path) -> Vec<u8> {
    let big = pattern(10 << 20, 7);
    std::fs::create_dir_all(root.join("sub/empty")).unwrap();
    std::fs::create_dir_all(root.join("private")).unwrap();
    std::fs::write(root.join("run.sh"), "#!/bin/sh\necho ran\n").unwrap();
    std::fs::write(root.join("secret"), "s3").unwrap();
    std::fs::write(root.join("ro"), "read only").unwrap();
    std::fs::write(root.join("sub/with space\nand newline"), "odd name").unwrap();
    std::fs::write(root.join("sub/big.bin"), &big).unwrap();
    symlink("sub/big.bin", root.join("link")).unwrap();
    for (p, m) in [("run.sh", 0o755), ("secret", 0o600), ("ro", 0o444), ("private", 0o700), ("sub/empty", 0o750)] {
        std::fs::set_permissions(root.join(p), std::fs::Permissions::from_mode(m)).unwrap();
    }
    big
}

fn assert_same_tree(a: &Path, b: &Path) {
    for rel in
        ["run.sh", "secret", "ro", "private", "sub", "sub/empty", "sub/with space\nand newline", "sub/big.bin", "link"]
    {
        let (pa, pb) = (a.join(rel), b.join(rel));
        let (ma, mb) = (std::fs::symlink_metadata(&pa).unwrap(), std::fs::symlink_metadata(&pb).unwrap());
        assert_eq!(ma.file_type(), mb.file_type(), "{rel:?}: type differs");
        assert_eq!(mode(&pa), mode(&pb), "{rel:?}: mode differs");
        if ma.is_file() {
            assert_eq!(std::fs::read(&pa).unwrap(), std::fs::read(&pb).unwrap(), "{rel:?}: content differs");
        }
        if ma.file_type().is_symlink() {
            assert_eq!(std::fs::read_link(&pa).unwrap(), std::fs::read_link(&pb).unwrap(), "{rel:?}: target differs");
        }
    }
    assert_eq!(std::fs::read_dir(b.join("sub/empty")).unwrap().count(), 0);
}

mod rootless {
    use super::*;

    #[test]
    fn cp_in_out_roundtrip_tree_with_modes() {
        let s = Sbx::new();
        let id = s.create(&[]);
        let host = TempDir::new("cp-tree");
        let src = host.join("tree");
        let big = make_tree(&src);
        ok(&cp(&s, &[src.to_str().unwrap(), &format!("{id}:/tmp/")]));
        // Seen from inside: the modes, the link, the 10 MB file's bytes, and
        // the sandbox's own user as the owner.
        let (out, code) = s.sh(
            &id,
            "cd /tmp/tree && stat -c '%n %a %u' run.sh secret ro private sub/empty && readlink link && sha256sum sub/big.bin && id -u",
        );
        assert_eq!(code, 0, "{out}");
        let uid = out.lines().last().unwrap().to_string();
        let expected = format!(
            "run.sh 755 {uid}\nsecret 600 {uid}\nro 444 {uid}\nprivate 700 {uid}\nsub/empty 750 {uid}\nsub/big.bin\n{}  sub/big.bin\n{uid}\n",
            sha256_hex(&big)
        );
        assert_eq!(out, expected);
        let (ran, _) = s.sh(&id, "/tmp/tree/run.sh");
        assert_eq!(ran, "ran\n");
        // Out again, into a new name, then into an existing directory.
        ok(&cp(&s, &[&format!("{id}:/tmp/tree"), host.join("back").to_str().unwrap()]));
        assert_same_tree(&src, &host.join("back"));
        std::fs::create_dir(host.join("into")).unwrap();
        ok(&cp(&s, &[&format!("{id}:/tmp/tree"), host.join("into").to_str().unwrap()]));
        assert_same_tree(&src, &host.join("into/tree"));
        // A single file, by a relative path (the workdir's), under a new name.
        ok(&cp(&s, &[src.join("secret").to_str().unwrap(), &format!("{id}:renamed")]));
        assert_eq!(s.sh(&id, "cat /workspace/renamed").0, "s3");
        // Tar streams both ways.
        let tar = s.husk(&["cp", &format!("{id}:/tmp/tree/sub"), "-"]).output().unwrap();
        ok(&tar);
        let mut put =
            s.husk(&["cp", "-", &format!("{id}:/tmp")]).stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let stream = rename_top(&tar.stdout, "sub", "again");
        std::io::Write::write_all(&mut put.stdin.take().unwrap(), &stream).unwrap();
        ok(&put.wait_with_output().unwrap());
        let (out, _) = s.sh(&id, "sha256sum /tmp/again/big.bin; cat '/tmp/again/with space\nand newline'");
        assert_eq!(out, format!("{}  /tmp/again/big.bin\nodd name", sha256_hex(&big)));
    }

    /// The stream `husk cp ID:PATH -` printed, its tree renamed (by GNU tar,
    /// which reads it back: it is a standard tar).
    fn rename_top(stream: &[u8], from: &str, to: &str) -> Vec<u8> {
        let t = TempDir::new("cp-stream");
        let mut x =
            std::process::Command::new("tar").args(["-x", "-C"]).arg(t.path()).stdin(Stdio::piped()).spawn().unwrap();
        std::io::Write::write_all(&mut x.stdin.take().unwrap(), stream).unwrap();
        assert!(x.wait().unwrap().success(), "GNU tar cannot read husk's stream");
        std::fs::rename(t.join(from), t.join(to)).unwrap();
        let out = std::process::Command::new("tar").args(["-c", "-C"]).arg(t.path()).arg(to).output().unwrap();
        assert!(out.status.success());
        out.stdout
    }

    #[test]
    fn cp_refuses_symlink_escape() {
        let s = Sbx::new();
        let id = s.create(&[]);
        let host = TempDir::new("cp-escape");
        let victim = host.join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(victim.join("marker"), "host secret").unwrap();
        std::fs::write(host.join("payload"), "pwned").unwrap();
        // Inside: symlinks pointing out of the sandbox (at the host's path,
        // and through /proc's magic links) resolve inside its root, or not
        // at all; never to the host's files.
        let script = format!(
            "ln -s {v} /tmp/esc && ln -s /proc/self/root /tmp/magic && ln -s ../../../../../../{v} /tmp/up",
            v = victim.display()
        );
        assert_eq!(s.sh(&id, &script).1, 0);
        for link in ["/tmp/esc/marker", "/tmp/up/marker", "/tmp/magic/etc/hostname"] {
            let out = cp(&s, &[&format!("{id}:{link}"), host.join("got").to_str().unwrap()]);
            assert_eq!(out.status.code(), Some(125), "{link}: {}", String::from_utf8_lossy(&out.stderr));
            assert!(!host.join("got").exists(), "{link}: something was copied out");
        }
        for dest in ["/tmp/esc/", "/tmp/up/x", "/tmp/magic/tmp/x"] {
            let out = cp(&s, &[host.join("payload").to_str().unwrap(), &format!("{id}:{dest}")]);
            assert_eq!(out.status.code(), Some(125), "{dest}: {}", String::from_utf8_lossy(&out.stderr));
        }
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 1, "a copy in wrote into the host's directory");
        // Outside: a sandbox-made symlink to /etc (and one to the victim
        // file) lands on the host as a symlink, never followed; copied out
        // again after the sandbox made it a file, the link is replaced, and
        // what it pointed at is untouched.
        let script = format!(
            "mkdir /tmp/d && ln -s /etc /tmp/d/etc && ln -s {v}/marker /tmp/d/f && ln -s {v} /tmp/d/dir",
            v = victim.display()
        );
        assert_eq!(s.sh(&id, &script).1, 0);
        let out_dir = host.join("out");
        std::fs::create_dir(&out_dir).unwrap();
        ok(&cp(&s, &[&format!("{id}:/tmp/d"), out_dir.to_str().unwrap()]));
        assert_eq!(std::fs::read_link(out_dir.join("d/etc")).unwrap(), Path::new("/etc"));
        assert!(std::fs::symlink_metadata(out_dir.join("d/f")).unwrap().file_type().is_symlink());
        assert_eq!(
            s.sh(
                &id,
                "rm /tmp/d/f /tmp/d/dir && echo pwned > /tmp/d/f && mkdir /tmp/d/dir && echo pwned > /tmp/d/dir/marker"
            )
            .1,
            0
        );
        ok(&cp(&s, &[&format!("{id}:/tmp/d"), out_dir.to_str().unwrap()]));
        assert_eq!(std::fs::read_to_string(victim.join("marker")).unwrap(), "host secret");
        assert_eq!(std::fs::read_to_string(out_dir.join("d/f")).unwrap(), "pwned\n");
        assert!(std::fs::symlink_metadata(out_dir.join("d/dir")).unwrap().is_dir());
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 1);
        assert_eq!(std::fs::read_link(out_dir.join("d/etc")).unwrap(), Path::new("/etc"));
    }

    /// A hand-made tar stream on stdin with `..`, an absolute name, and a
    /// symlink followed by an entry below it: each refused in the sandbox.
    #[test]
    fn cp_refuses_hostile_tar_names() {
        let s = Sbx::new();
        let id = s.create(&[]);
        let t = TempDir::new("cp-hostile");
        for (name, args) in
            [("dotdot", vec!["-c", "-P", "-f", "-", "../../x"]), ("absolute", vec!["-c", "-P", "-f", "-", "/x"])]
        {
            std::fs::write(t.join("x"), "x").unwrap();
            let dir = t.join("deep/er");
            std::fs::create_dir_all(&dir).unwrap();
            let abs_target = t.join("x");
            let tar_args: Vec<String> = args
                .iter()
                .map(|a| if *a == "/x" { abs_target.display().to_string() } else { a.to_string() })
                .collect();
            let stream = std::process::Command::new("tar").args(&tar_args).current_dir(&dir).output().unwrap();
            assert!(!stream.stdout.is_empty(), "{name}: {}", String::from_utf8_lossy(&stream.stderr));
            let mut put = s
                .husk(&["cp", "-", &format!("{id}:/tmp")])
                .stdin(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            std::io::Write::write_all(&mut put.stdin.take().unwrap(), &stream.stdout).unwrap();
            let out = put.wait_with_output().unwrap();
            refused(&out, &["refused"]);
        }
        // `l -> /etc`, then `l/passwd`: the second entry would write through
        // the first; ELOOP instead.
        let d = t.join("link-then-file");
        std::fs::create_dir_all(d.join("real")).unwrap();
        std::fs::write(d.join("real/passwd"), "x").unwrap();
        symlink("/etc", d.join("l")).unwrap();
        let first = std::process::Command::new("tar").args(["-c", "-f", "-", "l"]).current_dir(&d).output().unwrap();
        let second = std::process::Command::new("tar")
            .args(["-c", "-f", "-", "--transform", "s,^real,l,", "real/passwd"])
            .current_dir(&d)
            .output()
            .unwrap();
        // GNU tar pads to 10240 bytes: cut the first stream at its end marker.
        let mut stream = first.stdout.clone();
        while stream.ends_with(&[0u8; 512]) {
            stream.truncate(stream.len() - 512);
        }
        stream.extend_from_slice(&second.stdout);
        let mut put =
            s.husk(&["cp", "-", &format!("{id}:/tmp")]).stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        std::io::Write::write_all(&mut put.stdin.take().unwrap(), &stream).unwrap();
        let out = put.wait_with_output().unwrap();
        refused(&out, &["ELOOP"]);
        assert_eq!(s.sh(&id, "readlink /tmp/l").0, "/etc\n");
    }

    #[test]
    fn cp_bounds_size() {
        let s = Sbx::new();
        let id = s.create(&[]);
        let host = TempDir::new("cp-bounds");
        std::fs::write(host.join("two-mb"), pattern(2 << 20, 3)).unwrap();
        let out = cp(&s, &["--max-bytes", "1M", host.join("two-mb").to_str().unwrap(), &format!("{id}:/tmp/")]);
        refused(&out, &["--max-bytes 1048576", "two-mb"]);
        assert_eq!(s.sh(&id, "ls /tmp").0, "", "a refused copy left something");
        // Out: the same bound, checked inside before the data is sent and
        // on the host before it is written.
        ok(&cp(&s, &[host.join("two-mb").to_str().unwrap(), &format!("{id}:/tmp/")]));
        let out = cp(&s, &["--max-bytes", "1M", &format!("{id}:/tmp/two-mb"), host.join("back").to_str().unwrap()]);
        refused(&out, &["--max-bytes"]);
        assert!(!host.join("back").exists());
        // Entries.
        assert_eq!(s.sh(&id, "mkdir /tmp/many && cd /tmp/many && touch a b c d e f g h").1, 0);
        let out = cp(&s, &["--max-entries", "5", &format!("{id}:/tmp/many"), host.join("many").to_str().unwrap()]);
        refused(&out, &["--max-entries 5"]);
        assert!(!host.join("many").exists(), "a refused copy to a new name left a partial tree");
        let out = cp(&s, &["--max-entries", "9", &format!("{id}:/tmp/many"), host.join("many").to_str().unwrap()]);
        ok(&out);
        assert_eq!(std::fs::read_dir(host.join("many")).unwrap().count(), 8);
        let out = cp(&s, &["--max-bytes", "0", host.join("many").to_str().unwrap(), &format!("{id}:/tmp/m2")]);
        ok(&out);
    }

    #[test]
    fn cp_to_read_only_place_is_refused_clearly() {
        let s = Sbx::new();
        let id = s.create(&["--tmpfs", "/scratch"]);
        let host = TempDir::new("cp-ro");
        std::fs::write(host.join("f"), "x").unwrap();
        let out = cp(&s, &[host.join("f").to_str().unwrap(), &format!("{id}:/etc/f")]);
        refused(&out, &["EROFS", "read-only", "/workspace", "/tmp", "/scratch", "--writable"]);
        ok(&cp(&s, &[host.join("f").to_str().unwrap(), &format!("{id}:/scratch/f")]));
        let out = cp(&s, &[host.join("f").to_str().unwrap(), &format!("{id}:/no/such/dir/f")]);
        refused(&out, &["/no/such/dir", "not found"]);
    }

    #[test]
    fn cp_unknown_sandbox_or_bad_operands_are_clear_errors() {
        let s = Sbx::new();
        let host = TempDir::new("cp-unknown");
        std::fs::write(host.join("f"), "x").unwrap();
        let out = cp(&s, &[host.join("f").to_str().unwrap(), "nosuch:/tmp/"]);
        refused(&out, &["no sandbox \"nosuch\"", "husk ls"]);
        let out = cp(&s, &[host.join("f").to_str().unwrap(), host.join("g").to_str().unwrap()]);
        refused(&out, &["SANDBOX:PATH"]);
        let id = s.create(&[]);
        let out = cp(&s, &[host.join("missing").to_str().unwrap(), &format!("{id}:/tmp/")]);
        refused(&out, &["missing", "not found"]);
        let out = cp(&s, &[&format!("{id}:/tmp/missing"), host.join("x").to_str().unwrap()]);
        refused(&out, &["/tmp/missing", "not found"]);
    }

    #[test]
    fn cp_into_a_busy_sandbox_is_refused_or_waits() {
        let s = Sbx::new();
        let id = s.create(&[]);
        let host = TempDir::new("cp-busy");
        std::fs::write(host.join("f"), "x").unwrap();
        let mut long =
            s.husk(&["exec", &id, "--", "sh", "-c", "cat >/dev/null"]).stdin(Stdio::piped()).spawn().unwrap();
        assert!(wait_until(std::time::Duration::from_secs(20), || s.inspect(&id)["active_execs"] == 1));
        let out = cp(&s, &[host.join("f").to_str().unwrap(), &format!("{id}:/tmp/")]);
        refused(&out, &["busy", "--wait"]);
        let waiting =
            s.husk(&["cp", "--wait", host.join("f").to_str().unwrap(), &format!("{id}:/tmp/")]).spawn().unwrap();
        drop(long.stdin.take());
        assert!(long.wait().unwrap().success());
        assert!(waiting.wait_with_output().unwrap().status.success());
        assert_eq!(s.sh(&id, "cat /tmp/f").0, "x");
    }

    /// Code and data by stdin, never argv: 50 MB through `husk exec -i`,
    /// hashed inside, equals the host's hash.
    #[test]
    fn exec_stdin_50mb_sha256_matches() {
        let s = Sbx::new();
        let id = s.create(&[]);
        let data = pattern(50 << 20, 11);
        // A script far past argv's limit (E2BIG at ~128 KB per argument).
        let mut script = String::from("x=1\n");
        for _ in 0..60_000 {
            script.push_str("# a line of padding\n");
        }
        script.push_str("echo done $x\n");
        let mut c = s
            .husk(&["exec", &id, "-i", "--", "sh", "-s"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = c.stdin.take().unwrap();
        let w = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, script.as_bytes()));
        let out = c.wait_with_output().unwrap();
        w.join().unwrap().unwrap();
        assert_eq!((String::from_utf8_lossy(&out.stdout).as_ref(), out.status.code()), ("done 1\n", Some(0)));
        let mut c = s
            .husk(&["exec", &id, "-i", "--", "sha256sum"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = c.stdin.take().unwrap();
        let payload = data.clone();
        let w = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &payload));
        let out = c.wait_with_output().unwrap();
        w.join().unwrap().unwrap();
        assert!(out.status.success());
        let inside = String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().to_string();
        assert_eq!(inside, sha256_hex(&data));
    }
}
