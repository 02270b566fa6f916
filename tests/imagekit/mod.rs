//! Builds OCI image layouts, oci-archives and `docker save` tarballs in
//! code for the image tests (no external tools), including hostile ones:
//! raw tar headers let a test write any name, type or size.
#![allow(dead_code)]

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "../common/tempdir.rs"]
mod tempdir;
#[allow(unused_imports)] // not every test crate uses it
pub use tempdir::TempDir;

pub const GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
pub const PLAIN: &str = "application/vnd.oci.image.layer.v1.tar";
pub const DOCKER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// Raw tar writing: any name, type, size (GNU long names past 100 bytes).
#[derive(Default)]
pub struct Tar {
    pub buf: Vec<u8>,
}

#[derive(Clone)]
pub struct Entry<'a> {
    pub name: &'a [u8],
    pub kind: u8,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub size: u64,
    pub link: &'a [u8],
    pub data: &'a [u8],
    pub devmajor: u32,
    pub devminor: u32,
}

impl<'a> Entry<'a> {
    pub fn new(name: &'a [u8], kind: u8) -> Self {
        Entry { name, kind, mode: 0o644, uid: 0, gid: 0, size: 0, link: b"", data: b"", devmajor: 0, devminor: 0 }
    }
}

/// Octal, or GNU base-256 when the number does not fit.
fn octal(field: &mut [u8], v: u64) {
    let s = format!("{:0width$o}\0", v, width = field.len() - 1);
    if s.len() == field.len() {
        field.copy_from_slice(s.as_bytes());
        return;
    }
    field.fill(0);
    field[0] = 0x80;
    let n = field.len();
    field[n - 8..].copy_from_slice(&v.to_be_bytes());
}

impl Tar {
    pub fn new() -> Tar {
        Tar::default()
    }

    fn header(&mut self, e: &Entry<'_>, size: u64) {
        let (name, link) = (e.name, e.link);
        if name.len() > 100 {
            let mut ln = name.to_vec();
            ln.push(0);
            self.header(&Entry::new(b"././@LongLink", b'L'), ln.len() as u64);
            self.data(&ln);
        }
        if link.len() > 100 {
            let mut ll = link.to_vec();
            ll.push(0);
            self.header(&Entry::new(b"././@LongLink", b'K'), ll.len() as u64);
            self.data(&ll);
        }
        let mut h = [0u8; 512];
        let n = name.len().min(100);
        h[..n].copy_from_slice(&name[..n]);
        octal(&mut h[100..108], e.mode as u64);
        octal(&mut h[108..116], e.uid);
        octal(&mut h[116..124], e.gid);
        octal(&mut h[124..136], size);
        octal(&mut h[136..148], 1_700_000_000);
        h[148..156].copy_from_slice(b"        ");
        h[156] = e.kind;
        let l = link.len().min(100);
        h[157..157 + l].copy_from_slice(&link[..l]);
        h[257..263].copy_from_slice(b"ustar ");
        h[263..265].copy_from_slice(b" \0");
        octal(&mut h[329..337], e.devmajor as u64);
        octal(&mut h[337..345], e.devminor as u64);
        let sum: u64 = h.iter().map(|&b| b as u64).sum();
        let s = format!("{sum:06o}\0 ");
        h[148..156].copy_from_slice(s.as_bytes());
        self.buf.extend_from_slice(&h);
    }

    fn data(&mut self, d: &[u8]) {
        self.buf.extend_from_slice(d);
        let pad = (512 - d.len() % 512) % 512;
        self.buf.extend(std::iter::repeat_n(0u8, pad));
    }

    pub fn entry(&mut self, e: Entry<'_>) -> &mut Self {
        let size = if e.kind == b'0' && e.size == 0 { e.data.len() as u64 } else { e.size };
        self.header(&e, size);
        if !e.data.is_empty() {
            self.data(e.data);
        }
        self
    }

    pub fn dir(&mut self, name: &str, mode: u32) -> &mut Self {
        self.entry(Entry { mode, ..Entry::new(name.as_bytes(), b'5') })
    }
    pub fn file(&mut self, name: &str, data: &[u8]) -> &mut Self {
        self.entry(Entry { data, ..Entry::new(name.as_bytes(), b'0') })
    }
    pub fn file_mode(&mut self, name: &str, mode: u32, uid: u64, data: &[u8]) -> &mut Self {
        self.entry(Entry { data, mode, uid, gid: uid, ..Entry::new(name.as_bytes(), b'0') })
    }
    pub fn symlink(&mut self, name: &str, target: &str) -> &mut Self {
        self.entry(Entry { link: target.as_bytes(), mode: 0o777, ..Entry::new(name.as_bytes(), b'2') })
    }
    pub fn hardlink(&mut self, name: &str, target: &str) -> &mut Self {
        self.entry(Entry { link: target.as_bytes(), ..Entry::new(name.as_bytes(), b'1') })
    }
    /// A PAX header (records as key=value) for the next entry.
    pub fn pax(&mut self, records: &[(&str, &[u8])]) -> &mut Self {
        let mut body = Vec::new();
        for (k, v) in records {
            let rec_len = |n: usize| format!("{n} {k}=").len() + v.len() + 1;
            let mut n = rec_len(0);
            while rec_len(n) != n {
                n = rec_len(n);
            }
            body.extend_from_slice(format!("{n} {k}=").as_bytes());
            body.extend_from_slice(v);
            body.push(b'\n');
        }
        self.header(&Entry::new(b"pax", b'x'), body.len() as u64);
        self.data(&body);
        self
    }
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        out.extend(std::iter::repeat_n(0u8, 1024));
        out
    }
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

pub fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::stream::encode_all(data, 1).unwrap()
}

/// One layer: the blob as stored and its uncompressed tar.
pub struct Layer {
    pub blob: Vec<u8>,
    pub tar: Vec<u8>,
    pub media_type: &'static str,
}

impl Layer {
    pub fn gzip(tar: Vec<u8>) -> Layer {
        Layer { blob: gzip(&tar), tar, media_type: GZIP }
    }
    pub fn zstd(tar: Vec<u8>) -> Layer {
        Layer { blob: zstd(&tar), tar, media_type: ZSTD }
    }
    pub fn plain(tar: Vec<u8>) -> Layer {
        Layer { blob: tar.clone(), tar, media_type: PLAIN }
    }
}

/// An OCI layout being written.
pub struct Layout {
    pub dir: PathBuf,
    pub manifests: Vec<Value>,
}

impl Layout {
    pub fn new(dir: &Path) -> Layout {
        std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
        std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        Layout { dir: dir.to_path_buf(), manifests: Vec::new() }
    }

    pub fn blob_path(&self, digest: &str) -> PathBuf {
        self.dir.join("blobs/sha256").join(digest.trim_start_matches("sha256:"))
    }

    /// Stores a blob; returns its descriptor (digest, size).
    pub fn put(&self, data: &[u8], media_type: &str) -> Value {
        let d = sha256(data);
        std::fs::write(self.blob_path(&d), data).unwrap();
        json!({ "mediaType": media_type, "digest": d, "size": data.len() })
    }

    /// Config JSON for `layers` with container config `cfg`.
    pub fn config(layers: &[Layer], cfg: Value, arch: &str) -> Value {
        let diff_ids: Vec<String> = layers.iter().map(|l| sha256(&l.tar)).collect();
        json!({
            "architecture": arch,
            "os": "linux",
            "config": cfg,
            "rootfs": { "type": "layers", "diff_ids": diff_ids },
        })
    }

    /// Stores layers, config and manifest; returns the manifest descriptor
    /// (not yet in the index).
    pub fn manifest(&self, layers: &[Layer], config: &Value) -> Value {
        let cfg = self.put(&serde_json::to_vec(config).unwrap(), "application/vnd.oci.image.config.v1+json");
        let ls: Vec<Value> = layers.iter().map(|l| self.put(&l.blob, l.media_type)).collect();
        let m = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": cfg,
            "layers": ls,
        });
        self.put(&serde_json::to_vec(&m).unwrap(), "application/vnd.oci.image.manifest.v1+json")
    }

    /// Adds an amd64 image with `layers` and container config `cfg` to the
    /// index under `tag`.
    pub fn image(&mut self, layers: &[Layer], cfg: Value, tag: Option<&str>) -> Value {
        let config = Self::config(layers, cfg, "amd64");
        let mut desc = self.manifest(layers, &config);
        if let Some(t) = tag {
            desc["annotations"] = json!({ "org.opencontainers.image.ref.name": t });
        }
        self.manifests.push(desc.clone());
        self.write_index();
        desc
    }

    pub fn write_index(&self) {
        let idx = json!({ "schemaVersion": 2, "manifests": self.manifests });
        std::fs::write(self.dir.join("index.json"), serde_json::to_vec(&idx).unwrap()).unwrap();
    }

    /// Reads, changes and rewrites a JSON blob, fixing the descriptor that
    /// points at it is the caller's business (to build mismatches).
    pub fn read_json(&self, digest: &str) -> Value {
        serde_json::from_slice(&std::fs::read(self.blob_path(digest)).unwrap()).unwrap()
    }
}

/// A tar of every file under `dir` (an oci-archive of a layout).
pub fn tar_dir(dir: &Path) -> Vec<u8> {
    let mut t = Tar::new();
    fn walk(t: &mut Tar, base: &Path, rel: &str) {
        let mut names: Vec<_> = std::fs::read_dir(base.join(rel)).unwrap().flatten().collect();
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let name = if rel.is_empty() {
                e.file_name().to_string_lossy().to_string()
            } else {
                format!("{rel}/{}", e.file_name().to_string_lossy())
            };
            if e.file_type().unwrap().is_dir() {
                t.dir(&format!("{name}/"), 0o755);
                walk(t, base, &name);
            } else {
                t.file(&name, &std::fs::read(e.path()).unwrap());
            }
        }
    }
    walk(&mut t, dir, "");
    t.finish()
}

/// A busybox root filesystem (the host's static busybox and its applet
/// links) as a layer tar, with a passwd/group naming `user` (1000).
pub fn busybox_tar() -> Vec<u8> {
    let bb = std::fs::read("/bin/busybox").expect("/bin/busybox (apt-get install busybox-static)");
    let list = Command::new("/bin/busybox").arg("--list").output().expect("busybox --list");
    let mut t = Tar::new();
    t.dir("./", 0o755).dir("bin/", 0o755).dir("etc/", 0o755).dir("tmp/", 0o1777).dir("root/", 0o700);
    t.entry(Entry { mode: 0o755, uid: 1000, gid: 1000, ..Entry::new(b"home/user/", b'5') });
    t.file_mode("bin/busybox", 0o755, 0, &bb);
    for applet in String::from_utf8_lossy(&list.stdout).split_whitespace() {
        if applet != "busybox" {
            t.symlink(&format!("bin/{applet}"), "busybox");
        }
    }
    t.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n");
    t.file("etc/group", b"root:x:0:\nstaff:x:50:user\nuser:x:1000:\n");
    t.finish()
}

/// The husk binary (HUSK_BIN, as scripts/test.sh sets for the rootless
/// pass, else cargo's).
pub fn husk_bin() -> PathBuf {
    std::env::var_os("HUSK_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_husk")))
}

/// Runs the husk binary with HUSK_ROOT=`store`.
pub fn husk_in(store: &Path, args: &[&str]) -> Output {
    Command::new(husk_bin())
        .args(args)
        .env("HUSK_ROOT", store)
        .env_remove("HUSK_ID_RANGE")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("spawn husk")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `husk image import --json`, asserting success; the parsed report.
pub fn import_ok(store: &Path, src: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["image", "import", "--json", src.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = husk_in(store, &args);
    assert!(o.status.success(), "import of {} failed: {}", src.display(), stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("import --json output: {e}: {}", stdout(&o)))
}

/// A store under `t` with the busybox base imported as `bb` (plus
/// /data/{a,b}): the base the commit, fork and export tests build on.
pub fn busybox_data_store(t: &TempDir) -> PathBuf {
    let store = t.join("store");
    let extra = Tar::new().file("data/a", b"a").file("data/b", b"b").finish();
    let mut l = Layout::new(&t.join("bb"));
    l.image(&[Layer::gzip(busybox_tar()), Layer::plain(extra)], json!({"Env": ["PATH=/bin"], "Cmd": ["sh"]}), None);
    import_ok(&store, &l.dir, &["--name", "bb"]);
    store
}

/// Every path below `dir` (to prove nothing was created somewhere).
pub fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(out: &mut Vec<String>, base: &Path, p: &Path) {
        if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.flatten() {
                out.push(e.path().strip_prefix(base).unwrap().display().to_string());
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    walk(out, base, &e.path());
                }
            }
        }
    }
    walk(&mut out, dir, dir);
    out.sort();
    out
}

/// The store holds no unpacked layer and no partial build.
pub fn assert_store_clean(store: &Path) {
    let layers: Vec<String> = tree(&store.join("layers"));
    assert!(layers.is_empty(), "layers left in the store: {layers:?}");
    let tmp = tree(&store.join("tmp"));
    assert!(tmp.is_empty(), "partial builds left in the store: {tmp:?}");
    let images = tree(&store.join("images"));
    assert!(images.is_empty(), "image records left: {images:?}");
}

/// husk with a private store and state dir; live sandboxes made through
/// it are removed on drop.
pub struct Live {
    pub store: PathBuf,
    pub state: PathBuf,
    ids: std::cell::RefCell<Vec<String>>,
}

impl Live {
    /// Sandboxes made outside `create` (forks) to remove on drop too.
    pub fn adopt(&self, id: &str) {
        self.ids.borrow_mut().push(id.to_string());
    }

    pub fn new(t: &TempDir, store: PathBuf) -> Live {
        Live { store, state: t.join("state"), ids: Default::default() }
    }

    pub fn husk(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(husk_bin())
            .args(args)
            .env("HUSK_ROOT", &self.store)
            .env("HUSK_STATE_DIR", &self.state)
            .env_remove("HUSK_ID_RANGE")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.husk(args);
        assert!(o.status.success(), "husk {args:?}: {}{}", stdout(&o), stderr(&o));
        stdout(&o)
    }

    pub fn create(&self, args: &[&str]) -> String {
        let mut all = vec!["create"];
        all.extend_from_slice(args);
        let id = self.ok(&all).trim().to_string();
        self.ids.borrow_mut().push(id.clone());
        id
    }

    pub fn sh(&self, id: &str, script: &str) -> String {
        self.ok(&["exec", id, "--", "sh", "-c", script])
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        for id in self.ids.borrow().iter() {
            let _ = self.husk(&["rm", id]);
        }
    }
}

/// One member of a tar as `read_tar` sees it: enough to compare two trees
/// (no mtimes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub path: String,
    /// The typeflag: b'0' file, b'5' dir, b'2' symlink, b'1' hard link...
    pub kind: u8,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub size: u64,
    /// sha256 of a file's data.
    pub data: String,
    pub link: String,
}

/// Reads every member of an uncompressed tar (ustar, PAX `path` and
/// `linkpath` records, GNU long names), paths without `./` and a trailing
/// `/`.
pub fn read_tar(tar: &[u8]) -> Vec<Member> {
    let num = |f: &[u8]| -> u64 {
        let s: String = f.iter().take_while(|&&b| b != 0).map(|&b| b as char).collect();
        u64::from_str_radix(s.trim(), 8).unwrap_or(0)
    };
    let text = |f: &[u8]| String::from_utf8_lossy(&f[..f.iter().position(|&b| b == 0).unwrap_or(f.len())]).into_owned();
    let mut out = Vec::new();
    let (mut long_path, mut long_link): (Option<String>, Option<String>) = (None, None);
    let mut off = 0;
    while off + 512 <= tar.len() {
        let h = &tar[off..off + 512];
        if h.iter().all(|&b| b == 0) {
            break;
        }
        let size = num(&h[124..136]);
        let data = &tar[off + 512..off + 512 + size as usize];
        off += 512 + (size as usize).div_ceil(512) * 512;
        match h[156] {
            b'x' => {
                let mut rest = data;
                while let Some(sp) = rest.iter().position(|&b| b == b' ') {
                    let len: usize = String::from_utf8_lossy(&rest[..sp]).parse().unwrap();
                    let rec = String::from_utf8_lossy(&rest[sp + 1..len - 1]).into_owned();
                    if let Some((k, v)) = rec.split_once('=') {
                        match k {
                            "path" => long_path = Some(v.to_string()),
                            "linkpath" => long_link = Some(v.to_string()),
                            _ => {}
                        }
                    }
                    rest = &rest[len..];
                }
            }
            b'g' => {}
            b'L' => long_path = Some(text(data)),
            b'K' => long_link = Some(text(data)),
            kind => {
                let mut path = long_path.take().unwrap_or_else(|| {
                    let (name, prefix) = (text(&h[0..100]), text(&h[345..500]));
                    if prefix.is_empty() { name } else { format!("{prefix}/{name}") }
                });
                path = path.trim_start_matches("./").trim_end_matches('/').to_string();
                let link = long_link.take().unwrap_or_else(|| text(&h[157..257]));
                let kind = if kind == 0 { b'0' } else { kind };
                out.push(Member {
                    path,
                    kind,
                    mode: num(&h[100..108]) as u32 & 0o7777,
                    uid: num(&h[108..116]),
                    gid: num(&h[116..124]),
                    size: if kind == b'0' { size } else { 0 },
                    data: if kind == b'0' { sha256(data) } else { String::new() },
                    link,
                });
            }
        }
    }
    out
}

/// A raw client of a sandbox's supervisor asking for a freeze, as a reader
/// (`husk commit`, `husk fork`) does: the sandbox stays frozen until
/// `thaw` or until this connection closes.
pub struct Freezer(std::os::fd::OwnedFd);

impl Freezer {
    /// Connects and asks for a 10-minute freeze without reading the answer
    /// (a reader killed while the freeze settles).
    pub fn ask(live: &Live, id: &str) -> Freezer {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr, connect, socket};
        use std::os::fd::AsRawFd;
        let f = Freezer(socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC, None).unwrap());
        let addr = UnixAddr::new(&live.state.join("sandboxes").join(id).join("sock")).unwrap();
        connect(f.0.as_raw_fd(), &addr).unwrap();
        f.send(br#"{"op":"freeze","for_ms":600000}"#);
        f
    }

    /// Holds the freeze: the supervisor said yes.
    pub fn hold(live: &Live, id: &str) -> Freezer {
        let f = Freezer::ask(live, id);
        let answer = f.answer();
        assert_eq!(answer["ok"], true, "the freeze was refused: {answer}");
        f
    }

    /// Lets it go: the supervisor says the freeze was held until now.
    pub fn thaw(self) {
        self.send(br#"{"op":"thaw"}"#);
        let answer = self.answer();
        assert_eq!(answer["ok"], true, "the freeze was not held all along: {answer}");
    }

    fn send(&self, request: &[u8]) {
        use std::os::fd::AsRawFd;
        nix::sys::socket::send(self.0.as_raw_fd(), request, nix::sys::socket::MsgFlags::empty()).unwrap();
    }

    fn answer(&self) -> serde_json::Value {
        use std::os::fd::AsRawFd;
        let mut buf = vec![0u8; 65536];
        let n = nix::sys::socket::recv(self.0.as_raw_fd(), &mut buf, nix::sys::socket::MsgFlags::empty()).unwrap();
        serde_json::from_slice(&buf[..n]).unwrap()
    }
}
