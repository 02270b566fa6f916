//! A built layer: a deterministic tar written to a file while its sha256
//! (the diff_id) is computed, then published through the store's one path
//! for layers (`Store::ensure_layer` + `unpack_layer`), so every defence
//! of an import applies to what a build produced.

use super::layer_tar::StableTar;
use crate::image::digest::Digest;
use crate::image::store::{Publish, Store};
use crate::image::unpack::{LayerJob, unpack_layer};
use crate::image::{ImageError, Owners};
use sha2::{Digest as _, Sha256};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// Media type of the layers husk build makes (uncompressed tar).
pub const MEDIA_TAR: &str = "application/vnd.oci.image.layer.v1.tar";

/// A file being written and hashed.
pub struct Hashing {
    out: BufWriter<File>,
    hash: Sha256,
    size: u64,
}

impl Write for Hashing {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.hash.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// A layer tar on disk: its path, diff_id and size.
pub struct LayerTar {
    pub path: PathBuf,
    pub diff_id: Digest,
    pub size: u64,
}

/// The mtime every entry gets: SOURCE_DATE_EPOCH when set, else 0.
pub fn epoch() -> u64 {
    std::env::var("SOURCE_DATE_EPOCH").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// A tar writer into a new file at `path`.
pub fn create(path: &Path) -> io::Result<StableTar<Hashing>> {
    let f = std::fs::OpenOptions::new().write(true).create_new(true).open(path)?;
    Ok(StableTar::new(Hashing { out: BufWriter::new(f), hash: Sha256::new(), size: 0 }, epoch()))
}

/// A layer tar written into `file` (already open for writing: an unnamed
/// O_TMPFILE file, say, that nothing has to remove).
pub fn create_in(file: File) -> StableTar<Hashing> {
    StableTar::new(Hashing { out: BufWriter::new(file), hash: Sha256::new(), size: 0 }, epoch())
}

/// Ends the archive and names it by its content.
pub fn finish(tar: StableTar<Hashing>, path: &Path) -> io::Result<LayerTar> {
    let mut h = tar.finish()?;
    h.out.flush()?;
    h.out.get_ref().sync_all()?;
    let diff_id = Digest::parse(&format!("sha256:{}", hex::encode(h.hash.finalize())))
        .map_err(|e| io::Error::other(e.to_string()))?;
    Ok(LayerTar { path: path.to_path_buf(), diff_id, size: h.size })
}

/// Publishes the layer (unpacked as any import's). Ok(true): it was new.
pub fn publish(store: &Store, layer: &LayerTar, owners: &Owners, image: &str) -> Result<bool, ImageError> {
    let cancel = AtomicBool::new(false);
    let r = store.ensure_layer(&layer.diff_id, owners, Publish::IfMissing, |dest| {
        let blob = File::open(&layer.path)
            .map_err(|e| ImageError::Store { path: layer.path.display().to_string(), why: e.to_string() })?;
        unpack_layer(LayerJob {
            blob: Box::new(blob),
            label: layer.diff_id.clone(),
            digest: Some(layer.diff_id.clone()),
            size: layer.size,
            media_type: MEDIA_TAR.into(),
            diff_id: layer.diff_id.clone(),
            limits: crate::image::root::limits_from_env(),
            owners: *owners,
            dest,
            cancel: &cancel,
            progress: None,
            umask: None,
        })
        .map_err(|err| ImageError::Layer { image: image.to_string(), err })
    })?;
    Ok(r.is_some())
}
