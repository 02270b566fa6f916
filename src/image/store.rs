//! The image store under husk's root:
//!
//! ```text
//! images/<h>.json   one record per name: manifest, config, layer diff_ids
//! blobs/<hex>       manifests and configs (small, verified on read)
//! layers/<key>/     one unpacked layer: key = diff_id hex + id-shift suffix
//! layers/<key>.json what unpacking it did (sizes, skipped entries)
//! tmp/              layers being built; published by rename when complete
//! locks/            flock files: store, image-<h>, layer-<key>
//! ```
//!
//! Locking (flock, released when the holder dies): importers and runs hold
//! `store` shared, `rm`/`prune` exclusive; a layer is built under its
//! exclusive `layer-<key>` lock, and a run holds every layer it mounts and
//! its image shared for as long as the sandbox lives, so `rm` refuses an
//! image in use and `prune` skips layers in use.

use super::digest::Digest;
use super::fsutil::{self, remove_tree};
use super::layer::{Owners, UnpackReport, Unpacked};
use super::manifest::{self, Findings, Hashing};
use super::{ImageError, normalize_name};
pub use crate::files::write_durable;
use nix::fcntl::{Flock, FlockArg, OFlag, RenameFlags, renameat2};
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

const SUBDIRS: &[&str] = &["images", "blobs", "layers", "tmp", "locks"];

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LayerRef {
    pub diff_id: Digest,
    pub blob: Option<Digest>,
    /// Compressed size of the blob it came from.
    pub size: u64,
    #[serde(default)]
    pub media_type: String,
}

/// One named image.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Record {
    pub name: String,
    /// Manifest digest (None for `docker save` imports, which have none).
    pub manifest: Option<Digest>,
    pub config: Digest,
    /// Before the layers, so a torn record still says where it came from.
    pub platform: String,
    /// A path, or `docker://REFERENCE` for a pulled image.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pulled: Option<Pulled>,
    /// Bottom layer first, as in the manifest.
    pub layers: Vec<LayerRef>,
    /// Unix seconds.
    pub imported_at: u64,
}

/// Where a pulled image came from (the manifest digest is `Record::manifest`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Pulled {
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
}

/// How to get an image back from where it came from.
pub fn refetch_hint(source: &str, name: &str) -> String {
    if let Some(ctx) = source.strip_prefix(BUILT_PREFIX) {
        return format!("husk build -t {name} {ctx}");
    }
    if let Some(sbx) = source.strip_prefix(COMMITTED_PREFIX) {
        return format!("husk commit {sbx} {name} (while that sandbox lives)");
    }
    match source.strip_prefix(PULLED_PREFIX) {
        Some(r) => format!("husk pull {r}"),
        None => format!("husk image import {source} --name {name}"),
    }
}

/// `Record::source` of a pulled image starts with this.
pub const PULLED_PREFIX: &str = "docker://";

/// `Record::source` of an image `husk commit` made (then the sandbox's id).
pub const COMMITTED_PREFIX: &str = "commit:";

/// `Record::source` of an image `husk build` made (then its context).
pub const BUILT_PREFIX: &str = "build:";

impl Record {
    /// The image's identity: manifest digest, else config digest.
    pub fn id(&self) -> &Digest {
        self.manifest.as_ref().unwrap_or(&self.config)
    }
}

/// What unpacking one layer produced (stored beside it).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LayerMeta {
    pub diff_id: Digest,
    pub report: UnpackReport,
}

/// Whether `ensure_layer` keeps a layer that is already published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publish {
    IfMissing,
    /// It is damaged: build it again and exchange it for the old one.
    Replace,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    Quick,
    Full,
}

/// A published layer compared with its manifest.
#[derive(Clone, Debug)]
pub enum LayerState {
    Intact,
    Missing,
    /// Unpacked by a husk without manifests: nothing to check against.
    NoManifest,
    /// The manifest file itself does not parse.
    ManifestDamaged(String),
    Damaged(Findings),
}

/// What `Store::list` found.
#[derive(Debug, Default)]
pub struct Listing {
    pub records: Vec<Record>,
    pub damaged: Vec<DamagedRecord>,
}

/// A record file that does not parse (or names another image than its
/// file name says).
#[derive(Clone, Debug, Serialize)]
pub struct DamagedRecord {
    pub file: PathBuf,
    pub why: String,
    /// The image's name and source when they survive in the damaged bytes;
    /// a name is only taken when it hashes to the file's own key.
    pub name: Option<String>,
    pub source: Option<String>,
}

impl DamagedRecord {
    fn new(file: PathBuf, key: &str, why: String, bytes: &[u8]) -> DamagedRecord {
        let name = scrape_string(bytes, "name").filter(|n| Store::record_key(n) == key);
        let source = name.as_ref().and_then(|_| scrape_string(bytes, "source"));
        DamagedRecord { file, why, name, source }
    }

    /// What the user can do about it.
    pub fn repair(&self) -> String {
        match (&self.name, &self.source) {
            (Some(n), Some(s)) => {
                format!("repair: `{}`, or drop it: `husk image rm {n}`", refetch_hint(s, n))
            }
            (Some(n), None) => {
                format!(
                    "repair: import the image again with `husk image import PATH --name {n}`, or drop it: `husk image rm {n}`"
                )
            }
            _ => format!(
                "its name is lost; import the image again under its name, or remove the file {}",
                self.file.display()
            ),
        }
    }
}

/// The string value of the first `"key": "..."` in possibly truncated JSON
/// (records are written with the name first and the source before the
/// layers, so a torn record usually keeps both).
fn scrape_string(bytes: &[u8], key: &str) -> Option<String> {
    let needle = format!("\"{key}\":");
    let at = bytes.windows(needle.len()).position(|w| w == needle.as_bytes())? + needle.len();
    let mut values = serde_json::Deserializer::from_slice(&bytes[at..]).into_iter::<String>();
    values.next()?.ok()
}

/// Locks a run holds while its sandbox lives, and what it needs to say
/// which layer is damaged when the command fails to start.
pub struct Lease {
    _image: Flock<File>,
    _layers: Vec<Flock<File>>,
    root: PathBuf,
    image: String,
    diff_ids: Vec<Digest>,
    owners: Owners,
}

impl Lease {
    /// Called only when the command failed to start (never on a healthy
    /// run): checks the image's layers against their manifests and names
    /// the first damaged one with its repair. `Check::Full` (every file
    /// hashed) is for ENOEXEC, the sign of a file whose content changed;
    /// a missing command or other setup failure gets the quick check.
    pub fn diagnose(&self, check: Check) -> Option<String> {
        let store = Store { root: self.root.clone() };
        for d in &self.diff_ids {
            let why = match store.check_layer(d, &self.owners, check) {
                Ok(LayerState::Damaged(f)) => f.summary(),
                Ok(LayerState::ManifestDamaged(why)) => why,
                Ok(LayerState::Missing) => "its directory is missing".into(),
                Ok(LayerState::Intact | LayerState::NoManifest) | Err(_) => continue,
            };
            return Some(format!(
                "image {}: layer {d} is damaged ({why}); repair: `husk image verify {} --repair`",
                self.image, self.image
            ));
        }
        None
    }
}

pub struct Store {
    root: PathBuf,
}

#[derive(Debug, Default, Serialize)]
pub struct PruneReport {
    pub layers_removed: usize,
    pub bytes_freed: u64,
    pub layers_in_use: usize,
    pub blobs_removed: usize,
    pub partial_builds_removed: usize,
    /// `husk build` cache entries whose layer was removed.
    pub cache_entries_removed: usize,
}

fn store_err(path: &Path, why: impl std::fmt::Display) -> ImageError {
    ImageError::Store { path: path.display().to_string(), why: why.to_string() }
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl Store {
    /// Opens (creating) the store at `root`, private to the caller.
    pub fn open(root: &Path) -> Result<Store, ImageError> {
        crate::paths::ensure_private_dir("store root", root)?;
        for d in SUBDIRS {
            let p = root.join(d);
            match std::fs::DirBuilder::new().mode(0o700).create(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(store_err(&p, e)),
            }
        }
        Ok(Store { root: root.to_path_buf() })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn lock_file(&self, name: &str) -> Result<File, ImageError> {
        let p = self.root.join("locks").join(name);
        crate::files::open_lock(&p).map_err(|e| store_err(&p, e))
    }

    fn lock(&self, name: &str, arg: FlockArg) -> Result<Flock<File>, ImageError> {
        Flock::lock(self.lock_file(name)?, arg).map_err(|(_, e)| store_err(&self.root.join("locks").join(name), e))
    }

    /// Ok(None) when someone else holds it.
    fn try_lock(&self, name: &str, exclusive: bool) -> Result<Option<Flock<File>>, ImageError> {
        let arg = if exclusive { FlockArg::LockExclusiveNonblock } else { FlockArg::LockSharedNonblock };
        match Flock::lock(self.lock_file(name)?, arg) {
            Ok(l) => Ok(Some(l)),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, e)) => Err(store_err(&self.root.join("locks").join(name), e)),
        }
    }

    /// Held by importers and runs (shared) and by rm/prune (exclusive).
    pub fn lock_store(&self, exclusive: bool) -> Result<Flock<File>, ImageError> {
        self.lock("store", if exclusive { FlockArg::LockExclusive } else { FlockArg::LockShared })
    }

    pub fn layer_key(diff_id: &Digest, owners: &Owners) -> String {
        format!("{}{}", diff_id.hex(), owners.key_suffix())
    }

    pub fn layer_dir(&self, diff_id: &Digest, owners: &Owners) -> PathBuf {
        self.root.join("layers").join(Self::layer_key(diff_id, owners))
    }

    pub fn has_layer(&self, diff_id: &Digest, owners: &Owners) -> bool {
        self.layer_dir(diff_id, owners).is_dir()
    }

    /// Publishes a layer: `build` fills an empty private directory, which
    /// is flushed, given its report and file manifest, and renamed into
    /// place only when it succeeded. With `Publish::IfMissing` a layer
    /// already there is kept (Ok(None)); concurrent builders serialize on
    /// its lock and the later one finds it published. With
    /// `Publish::Replace` (a damaged layer) the new build is exchanged
    /// with the published one atomically, and refused while a running
    /// sandbox has the layer mounted. This is the one way a layer enters
    /// the store (imports, pulls, repairs).
    pub fn ensure_layer<E: From<ImageError>>(
        &self,
        diff_id: &Digest,
        owners: &Owners,
        publish: Publish,
        build: impl FnOnce(OwnedFd) -> Result<Unpacked, E>,
    ) -> Result<Option<UnpackReport>, E> {
        let key = Self::layer_key(diff_id, owners);
        let dest = self.root.join("layers").join(&key);
        if publish == Publish::IfMissing && dest.is_dir() {
            return Ok(None);
        }
        let lock_name = format!("layer-{key}");
        let _lock = if dest.is_dir() {
            // Runs hold the layers they mount shared for their whole life:
            // waiting could take as long as the longest sandbox.
            self.try_lock(&lock_name, true)?.ok_or_else(|| {
                store_err(&dest, "the layer is in use by a running sandbox; repair it when that sandbox has ended")
            })?
        } else {
            self.lock(&lock_name, FlockArg::LockExclusive)?
        };
        if publish == Publish::IfMissing && dest.is_dir() {
            return Ok(None);
        }
        let tmp_name = format!("{key}.{}.{}", std::process::id(), crate::ids::new_id());
        let tmp_root = self.root.join("tmp");
        let tmp = tmp_root.join(&tmp_name);
        std::fs::DirBuilder::new().mode(0o700).create(&tmp).map_err(|e| store_err(&tmp, e))?;
        let open = |p: &Path| {
            nix::fcntl::open(p, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
                .map_err(|e| store_err(p, e))
        };
        let tmp_parent = open(&tmp_root)?;
        let cleanup = |tmp_parent: &OwnedFd| {
            let _ = remove_tree(tmp_parent.as_fd(), &fsutil::cname(tmp_name.as_bytes()));
        };
        let Unpacked { report, files } = match open(&tmp).map_err(E::from).and_then(build) {
            Ok(r) => r,
            Err(e) => {
                cleanup(&tmp_parent);
                return Err(e);
            }
        };
        let meta = LayerMeta { diff_id: diff_id.clone(), report: report.clone() };
        let layers_dir = self.root.join("layers");
        let meta_path = layers_dir.join(format!("{key}.json"));
        let files_path = layers_dir.join(manifest::file_name(&key));
        // Everything the build wrote reaches the disk before the rename
        // publishes it, and the rename itself after: a power loss leaves
        // the layer absent or complete, never published and partial. One
        // syncfs instead of an fsync per file (thousands per layer). The
        // report and manifest are durable before the layer they describe.
        let replacing = dest.is_dir();
        let published = sync_dir(&tmp, Sync::Filesystem)
            .map_err(|e| store_err(&tmp, e))
            .and_then(|_| {
                write_durable(&meta_path, &serde_json::to_vec_pretty(&meta).unwrap_or_default())
                    .map_err(|e| store_err(&meta_path, e))
            })
            .and_then(|_| {
                write_durable(&files_path, &serde_json::to_vec(&files).unwrap_or_default())
                    .map_err(|e| store_err(&files_path, e))
            })
            .and_then(|_| {
                let layers = open(&layers_dir)?;
                let how = if replacing { RenameFlags::RENAME_EXCHANGE } else { RenameFlags::RENAME_NOREPLACE };
                renameat2(&tmp_parent, tmp_name.as_str(), &layers, key.as_str(), how).map_err(|e| store_err(&dest, e))
            })
            .and_then(|_| sync_dir(&layers_dir, Sync::Dir).map_err(|e| store_err(&layers_dir, e)));
        // After an exchange the damaged tree is the one under tmp/.
        cleanup(&tmp_parent);
        if let Err(e) = published {
            return Err(e.into());
        }
        Ok(Some(report))
    }

    /// Checks a published layer against the manifest recorded when it was
    /// unpacked: `Check::Quick` looks at types, sizes, modes, owners and
    /// symlink targets (no file is read), `Check::Full` hashes every file
    /// too. Runs never call this unless a command failed to start.
    pub fn check_layer(&self, diff_id: &Digest, owners: &Owners, check: Check) -> Result<LayerState, ImageError> {
        let key = Self::layer_key(diff_id, owners);
        let dir = self.root.join("layers").join(&key);
        let fd = match nix::fcntl::open(
            &dir,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ENOENT) => return Ok(LayerState::Missing),
            Err(e) => return Err(store_err(&dir, e)),
        };
        let files_path = self.root.join("layers").join(manifest::file_name(&key));
        let recorded = match manifest::load(&files_path) {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(LayerState::NoManifest),
            Err(why) => return Ok(LayerState::ManifestDamaged(why)),
        };
        let hashing = match check {
            Check::Quick => Hashing::Skip,
            Check::Full => Hashing::Read,
        };
        let now = manifest::scan(fd.as_fd(), &hashing).map_err(|e| store_err(&dir, e))?;
        let findings = manifest::compare(&recorded, &now);
        Ok(if findings.is_clean() { LayerState::Intact } else { LayerState::Damaged(findings) })
    }

    /// Removes build directories in tmp/ that no import is working on. A
    /// builder holds its layer's lock from before it creates its directory
    /// until it has renamed or removed it, so a directory whose layer lock
    /// is free was left by a killed import; one whose lock is held is
    /// skipped. Returns how many were removed.
    pub fn sweep_tmp(&self) -> Result<usize, ImageError> {
        let tmp = self.root.join("tmp");
        let tmp_fd = nix::fcntl::open(&tmp, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| store_err(&tmp, e))?;
        let mut removed = 0;
        for e in std::fs::read_dir(&tmp).map_err(|e| store_err(&tmp, e))?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            // `<key>.<pid>.<id>`, as ensure_layer names them.
            let mut parts = name.rsplitn(3, '.');
            let (Some(_id), Some(_pid), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b".-".contains(&b)) {
                continue;
            }
            let Some(_lock) = self.try_lock(&format!("layer-{key}"), true)? else {
                continue;
            };
            let cname = fsutil::cname(name.as_bytes());
            if fsutil::lstat_at(tmp_fd.as_fd(), &cname).is_err() {
                continue;
            }
            remove_tree(tmp_fd.as_fd(), &cname).map_err(|err| store_err(&e.path(), err))?;
            removed += 1;
        }
        Ok(removed)
    }

    pub fn layer_meta(&self, diff_id: &Digest, owners: &Owners) -> Option<LayerMeta> {
        let p = self.root.join("layers").join(format!("{}.json", Self::layer_key(diff_id, owners)));
        serde_json::from_slice(&std::fs::read(p).ok()?).ok()
    }

    /// Stores a manifest/config. One already there is checked first and
    /// replaced when it no longer matches its digest (the repair a corrupt
    /// store is told to make is a re-import). Ok(true): it was replaced.
    pub fn put_blob(&self, digest: &Digest, bytes: &[u8]) -> Result<bool, ImageError> {
        let p = self.root.join("blobs").join(digest.hex());
        let damaged = match std::fs::read(&p) {
            Ok(old) if &Digest::of(&old) == digest => return Ok(false),
            Ok(_) => true,
            Err(_) => false,
        };
        write_durable(&p, bytes).map_err(|e| store_err(&p, e))?;
        Ok(damaged)
    }

    /// A stored manifest/config, verified against its digest.
    pub fn get_blob(&self, digest: &Digest) -> Result<Vec<u8>, ImageError> {
        let p = self.root.join("blobs").join(digest.hex());
        let bytes = std::fs::read(&p).map_err(|e| store_err(&p, e))?;
        if &Digest::of(&bytes) != digest {
            return Err(store_err(&p, "content does not match its digest (store corrupted); re-import the image"));
        }
        Ok(bytes)
    }

    fn record_key(name: &str) -> String {
        Digest::of(name.as_bytes()).hex()[..32].to_string()
    }

    fn record_path(&self, name: &str) -> PathBuf {
        self.root.join("images").join(format!("{}.json", Self::record_key(name)))
    }

    pub fn write_record(&self, rec: &Record) -> Result<(), ImageError> {
        let p = self.record_path(&rec.name);
        write_durable(&p, &serde_json::to_vec_pretty(rec).unwrap_or_default()).map_err(|e| store_err(&p, e))
    }

    /// The record for `name` (normalized, `:latest` by default).
    pub fn find(&self, name: &str) -> Result<Record, ImageError> {
        match self.find_key(normalize_name(name)?) {
            // A Docker Hub pull stored before names were familiar
            // (`docker.io/library/busybox:latest`) is still found.
            Err(ImageError::NotFound(n)) => match super::reference::Reference::parse(name) {
                Ok(r) if r.qualified_store_name() != n && self.record_path(&r.qualified_store_name()).is_file() => {
                    self.find_key(r.qualified_store_name())
                }
                _ => Err(ImageError::NotFound(n)),
            },
            other => other,
        }
    }

    fn find_key(&self, name: String) -> Result<Record, ImageError> {
        let p = self.record_path(&name);
        let bytes = match std::fs::read(&p) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ImageError::NotFound(name)),
            Err(e) => return Err(store_err(&p, e)),
        };
        let rec: Record = serde_json::from_slice(&bytes).map_err(|e| {
            let d = DamagedRecord::new(p.clone(), &Self::record_key(&name), e.to_string(), &bytes);
            store_err(&p, format!("image {name}: the record is damaged ({e}); {}", d.repair()))
        })?;
        if rec.name != name {
            return Err(ImageError::NotFound(name));
        }
        Ok(rec)
    }

    /// Every record, sorted by name, and the record files that could not
    /// be read (a torn write, a truncated file): those are listed, never
    /// dropped, so an image cannot vanish from `ls` silently.
    pub fn list(&self) -> Result<Listing, ImageError> {
        let dir = self.root.join("images");
        let mut out = Listing::default();
        for e in std::fs::read_dir(&dir).map_err(|e| store_err(&dir, e))? {
            let e = e.map_err(|e| store_err(&dir, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            // Dot files are write_durable's temporaries.
            let Some(key) = name.strip_suffix(".json").filter(|_| !name.starts_with('.')) else {
                continue;
            };
            let bytes = match std::fs::read(e.path()) {
                Ok(b) => b,
                Err(err) => {
                    out.damaged.push(DamagedRecord::new(e.path(), key, err.to_string(), &[]));
                    continue;
                }
            };
            match serde_json::from_slice::<Record>(&bytes) {
                Ok(rec) if Self::record_key(&rec.name) == key => out.records.push(rec),
                Ok(rec) => out.damaged.push(DamagedRecord::new(
                    e.path(),
                    key,
                    format!("it names {:?}, which is not the image this file is for", rec.name),
                    &[],
                )),
                Err(err) => out.damaged.push(DamagedRecord::new(e.path(), key, err.to_string(), &bytes)),
            }
        }
        out.records.sort_by(|a, b| a.name.cmp(&b.name));
        out.damaged.sort_by(|a, b| a.file.cmp(&b.file));
        Ok(out)
    }

    /// Resolves `name` for a run: the record, its layer directories (top
    /// first) and the locks that keep them from being removed meanwhile.
    pub fn lease(&self, name: &str, owners: &Owners) -> Result<(Record, Vec<PathBuf>, Lease), ImageError> {
        let _store = self.lock_store(false)?;
        let rec = self.find(name)?;
        let image = self.lock(&format!("image-{}", Self::record_key(&rec.name)), FlockArg::LockShared)?;
        let mut dirs = Vec::new();
        let mut layers = Vec::new();
        for l in rec.layers.iter().rev() {
            let dir = self.layer_dir(&l.diff_id, owners);
            if !dir.is_dir() {
                let other = self.any_variant(&l.diff_id);
                let hint = if other {
                    "; it was unpacked for another id range: re-import with the --id-range you run with".to_string()
                } else {
                    match rec.source.strip_prefix(PULLED_PREFIX) {
                        Some(r) => format!("; fetch it again with `husk pull {r}`"),
                        None => format!(
                            "; repair: `husk image verify {} --repair` (it imports the image again from {})",
                            rec.name, rec.source
                        ),
                    }
                };
                return Err(ImageError::MissingLayer { name: rec.name.clone(), diff_id: l.diff_id.to_string(), hint });
            }
            layers.push(self.lock(&format!("layer-{}", Self::layer_key(&l.diff_id, owners)), FlockArg::LockShared)?);
            dirs.push(dir);
        }
        let diff_ids = rec.layers.iter().map(|l| l.diff_id.clone()).collect();
        let lease = Lease {
            _image: image,
            _layers: layers,
            root: self.root.clone(),
            image: rec.name.clone(),
            diff_ids,
            owners: *owners,
        };
        Ok((rec, dirs, lease))
    }

    fn any_variant(&self, diff_id: &Digest) -> bool {
        std::fs::read_dir(self.root.join("layers"))
            .map(|rd| {
                rd.flatten().any(|e| {
                    let n = e.file_name().to_string_lossy().to_string();
                    n.starts_with(diff_id.hex()) && !n.ends_with(".json") && e.path().is_dir()
                })
            })
            .unwrap_or(false)
    }

    /// Removes the record for `name`; refused while a sandbox uses it. A
    /// damaged record is removed too (its image id is then unknown: None).
    pub fn remove(&self, name: &str) -> Result<(String, Option<Digest>), ImageError> {
        let _store = self.lock_store(true)?;
        let (name, id) = match self.find(name) {
            Ok(rec) => (rec.name.clone(), Some(rec.id().clone())),
            Err(ImageError::Store { .. }) if self.record_path(&normalize_name(name)?).is_file() => {
                (normalize_name(name)?, None)
            }
            Err(e) => return Err(e),
        };
        let key = Self::record_key(&name);
        let Some(_l) = self.try_lock(&format!("image-{key}"), true)? else {
            return Err(ImageError::InUse(name));
        };
        let p = self.record_path(&name);
        std::fs::remove_file(&p).map_err(|e| store_err(&p, e))?;
        Ok((name, id))
    }

    /// Removes layers and blobs no record references, and leftovers of
    /// interrupted imports. Layers a sandbox still uses are kept.
    pub fn prune(&self) -> Result<PruneReport, ImageError> {
        let _store = self.lock_store(true)?;
        let listing = self.list()?;
        // A damaged record still names layers and blobs nobody can read
        // back: pruning now would throw away what its repair reuses.
        if let Some(d) = listing.damaged.first() {
            return Err(store_err(&d.file, format!("damaged image record, nothing pruned; {}", d.repair())));
        }
        let records = listing.records;
        let layer_refs: BTreeSet<String> =
            records.iter().flat_map(|r| r.layers.iter().map(|l| l.diff_id.hex().to_string())).collect();
        let blob_refs: BTreeSet<String> = records
            .iter()
            .flat_map(|r| [Some(r.config.hex().to_string()), r.manifest.as_ref().map(|m| m.hex().to_string())])
            .flatten()
            .collect();
        let mut report = PruneReport::default();
        let open = |p: &Path| {
            nix::fcntl::open(p, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
                .map_err(|e| store_err(p, e))
        };
        // Under the exclusive store lock no import runs: every build
        // directory left in tmp/ belongs to a dead process.
        let tmp = self.root.join("tmp");
        let tmp_fd = open(&tmp)?;
        for e in std::fs::read_dir(&tmp).map_err(|e| store_err(&tmp, e))?.flatten() {
            remove_tree(tmp_fd.as_fd(), &fsutil::cname(e.file_name().as_encoded_bytes()))
                .map_err(|err| store_err(&e.path(), err))?;
            report.partial_builds_removed += 1;
        }
        let layers = self.root.join("layers");
        let layers_fd = open(&layers)?;
        for e in std::fs::read_dir(&layers).map_err(|e| store_err(&layers, e))?.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.ends_with(".json") || !e.path().is_dir() {
                continue;
            }
            let hex = name.split('.').next().unwrap_or("");
            if layer_refs.contains(hex) {
                continue;
            }
            let Some(_lock) = self.try_lock(&format!("layer-{name}"), true)? else {
                report.layers_in_use += 1;
                continue;
            };
            let meta_path = layers.join(format!("{name}.json"));
            let bytes = std::fs::read(&meta_path)
                .ok()
                .and_then(|b| serde_json::from_slice::<LayerMeta>(&b).ok())
                .map(|m| m.report.bytes)
                .unwrap_or(0);
            remove_tree(layers_fd.as_fd(), &fsutil::cname(name.as_bytes())).map_err(|err| store_err(&e.path(), err))?;
            let _ = std::fs::remove_file(&meta_path);
            let _ = std::fs::remove_file(layers.join(manifest::file_name(&name)));
            let _ = std::fs::remove_file(self.root.join("locks").join(format!("layer-{name}")));
            report.layers_removed += 1;
            report.bytes_freed += bytes;
        }
        // Build cache entries whose layer is gone would only miss.
        let present: BTreeSet<String> = std::fs::read_dir(&layers)
            .map_err(|e| store_err(&layers, e))?
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().split('.').next().unwrap_or("").to_string())
            .collect();
        report.cache_entries_removed = prune_build_cache(&self.root.join(BUILD_CACHE), &present);
        // Lock files of names that no longer have a record (nobody can hold
        // them: a run leases an image only while its record exists).
        let names: BTreeSet<String> = records.iter().map(|r| format!("image-{}", Self::record_key(&r.name))).collect();
        let locks = self.root.join("locks");
        for e in std::fs::read_dir(&locks).map_err(|e| store_err(&locks, e))?.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with("image-") && !names.contains(&n) && self.try_lock(&n, true)?.is_some() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let blobs = self.root.join("blobs");
        for e in std::fs::read_dir(&blobs).map_err(|e| store_err(&blobs, e))?.flatten() {
            if !blob_refs.contains(e.file_name().to_string_lossy().as_ref()) {
                std::fs::remove_file(e.path()).map_err(|err| store_err(&e.path(), err))?;
                report.blobs_removed += 1;
            }
        }
        Ok(report)
    }
}

/// `husk build`'s cache under the store root: `<key>.json` files, each
/// naming the layer (`{"diff_id": ..}`) a build step made.
pub const BUILD_CACHE: &str = "build-cache";

/// Removes cache entries whose layer is not in `present` (hex diff_ids).
fn prune_build_cache(dir: &Path, present: &BTreeSet<String>) -> usize {
    #[derive(Deserialize)]
    struct Entry {
        diff_id: Digest,
    }
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    let mut n = 0;
    for e in rd.flatten() {
        let stale = std::fs::read(e.path())
            .ok()
            .and_then(|b| serde_json::from_slice::<Entry>(&b).ok())
            .is_none_or(|en| !present.contains(en.diff_id.hex()));
        if stale && std::fs::remove_file(e.path()).is_ok() {
            n += 1;
        }
    }
    n
}

enum Sync {
    /// fsync of the directory itself (its entries).
    Dir,
    /// syncfs: everything dirty on the directory's filesystem.
    Filesystem,
}

fn sync_dir(dir: &Path, how: Sync) -> std::io::Result<()> {
    let fd = nix::fcntl::open(dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?;
    match how {
        Sync::Dir => nix::unistd::fsync(&fd)?,
        Sync::Filesystem => nix::unistd::syncfs(&fd)?,
    }
    Ok(())
}
