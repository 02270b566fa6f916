//! Image inputs are hostile: the layer unpacker and the OCI / docker-save
//! JSON parsers.
//!
//! `unpack`: a tar layer generated from choices (files, dirs, symlinks,
//! hardlinks, devices, whiteouts, opaque markers, PAX and GNU long names,
//! names and link targets full of `..`, `/`, `.wh.` and the absolute path of
//! a directory *next to* the build directory) is unpacked by
//! `unpack_layer` into an empty build directory. Invariants: no panic; the
//! neighbour directory and its files are untouched, nothing else appears
//! beside the build directory, and no file named like the probe's
//! `husk-fuzz-pwn` appears at the host's /, /tmp or /dev/shm.
//!
//! `json`: bytes as an index, a manifest, an image config and a docker-save
//! manifest.json. Invariants: no panic; platform choice and tag filtering
//! never panic; the run defaults from a config are sane (absolute,
//! normalized WorkingDir that is not `/`, env names non-empty without `=`,
//! no NUL anywhere).

use super::Bytes;
use husk::image::Limits;
use husk::image::digest::Digest;
use husk::image::layer::Owners;
use husk::image::oci::{self, DockerSaveEntry, ImageConfig, Index, Manifest};
use husk::image::unpack::{LayerJob, unpack_layer};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const PWN: &str = "husk-fuzz-pwn";
/// Link targets: anything goes.
const PIECES: &[&str] = &["a", "b", "..", ".", "", ".wh.a", ".wh.b", ".wh..wh..opq", "outside", PWN, "etc", "x.wh."];
/// Entry names: mostly what a layer can legally hold (the unpacker refuses
/// `..` and absolute names outright, ending the layer), so that layers get
/// deep enough for symlink, hardlink and whiteout interplay.
const NAME_PIECES: &[&str] = &["a", "b", "c", "a", "b", "a", ".wh.a", ".wh.b", ".wh..wh..opq", PWN, "etc", "x.wh."];

/// One tar header block (ustar), with the checksum filled in.
fn header(name: &[u8], kind: u8, size: usize, mode: u32, link: &[u8]) -> [u8; 512] {
    let mut h = [0u8; 512];
    let put = |h: &mut [u8; 512], at: usize, len: usize, v: &[u8]| {
        let n = v.len().min(len);
        h[at..at + n].copy_from_slice(&v[..n]);
    };
    put(&mut h, 0, 100, name);
    put(&mut h, 100, 8, format!("{mode:07o}\0").as_bytes());
    put(&mut h, 108, 8, b"0000000\0");
    put(&mut h, 116, 8, b"0000000\0");
    put(&mut h, 124, 12, format!("{size:011o}\0").as_bytes());
    put(&mut h, 136, 12, b"00000000000\0");
    h[156] = kind;
    put(&mut h, 157, 100, link);
    put(&mut h, 257, 8, b"ustar\x0000");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    put(&mut h, 148, 8, format!("{sum:06o}\0 ").as_bytes());
    h
}

fn member(out: &mut Vec<u8>, name: &[u8], kind: u8, data: &[u8], mode: u32, link: &[u8]) {
    out.extend_from_slice(&header(name, kind, data.len(), mode, link));
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

fn pax(records: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in records {
        // "LEN key=value\n" where LEN counts itself.
        let body = k.len() + v.len() + 3;
        let mut len = body + 1;
        while len != body + len.to_string().len() {
            len = body + len.to_string().len();
        }
        out.extend_from_slice(format!("{len} {k}=").as_bytes());
        out.extend_from_slice(v);
        out.push(b'\n');
    }
    out
}

fn path(b: &mut Bytes<'_>, outside: &str, hostile: bool) -> Vec<u8> {
    let pieces = if hostile { PIECES } else { NAME_PIECES };
    let mut s = match b.below(if hostile { 6 } else { 40 }) {
        0 => format!("{outside}/"),
        1 => "/".to_string(),
        2 | 3 => "./".to_string(),
        4 if hostile => "../".to_string(),
        _ => String::new(),
    };
    let parts: Vec<&str> = (0..1 + b.below(4)).map(|_| b.pick(pieces)).collect();
    s.push_str(&parts.join("/"));
    if b.below(6) == 0 {
        s.push('/');
    }
    if b.below(40) == 0 {
        s.push_str(&"d/".repeat(60));
    }
    s.into_bytes()
}

/// A layer tar from choices; `outside` is the absolute path of the
/// neighbour directory, offered as a name and link target.
pub fn generate_layer(b: &mut Bytes<'_>, outside: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..1 + b.below(12) {
        let name = path(b, outside, false);
        let link = path(b, outside, true);
        let kind = if b.below(40) == 0 { b.pick(b"SZgV") } else { b.pick(b"0055222113467\0") };
        let mode = b.pick(&[0o644, 0o755, 0o4755, 0o777, 0, 0o7777, 0o1777]);
        let data: Vec<u8> =
            if kind == b'0' || kind == b'\0' { (0..b.below(40)).map(|_| b.u8()).collect() } else { Vec::new() };
        match b.below(6) {
            0 => {
                // PAX extended header naming the next member.
                let mut recs: Vec<(&str, &[u8])> = vec![("path", &name)];
                if b.bool() {
                    recs.push(("linkpath", &link));
                }
                let xattr_val: &[u8] = b"\x01\x00\x00\x02";
                match b.below(3) {
                    0 => recs.push(("SCHILY.xattr.security.capability", xattr_val)),
                    1 => recs.push(("SCHILY.xattr.user.overlay.opaque", b"y")),
                    _ => {}
                }
                member(&mut out, b"pax", b'x', &pax(&recs), 0o644, b"");
                member(&mut out, b"placeholder", kind, &data, mode, b"");
            }
            1 => {
                // GNU long name / long link.
                let mut n = name.clone();
                n.push(0);
                member(&mut out, b"././@LongLink", b'L', &n, 0o644, b"");
                if b.bool() {
                    let mut l = link.clone();
                    l.push(0);
                    member(&mut out, b"././@LongLink", b'K', &l, 0o644, b"");
                }
                member(&mut out, b"short", kind, &data, mode, &link);
            }
            _ => member(&mut out, &name, kind, &data, mode, &link),
        }
        if b.is_empty() {
            break;
        }
    }
    if b.below(8) != 0 {
        out.extend_from_slice(&[0u8; 1024]);
    }
    out
}

/// Every path below `dir` with its type, mode and (for files) content.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(md) = std::fs::symlink_metadata(&p) else { continue };
            let content = if md.is_file() { std::fs::read(&p).unwrap_or_default() } else { Vec::new() };
            if md.is_dir() {
                stack.push(p.clone());
            }
            out.insert(p, (md.mode(), content));
        }
    }
    out
}

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        // A layer may leave directories without search permission: root
        // removes them anyway, anyone else needs them opened up first.
        if !nix::unistd::geteuid().is_root() {
            open_up(&self.0);
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open_up(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()) {
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700));
        for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
            open_up(&e.path());
        }
    }
}

pub fn unpack(data: &[u8]) {
    use nix::fcntl::{OFlag, open};
    use nix::sys::stat::Mode;
    static N: AtomicU64 = AtomicU64::new(0);
    let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let scratch =
        Scratch(base.join(format!("husk-fuzz-unpack-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))));
    let (build, outside) = (scratch.0.join("build"), scratch.0.join("outside"));
    std::fs::create_dir_all(outside.join("dir")).expect("scratch");
    std::fs::create_dir(&build).expect("build dir");
    std::fs::write(outside.join("sentinel"), b"untouched").expect("sentinel");
    let before = snapshot(&outside);

    let mut b = Bytes::new(data);
    let tar = generate_layer(&mut b, &outside.display().to_string());
    let digest = Digest::of(&tar);
    let dest = open(&build, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty()).expect("open build");
    let cancel = AtomicBool::new(false);
    let limits = Limits { max_entries: 10_000, ..Limits::default() };
    let job = LayerJob {
        size: tar.len() as u64,
        blob: Box::new(std::io::Cursor::new(tar)),
        label: digest.clone(),
        digest: Some(digest.clone()),
        media_type: "application/vnd.oci.image.layer.v1.tar".into(),
        diff_id: digest,
        limits,
        owners: Owners::Invoker,
        dest,
        cancel: &cancel,
        progress: None,
        umask: None,
    };
    let _ = unpack_layer(job);

    assert_eq!(snapshot(&outside), before, "the layer changed the directory next to the build directory");
    let beside: Vec<String> = std::fs::read_dir(&scratch.0)
        .expect("scratch")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut beside_sorted = beside.clone();
    beside_sorted.sort();
    assert_eq!(beside_sorted, ["build", "outside"], "the layer created {beside:?} beside the build directory");
    for host in ["/", "/tmp", "/dev/shm"] {
        assert!(!Path::new(host).join(PWN).exists(), "the layer created {host}/{PWN} on the host");
    }
}

pub fn json(data: &[u8]) {
    let host = oci::host_platform();
    if let Ok(index) = oci::parse::<Index>("index", data) {
        for tag in [None, Some("latest"), Some("")] {
            if let Ok(c) = oci::by_tag(&index, tag) {
                let _ = oci::choose(&c, &host);
            }
        }
        for d in &index.manifests {
            if let Some(p) = &d.platform {
                let _ = oci::platform_rank(p, &host);
                let _ = p.to_string();
            }
        }
    }
    let _ = oci::parse::<Manifest>("manifest", data);
    let _ = oci::parse::<Vec<DockerSaveEntry>>("manifest.json", data);
    if let Ok(config) = oci::parse::<ImageConfig>("config", data)
        && let Ok(d) = husk::image::config::defaults(&config)
    {
        if let Some(w) = &d.workdir {
            assert!(w.starts_with('/') && w != "/", "workdir {w:?}");
            assert!(w[1..].split('/').all(|c| !c.is_empty() && c != "." && c != ".."), "workdir {w:?} not normalized");
        }
        for (k, v) in &d.env {
            assert!(!k.is_empty() && !k.contains('=') && !k.contains('\0') && !v.contains('\0'), "env {k:?}={v:?}");
        }
        for s in d.entrypoint.iter().chain(&d.cmd).chain(d.user.iter()) {
            assert!(!s.contains('\0'), "{s:?} has a NUL");
        }
    }
}
