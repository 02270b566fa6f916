//! A stored image back out as OCI blobs: `husk image export` (an OCI
//! layout directory, an oci-archive or a `docker save` archive) and
//! `husk push` both start here.
//!
//! The store keeps layers unpacked, not their original blobs, so each
//! layer is written again from its directory with the build's
//! deterministic layer writer (overlay whiteouts back to `.wh.` entries,
//! owners shifted back to the image's ids, uncompressed tar). A layer husk
//! built comes out byte-identical (same diff_id); an imported or pulled
//! one usually does not (other tar writers order entries and set mtimes
//! differently), and then the config's `rootfs.diff_ids` are rewritten to
//! the new layers, so the exported image has its own, consistent digests.

use super::diff::{DiffError, Unshift, write_upper};
use super::layer::{self, MEDIA_TAR};
use super::layer_tar::{EntryKind, Meta, StableTar};
use crate::image::digest::Digest;
use crate::image::oci::{ANNOTATION_CONTAINERD_NAME, ANNOTATION_REF, MEDIA_OCI_INDEX, MEDIA_OCI_MANIFEST};
use crate::image::{ImageError, Owners, Store};
use serde_json::{Value, json};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Media type of the configs husk writes.
pub const MEDIA_OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// An OCI image layout directory.
    Oci,
    /// An uncompressed tar of an OCI image layout.
    OciArchive,
    /// The `docker save` layout (manifest.json, repositories, config,
    /// `<id>/layer.tar`), what `docker load` reads.
    DockerArchive,
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("writing layer {diff_id} again from the store: {err}")]
    Layer { diff_id: Digest, err: DiffError },
    #[error("{}: already exists and is not empty; remove it or name a new directory", path.display())]
    Exists { path: PathBuf },
    #[error("image config: {0}")]
    Config(String),
}

fn io_at(path: &Path) -> impl Fn(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io { path: path.to_path_buf(), source }
}

/// One layer written as a blob file in the work directory.
#[derive(Clone, Debug)]
pub struct Blob {
    pub digest: Digest,
    pub size: u64,
    pub path: PathBuf,
}

/// An image as OCI blobs: config and manifest bytes, layer tars on disk.
#[derive(Debug)]
pub struct Serialized {
    pub name: String,
    pub config: Vec<u8>,
    pub manifest: Vec<u8>,
    pub layers: Vec<Blob>,
}

impl Serialized {
    pub fn config_digest(&self) -> Digest {
        Digest::of(&self.config)
    }
    pub fn manifest_digest(&self) -> Digest {
        Digest::of(&self.manifest)
    }
}

/// Writes every layer of the stored image `name` into `work` (a private
/// directory the caller removes) and makes its config and manifest. The
/// image and its layers are leased meanwhile, so neither `rm` nor `prune`
/// takes them away underneath.
pub fn serialize(store: &Store, name: &str, owners: &Owners, work: &Path) -> Result<Serialized, ExportError> {
    let (rec, dirs, _lease) = store.lease(name, owners)?;
    let config = store.get_blob(&rec.config)?;
    let mut layers = Vec::new();
    // `lease` gives the directories top first; layers go bottom first.
    for (i, (dir, l)) in dirs.iter().rev().zip(&rec.layers).enumerate() {
        let tmp = work.join(format!("layer-{i}.tar"));
        let mut tar = layer::create(&tmp).map_err(io_at(&tmp))?;
        write_upper(dir, Unshift::new(*owners), &mut tar)
            .map_err(|err| ExportError::Layer { diff_id: l.diff_id.clone(), err })?;
        let t = layer::finish(tar, &tmp).map_err(io_at(&tmp))?;
        let path = work.join(t.diff_id.hex());
        std::fs::rename(&tmp, &path).map_err(io_at(&path))?;
        layers.push(Blob { digest: t.diff_id, size: t.size, path });
    }
    let same = layers.iter().map(|b| &b.digest).eq(rec.layers.iter().map(|l| &l.diff_id));
    let config = if same { config } else { with_diff_ids(&config, &layers)? };
    // For a built image this is the stored manifest, byte for byte.
    let manifest = manifest_json(&config, &layers);
    Ok(Serialized { name: rec.name, config, manifest, layers })
}

/// The config with `rootfs.diff_ids` naming `layers`.
fn with_diff_ids(config: &[u8], layers: &[Blob]) -> Result<Vec<u8>, ExportError> {
    let mut v: Value = serde_json::from_slice(config).map_err(|e| ExportError::Config(e.to_string()))?;
    let ids: Vec<String> = layers.iter().map(|b| b.digest.to_string()).collect();
    match v.get_mut("rootfs") {
        Some(r) if r.is_object() => r["diff_ids"] = json!(ids),
        _ => return Err(ExportError::Config("it has no rootfs object".into())),
    }
    serde_json::to_vec(&v).map_err(|e| ExportError::Config(e.to_string()))
}

/// An OCI manifest of uncompressed tar layers (the layer digest is its
/// diff_id), with object keys sorted as husk build writes them.
pub fn manifest_json(config: &[u8], layers: &[Blob]) -> Vec<u8> {
    let layers: Vec<Value> =
        layers.iter().map(|b| json!({"mediaType": MEDIA_TAR, "digest": b.digest, "size": b.size})).collect();
    let v = json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_OCI_MANIFEST,
        "config": {"mediaType": MEDIA_OCI_CONFIG, "digest": Digest::of(config), "size": config.len()},
        "layers": layers,
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

/// What an export wrote.
#[derive(Debug, serde::Serialize)]
pub struct Exported {
    pub name: String,
    pub path: PathBuf,
    pub format: &'static str,
    pub manifest: Digest,
    pub config: Digest,
    pub layers: usize,
    pub bytes: u64,
}

/// `husk image export NAME -o PATH --format F`. The result appears at
/// PATH only when complete (written beside it, then renamed); an archive
/// already at PATH is replaced, as `docker save -o` does; a non-empty
/// directory is refused.
pub fn export(store: &Store, name: &str, owners: &Owners, out: &Path, format: Format) -> Result<Exported, ExportError> {
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = out.file_name().ok_or_else(|| ExportError::Io {
        path: out.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"),
    })?;
    if format == Format::Oci && std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some()) {
        return Err(ExportError::Exists { path: out.to_path_buf() });
    }
    let tag = crate::ids::new_id();
    let work = parent.join(format!(".{}.husk-export-{tag}", file_name.to_string_lossy()));
    std::fs::create_dir(&work).map_err(io_at(&work))?;
    let _cleanup = RemoveOnDrop(work.clone());
    let blobs = work.join("blobs").join("sha256");
    std::fs::create_dir_all(&blobs).map_err(io_at(&blobs))?;
    let s = serialize(store, name, owners, &blobs)?;
    let bytes = s.layers.iter().map(|b| b.size).sum::<u64>() + s.config.len() as u64 + s.manifest.len() as u64;
    match format {
        Format::Oci | Format::OciArchive => {
            write_layout(&work, &s)?;
            if format == Format::Oci {
                let _ = std::fs::remove_dir(out);
                std::fs::rename(&work, out).map_err(io_at(out))?;
            } else {
                let tmp = parent.join(format!(".{}.husk-export-{tag}.tar", file_name.to_string_lossy()));
                let _tmp = RemoveOnDrop(tmp.clone());
                write_archive(&tmp, &layout_members(&work, &s))?;
                std::fs::rename(&tmp, out).map_err(io_at(out))?;
            }
        }
        Format::DockerArchive => {
            let tmp = parent.join(format!(".{}.husk-export-{tag}.tar", file_name.to_string_lossy()));
            let _tmp = RemoveOnDrop(tmp.clone());
            write_archive(&tmp, &docker_members(&s)?)?;
            std::fs::rename(&tmp, out).map_err(io_at(out))?;
        }
    }
    Ok(Exported {
        name: s.name.clone(),
        path: out.to_path_buf(),
        format: match format {
            Format::Oci => "oci",
            Format::OciArchive => "oci-archive",
            Format::DockerArchive => "docker-archive",
        },
        manifest: s.manifest_digest(),
        config: s.config_digest(),
        layers: s.layers.len(),
        bytes,
    })
}

/// A path removed (a tree, or a file) when dropped: work files of an
/// export or push never outlive it, whichever way it ends.
pub struct RemoveOnDrop(pub PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        match std::fs::symlink_metadata(&self.0) {
            Ok(m) if m.is_dir() => {
                let _ = std::fs::remove_dir_all(&self.0);
            }
            Ok(_) => {
                let _ = std::fs::remove_file(&self.0);
            }
            Err(_) => {}
        }
    }
}

/// `oci-layout`, `index.json` and the config and manifest blobs beside
/// the layers already in `dir/blobs/sha256`.
fn write_layout(dir: &Path, s: &Serialized) -> Result<(), ExportError> {
    let put = |p: PathBuf, bytes: &[u8]| std::fs::write(&p, bytes).map_err(io_at(&p));
    let blobs = dir.join("blobs").join("sha256");
    put(blobs.join(s.config_digest().hex()), &s.config)?;
    put(blobs.join(s.manifest_digest().hex()), &s.manifest)?;
    put(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    put(dir.join("index.json"), &index_json(s))
}

fn index_json(s: &Serialized) -> Vec<u8> {
    let tag = s.name.rsplit('/').next().and_then(|last| last.split_once(':')).map(|(_, t)| t).unwrap_or("latest");
    let v = json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_OCI_INDEX,
        "manifests": [{
            "mediaType": MEDIA_OCI_MANIFEST,
            "digest": s.manifest_digest(),
            "size": s.manifest.len(),
            "annotations": {ANNOTATION_REF: tag, ANNOTATION_CONTAINERD_NAME: s.name},
        }],
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

/// One member of an archive: in-memory bytes or a file on disk.
enum Member {
    Dir(String),
    Bytes(String, Vec<u8>),
    File(String, PathBuf, u64),
}

fn layout_members(dir: &Path, s: &Serialized) -> Vec<Member> {
    let blob = |d: &Digest| format!("blobs/sha256/{}", d.hex());
    let mut m = vec![
        Member::Bytes("oci-layout".into(), br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()),
        Member::Bytes("index.json".into(), index_json(s)),
        Member::Dir("blobs/".into()),
        Member::Dir("blobs/sha256/".into()),
        Member::Bytes(blob(&s.config_digest()), s.config.clone()),
        Member::Bytes(blob(&s.manifest_digest()), s.manifest.clone()),
    ];
    let mut seen = std::collections::BTreeSet::<String>::new();
    for l in &s.layers {
        if seen.insert(l.digest.hex().to_string()) {
            m.push(Member::File(blob(&l.digest), dir.join("blobs/sha256").join(l.digest.hex()), l.size));
        }
    }
    m
}

/// The `docker save` layout: `<config hex>.json`, one `<diff_id
/// hex>/layer.tar` per layer, `manifest.json` and `repositories`.
fn docker_members(s: &Serialized) -> Result<Vec<Member>, ExportError> {
    let config_name = format!("{}.json", s.config_digest().hex());
    let mut m = vec![Member::Bytes(config_name.clone(), s.config.clone())];
    let mut seen = std::collections::BTreeSet::<String>::new();
    let mut layer_names = Vec::new();
    for l in &s.layers {
        let name = format!("{}/layer.tar", l.digest.hex());
        if seen.insert(l.digest.hex().to_string()) {
            m.push(Member::Dir(format!("{}/", l.digest.hex())));
            m.push(Member::File(name.clone(), l.path.clone(), l.size));
        }
        layer_names.push(name);
    }
    // A digest-pinned name is no tag Docker can show.
    let tagged = !s.name.contains('@');
    let repo_tags: Vec<&str> = if tagged { vec![s.name.as_str()] } else { vec![] };
    let manifest = json!([{"Config": config_name, "RepoTags": repo_tags, "Layers": layer_names}]);
    m.push(Member::Bytes("manifest.json".into(), serde_json::to_vec(&manifest).unwrap_or_default()));
    if tagged && let (Some((repo, tag)), Some(top)) = (split_tag(&s.name), s.layers.last()) {
        let repos = json!({ repo: { tag: top.digest.hex() } });
        m.push(Member::Bytes("repositories".into(), serde_json::to_vec(&repos).unwrap_or_default()));
    }
    Ok(m)
}

/// `repo:tag` at the last component's colon.
fn split_tag(name: &str) -> Option<(&str, &str)> {
    let slash = name.rfind('/').map(|i| i + 1).unwrap_or(0);
    let colon = name[slash..].rfind(':')? + slash;
    Some((&name[..colon], &name[colon + 1..]))
}

fn write_archive(path: &Path, members: &[Member]) -> Result<(), ExportError> {
    let f = std::fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(io_at(path))?;
    let mut tar = StableTar::new(BufWriter::new(f), layer::epoch());
    let meta = |name: &str, kind, mode, size| Meta {
        path: name.as_bytes().to_vec(),
        kind,
        mode,
        uid: 0,
        gid: 0,
        size,
        link: Vec::new(),
    };
    for m in members {
        match m {
            Member::Dir(n) => tar.append(&meta(n, EntryKind::Dir, 0o755, 0)).map_err(io_at(path))?,
            Member::Bytes(n, b) => {
                tar.append(&meta(n, EntryKind::File, 0o644, b.len() as u64)).map_err(io_at(path))?;
                tar.data(&mut &b[..], b.len() as u64).map_err(io_at(path))?;
            }
            Member::File(n, p, size) => {
                let mut f = std::fs::File::open(p).map_err(io_at(p))?;
                tar.append(&meta(n, EntryKind::File, 0o644, *size)).map_err(io_at(path))?;
                tar.data(&mut f, *size).map_err(io_at(p))?;
            }
        }
    }
    let mut out = tar.finish().map_err(io_at(path))?;
    out.flush().map_err(io_at(path))?;
    out.get_ref().sync_all().map_err(io_at(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_at_the_last_components_tag() {
        assert_eq!(split_tag("bb:latest"), Some(("bb", "latest")));
        assert_eq!(split_tag("127.0.0.1:5000/x/y:1"), Some(("127.0.0.1:5000/x/y", "1")));
        assert_eq!(split_tag("127.0.0.1:5000/x"), None);
    }
}
