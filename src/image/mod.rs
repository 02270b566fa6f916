//! OCI images: import (OCI layout, oci-archive, `docker save`), a
//! content-addressed store of unpacked layers shared between images, and
//! the read-only overlay root a sandbox runs on.
//!
//! ```text
//! source::resolve     PATH[:TAG] -> manifest, config, layer blobs (each verified)
//! pull::pull          registry REF -> the same, blobs streamed from the registry
//! import::import      layers unpacked in parallel (unpack -> layer), published by rename
//! store::Store        records, layers, locks, ls / inspect / rm / prune
//! manifest            per-layer file manifests (recorded at unpack, checked later)
//! verify              `husk image verify [--repair]`
//! view::LayeredView   the merged tree, for mount placement and /etc/passwd
//! config              image config -> run defaults (every path hostile)
//! ```

pub mod config;
pub mod digest;
pub mod fsutil;
pub mod import;
pub mod layer;
pub mod manifest;
pub mod oci;
pub mod progress;
pub mod pull;
pub mod reference;
pub mod registry;
pub mod root;
pub mod source;
pub mod store;
pub mod tar;
pub mod unpack;
pub mod verify;
pub mod view;
pub mod whiteout;

pub use layer::Owners;
pub use store::Store;

/// Bound on manifests, configs and indexes.
pub const MAX_JSON: u64 = 4 << 20;

/// Bounds on one layer's content (decompression bombs, inode floods,
/// pathological names). Each crossing is a clear error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Uncompressed bytes of one layer's tar stream.
    pub max_layer_bytes: u64,
    /// Bound on uncompressed/compressed size (0: none), applied above 1 GiB:
    /// real layers stay far below it, a bomb (about 1000:1 for gzip) is
    /// stopped within seconds even under a generous `max_layer_bytes`.
    pub max_ratio: u64,
    pub max_entries: u64,
    pub max_path: usize,
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_layer_bytes: 16 << 30, max_ratio: 250, max_entries: 1_000_000, max_path: 4096, max_depth: 256 }
    }
}

/// Below this, the ratio bound does not apply (small layers of zeros are
/// common and harmless).
pub const RATIO_FLOOR: u64 = 1 << 30;

impl Limits {
    /// The bound on one layer's uncompressed stream, given its blob size.
    pub fn layer_bound(&self, compressed: u64) -> u64 {
        if self.max_ratio == 0 {
            return self.max_layer_bytes;
        }
        self.max_layer_bytes.min(compressed.saturating_mul(self.max_ratio).max(RATIO_FLOOR))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{0}")]
    Source(String),
    #[error("{0}")]
    Format(String),
    #[error("{0}")]
    Platform(String),
    #[error("{image}: {err}")]
    Layer { image: String, err: unpack::LayerError },
    #[error("store {path}: {why}")]
    Store { path: String, why: String },
    #[error("no image named {0:?} in the store; `husk image ls` lists them, `husk image import PATH` adds one")]
    NotFound(String),
    #[error("image {0} is in use by a running sandbox; try again when it has ended")]
    InUse(String),
    #[error("image {name}: layer {diff_id} is missing from the store{hint}")]
    MissingLayer { name: String, diff_id: String, hint: String },
    #[error("invalid image name {name:?}: {why}")]
    BadName { name: String, why: String },
    #[error("image config: {0}")]
    Config(String),
    #[error(transparent)]
    Registry(#[from] registry::RegistryError),
    #[error(transparent)]
    Mirror(#[from] registry::mirror::MirrorError),
    #[error(transparent)]
    Reference(#[from] reference::ReferenceError),
    #[error(
        "image {0} is not in the store and --pull never forbids fetching it; `husk pull {0}` fetches it, `husk image ls` lists what is stored"
    )]
    NotPulled(String),
    #[error("no image named {name:?} in the store (`husk image ls` lists them), and pulling {canonical} failed: {err}")]
    PullFailed { name: String, canonical: String, err: Box<ImageError> },
    #[error(transparent)]
    Paths(#[from] crate::paths::PathsError),
    #[error(transparent)]
    Json(#[from] oci::BadJson),
}

/// Normalizes `NAME[:TAG]` (`:latest` when no tag is given). Names become
/// store keys and appear in tables, so the alphabet is small.
pub fn normalize_name(name: &str) -> Result<String, ImageError> {
    let bad = |why: &str| ImageError::BadName { name: digest::truncate(name, 80), why: why.into() };
    if name.is_empty() || name.len() > 255 {
        return Err(bad("must be 1-255 characters"));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-/:@+".contains(&b)) {
        return Err(bad("use letters, digits and . _ - / : @ +"));
    }
    if name.starts_with(['/', '.', '-', ':']) || name.contains("..") || name.contains("//") {
        return Err(bad("must not start with / . - : nor contain .. or //"));
    }
    // Docker Hub's spellings of one name are one store name (Docker's
    // familiar form: `docker.io/library/busybox` -> `busybox`).
    let name = reference::familiar(name);
    let last = name.rsplit('/').next().unwrap_or(&name);
    Ok(if last.contains(':') || last.contains('@') { name.to_string() } else { format!("{name}:latest") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_get_a_default_tag_and_bad_ones_are_refused() {
        assert_eq!(normalize_name("python").unwrap(), "python:latest");
        assert_eq!(normalize_name("python:3.11").unwrap(), "python:3.11");
        assert_eq!(normalize_name("localhost:5000/x").unwrap(), "localhost:5000/x:latest");
        assert!(normalize_name("../etc").is_err());
        assert!(normalize_name("a b").is_err());
        assert!(normalize_name("/abs").is_err());
        assert!(normalize_name(&"x".repeat(300)).is_err());
    }
}
