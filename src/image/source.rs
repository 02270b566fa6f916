//! Where an image comes from: an OCI layout directory, an oci-archive (a
//! tar of one) or a `docker save` tarball; resolved to one manifest, its
//! config and its layers, each small document verified before it is
//! parsed. The source is untrusted: blobs are opened beneath the layout
//! directory (never through a symlink that leaves it), archives are read
//! by offset with bounded metadata.

use super::digest::{Digest, Expect, Verify, truncate};
use super::oci::{self, Descriptor, DockerSaveEntry, ImageConfig, Index, Manifest};
use super::tar::{Kind, Seekable, TarReader};
use super::whiteout::{NameLimits, components};
use super::{ImageError, MAX_JSON};
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::{Mode, SFlag, fstat};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Random access to the files of a source, by relative path.
pub trait Blobs: Sync {
    /// The blob's reader and its size on disk.
    fn open(&self, path: &str) -> Result<(Box<dyn Read + Send + '_>, u64), ImageError>;
}

/// An OCI layout directory.
pub struct OciDir {
    dir: OwnedFd,
    label: String,
}

impl Blobs for OciDir {
    fn open(&self, path: &str) -> Result<(Box<dyn Read + Send + '_>, u64), ImageError> {
        let how = OpenHow::new()
            .flags(OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        let missing = |e: nix::errno::Errno| {
            ImageError::Source(format!("{}: cannot open {path}: {e} ({})", self.label, e.desc()))
        };
        let fd = openat2(&self.dir, path, how).map_err(missing)?;
        let st = fstat(&fd).map_err(missing)?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            return Err(ImageError::Source(format!("{}: {path} is not a regular file", self.label)));
        }
        Ok((Box::new(File::from(fd)), st.st_size as u64))
    }
}

/// A tar archive read by offset (members located once, then read in
/// parallel with pread).
pub struct Archive {
    file: File,
    members: HashMap<String, (u64, u64)>,
    label: String,
}

const MAX_ARCHIVE_MEMBERS: usize = 1 << 20;

impl Archive {
    pub fn index(path: &Path) -> Result<Archive, ImageError> {
        let label = path.display().to_string();
        let file = File::open(path).map_err(|e| ImageError::Source(format!("{label}: {e}")))?;
        let mut head = [0u8; 4];
        let n = file.read_at(&mut head, 0).unwrap_or(0);
        if n >= 2 && head[..2] == [0x1f, 0x8b] || n == 4 && head == [0x28, 0xb5, 0x2f, 0xfd] {
            return Err(ImageError::Source(format!(
                "{label} is a compressed archive; decompress it first (e.g. gunzip or zstd -d), husk reads archive members by offset"
            )));
        }
        let mut members = HashMap::new();
        let limits = NameLimits { max_path: 4096, max_depth: 64 };
        let mut tar =
            TarReader::new(Seekable(file.try_clone().map_err(|e| ImageError::Source(format!("{label}: {e}")))?));
        while let Some(h) =
            tar.next_member().map_err(|e| ImageError::Source(format!("{label}: not a readable tar archive: {e}")))?
        {
            if h.kind != Kind::File {
                continue;
            }
            let Ok(comps) = components(&h.path, &limits) else {
                continue;
            };
            if members.len() >= MAX_ARCHIVE_MEMBERS {
                return Err(ImageError::Source(format!("{label}: more than {MAX_ARCHIVE_MEMBERS} members")));
            }
            let name = String::from_utf8_lossy(&comps.join(&b'/')).into_owned();
            members.insert(name, (h.data_offset, h.size));
        }
        Ok(Archive { file, members, label })
    }

    fn has(&self, name: &str) -> bool {
        self.members.contains_key(name)
    }
}

struct Section<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for Section<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf.len().min((self.end - self.pos).min(usize::MAX as u64) as usize);
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Blobs for Archive {
    fn open(&self, path: &str) -> Result<(Box<dyn Read + Send + '_>, u64), ImageError> {
        let (off, size) = self
            .members
            .get(path)
            .copied()
            .ok_or_else(|| ImageError::Source(format!("{}: member {path} is missing", self.label)))?;
        Ok((Box::new(Section { file: &self.file, pos: off, end: off + size }), size))
    }
}

/// One layer to import.
#[derive(Clone, Debug)]
pub struct LayerSrc {
    pub path: String,
    /// The blob's digest (None for `docker save` members, which have none;
    /// their content is still checked against the diff_id).
    pub digest: Option<Digest>,
    pub size: u64,
    pub media_type: String,
    pub diff_id: Digest,
}

/// The layers a manifest lists, each paired with the config's diff_id for
/// it (checked against the blob as it is unpacked); `path` names where the
/// blob is read from (a layout's file, a registry's digest).
pub fn layers_of(
    manifest: &Manifest,
    config: &ImageConfig,
    label: &str,
    path: impl Fn(&Digest) -> String,
) -> Result<Vec<LayerSrc>, ImageError> {
    if config.rootfs.diff_ids.len() != manifest.layers.len() {
        return Err(ImageError::Format(format!(
            "{label}: the manifest lists {} layers but the config has {} diff_ids",
            manifest.layers.len(),
            config.rootfs.diff_ids.len()
        )));
    }
    Ok(manifest
        .layers
        .iter()
        .zip(&config.rootfs.diff_ids)
        .map(|(d, diff)| LayerSrc {
            path: path(&d.digest),
            digest: Some(d.digest.clone()),
            size: d.size,
            media_type: d.media_type.clone(),
            diff_id: diff.clone(),
        })
        .collect())
}

/// A source resolved to one image.
pub struct Resolved {
    pub blobs: Box<dyn Blobs>,
    pub manifest: Option<(Digest, Vec<u8>)>,
    pub config_digest: Digest,
    pub config_bytes: Vec<u8>,
    pub config: ImageConfig,
    pub layers: Vec<LayerSrc>,
    /// Name to record when the user gives none.
    pub default_name: String,
    pub platform: String,
    pub source: String,
    /// Registry, repository and tag of a pulled image.
    pub pulled: Option<super::store::Pulled>,
}

/// Splits `PATH[:TAG]`: the whole string when it exists, else the part
/// before the last ':' when that exists.
pub fn split_ref(reference: &str) -> Option<(PathBuf, Option<String>)> {
    if Path::new(reference).exists() {
        return Some((PathBuf::from(reference), None));
    }
    let (p, t) = reference.rsplit_once(':')?;
    (!t.is_empty() && !t.contains('/') && Path::new(p).exists()).then(|| (PathBuf::from(p), Some(t.to_string())))
}

/// Opens and resolves `reference` (PATH or PATH:TAG).
pub fn resolve(reference: &str) -> Result<Resolved, ImageError> {
    let (path, tag) = split_ref(reference).ok_or_else(|| {
        ImageError::Source(format!(
            "{reference}: no such file or directory (expected an OCI layout, an oci-archive or a docker save tarball)"
        ))
    })?;
    let path = std::fs::canonicalize(&path).map_err(|e| ImageError::Source(format!("{}: {e}", path.display())))?;
    let label = path.display().to_string();
    let stem = path
        .file_name()
        // `busybox.oci`, `busybox.oci.tar`, `busybox.tar`: the image's
        // name is `busybox` (as the same image pulled or loaded is).
        .map(|n| n.to_string_lossy().trim_end_matches(".tar").trim_end_matches(".oci").to_string())
        .unwrap_or_else(|| "image".into());
    if path.is_dir() {
        let dir = nix::fcntl::open(&path, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| ImageError::Source(format!("{label}: {e}")))?;
        let blobs = OciDir { dir, label: label.clone() };
        check_layout(&blobs, &label)?;
        return resolve_oci(Box::new(blobs), tag.as_deref(), &stem, label);
    }
    let archive = Archive::index(&path)?;
    if archive.has("index.json") && archive.has("oci-layout") {
        check_layout(&archive, &label)?;
        return resolve_oci(Box::new(archive), tag.as_deref(), &stem, label);
    }
    if archive.has("manifest.json") {
        return resolve_docker(archive, tag.as_deref(), &stem, label);
    }
    Err(ImageError::Source(format!(
        "{label}: not an OCI layout, oci-archive or docker save tarball (no oci-layout + index.json, no manifest.json)"
    )))
}

/// Reads a small document whole, bounded, and checks it when a digest and
/// size are known.
fn read_doc(blobs: &dyn Blobs, path: &str, what: &str, want: Option<(&Digest, u64)>) -> Result<Vec<u8>, ImageError> {
    let (r, size) = blobs.open(path)?;
    let bound = match want {
        Some((_, s)) => s,
        None => size,
    };
    if bound > MAX_JSON {
        return Err(ImageError::Format(format!("{what} is {bound} bytes (bound {MAX_JSON})")));
    }
    let expect = match want {
        Some((_, s)) => Expect::Exact(s),
        None => Expect::AtMost(MAX_JSON),
    };
    let mut v = Verify::new(r, expect, "blob");
    let mut bytes = Vec::new();
    let read = v.read_to_end(&mut bytes);
    let mismatch = |m: super::digest::Mismatch| ImageError::Format(format!("{what} ({path}) {m}"));
    if let Err(e) = read {
        return match super::digest::bound_of(&e) {
            Some(b) => Err(mismatch(super::digest::Mismatch::TooLong { limit: b.limit })),
            None => Err(ImageError::Source(format!("reading {what} ({path}): {e}"))),
        };
    }
    if let Some((d, _)) = want {
        v.finish(d).map_err(|e| ImageError::Source(format!("reading {what}: {e}")))?.map_err(mismatch)?;
    }
    Ok(bytes)
}

fn blob_path(d: &Digest) -> String {
    format!("blobs/sha256/{}", d.hex())
}

fn check_layout(blobs: &dyn Blobs, label: &str) -> Result<(), ImageError> {
    #[derive(serde::Deserialize)]
    struct Layout {
        #[serde(rename = "imageLayoutVersion")]
        version: String,
    }
    let bytes = read_doc(blobs, "oci-layout", "oci-layout", None)?;
    let l: Layout = oci::parse(&format!("{label}/oci-layout"), &bytes)?;
    if !l.version.starts_with("1.") {
        return Err(ImageError::Format(format!(
            "{label}: unsupported imageLayoutVersion {:?}",
            truncate(&l.version, 20)
        )));
    }
    Ok(())
}

fn resolve_oci(blobs: Box<dyn Blobs>, tag: Option<&str>, stem: &str, label: String) -> Result<Resolved, ImageError> {
    let host = oci::host_platform();
    let fmt = ImageError::Format;
    let index_bytes = read_doc(blobs.as_ref(), "index.json", "index.json", None)?;
    let index: Index = oci::parse(&format!("{label}/index.json"), &index_bytes)?;
    let candidates = oci::by_tag(&index, tag).map_err(|e| fmt(format!("{label}: {e}")))?;
    let top = oci::choose(&candidates, &host).map_err(|e| ImageError::Platform(format!("{label}: {e}")))?.clone();
    let mut desc = top.clone();
    for _ in 0..4 {
        if !desc.is_index() {
            break;
        }
        let what = format!("image index {}", desc.digest);
        let bytes = read_doc(blobs.as_ref(), &blob_path(&desc.digest), &what, Some((&desc.digest, desc.size)))?;
        let nested: Index = oci::parse(&what, &bytes)?;
        let all: Vec<&Descriptor> = nested.manifests.iter().collect();
        desc = oci::choose(&all, &host).map_err(|e| ImageError::Platform(format!("{label}: {e}")))?.clone();
    }
    if desc.is_index() {
        return Err(fmt(format!("{label}: image indexes nested more than 4 deep")));
    }
    let what = format!("manifest {}", desc.digest);
    let manifest_bytes = read_doc(blobs.as_ref(), &blob_path(&desc.digest), &what, Some((&desc.digest, desc.size)))?;
    let manifest: Manifest = oci::parse(&what, &manifest_bytes)?;
    if let Some(mt) = &manifest.media_type
        && mt != oci::MEDIA_OCI_MANIFEST
        && mt != oci::MEDIA_DOCKER_MANIFEST
    {
        return Err(fmt(format!("{what}: media type {:?} is not an image manifest", truncate(mt, 100))));
    }
    let c = &manifest.config;
    let what = format!("config {}", c.digest);
    let config_bytes = read_doc(blobs.as_ref(), &blob_path(&c.digest), &what, Some((&c.digest, c.size)))?;
    let config: ImageConfig = oci::parse(&what, &config_bytes)?;
    let platform = check_platform(&config, &host, &label)?;
    let layers = layers_of(&manifest, &config, &label, blob_path)?;
    let default_name = match (top.annotation(oci::ANNOTATION_CONTAINERD_NAME), top.annotation(oci::ANNOTATION_REF)) {
        (Some(full), _) => full.to_string(),
        (None, Some(r)) if r.contains(':') || r.contains('/') => r.to_string(),
        (None, Some(r)) => format!("{stem}:{r}"),
        (None, None) => stem.to_string(),
    };
    Ok(Resolved {
        blobs,
        manifest: Some((desc.digest.clone(), manifest_bytes)),
        config_digest: c.digest.clone(),
        config_bytes,
        config,
        layers,
        default_name,
        platform,
        source: label,
        pulled: None,
    })
}

fn check_platform(config: &ImageConfig, host: &oci::Platform, label: &str) -> Result<String, ImageError> {
    if config.rootfs.kind != "layers" {
        return Err(ImageError::Format(format!(
            "{label}: rootfs type {:?} is not \"layers\"",
            truncate(&config.rootfs.kind, 40)
        )));
    }
    let p = oci::Platform {
        os: if config.os.is_empty() { host.os.clone() } else { config.os.clone() },
        architecture: if config.architecture.is_empty() {
            host.architecture.clone()
        } else {
            config.architecture.clone()
        },
        variant: config.variant.clone(),
    };
    if oci::platform_rank(&p, host).is_none() {
        return Err(ImageError::Platform(format!("{label}: the image is for {p}; this host runs {host}")));
    }
    Ok(p.to_string())
}

fn resolve_docker(archive: Archive, tag: Option<&str>, stem: &str, label: String) -> Result<Resolved, ImageError> {
    let fmt = ImageError::Format;
    let bytes = read_doc(&archive, "manifest.json", "manifest.json", None)?;
    let entries: Vec<DockerSaveEntry> = oci::parse(&format!("{label}/manifest.json"), &bytes)?;
    let tags_of = |e: &DockerSaveEntry| e.repo_tags.clone().unwrap_or_default();
    let chosen: Vec<&DockerSaveEntry> = match tag {
        Some(t) => {
            entries.iter().filter(|e| tags_of(e).iter().any(|r| r == t || r.ends_with(&format!(":{t}")))).collect()
        }
        None => entries.iter().collect(),
    };
    let entry = match chosen.as_slice() {
        [one] => *one,
        [] => return Err(fmt(format!("{label}: no image tagged {:?} in manifest.json", tag.unwrap_or("")))),
        many => {
            let tags: Vec<String> = many.iter().flat_map(|e| tags_of(e)).collect();
            return Err(fmt(format!(
                "{label}: {} images in manifest.json; pick one with PATH:TAG ({})",
                many.len(),
                tags.join(", ")
            )));
        }
    };
    let member = |p: &str| {
        components(p.as_bytes(), &NameLimits { max_path: 4096, max_depth: 64 })
            .map(|c| String::from_utf8_lossy(&c.join(&b'/')).into_owned())
            .map_err(|e| fmt(format!("{label}: manifest.json names {:?}: {e}", truncate(p, 100))))
    };
    let config_path = member(&entry.config)?;
    // Legacy `docker save` names the config after its digest.
    let named = config_path.trim_start_matches("blobs/sha256/").trim_end_matches(".json");
    let want = Digest::parse(&format!("sha256:{named}")).ok();
    let config_bytes = read_doc(&archive, &config_path, "image config", None)?;
    let config_digest = Digest::of(&config_bytes);
    if let Some(w) = want
        && w != config_digest
    {
        return Err(fmt(format!("{label}: config {config_path} has digest {config_digest}, its name says {w}")));
    }
    let config: ImageConfig = oci::parse(&format!("config {config_path}"), &config_bytes)?;
    let platform = check_platform(&config, &oci::host_platform(), &label)?;
    if config.rootfs.diff_ids.len() != entry.layers.len() {
        return Err(fmt(format!(
            "{label}: manifest.json lists {} layers but the config has {} diff_ids",
            entry.layers.len(),
            config.rootfs.diff_ids.len()
        )));
    }
    let mut layers = Vec::new();
    for (p, diff) in entry.layers.iter().zip(&config.rootfs.diff_ids) {
        let path = member(p)?;
        let (_, size) = archive.open(&path)?;
        let named = path.strip_prefix("blobs/sha256/").and_then(|h| Digest::parse(&format!("sha256:{h}")).ok());
        layers.push(LayerSrc { path, digest: named, size, media_type: String::new(), diff_id: diff.clone() });
    }
    let default_name = tags_of(entry).first().cloned().unwrap_or_else(|| stem.to_string());
    Ok(Resolved {
        blobs: Box::new(archive),
        manifest: None,
        config_digest,
        config_bytes,
        config,
        layers,
        default_name,
        platform,
        source: label,
        pulled: None,
    })
}
