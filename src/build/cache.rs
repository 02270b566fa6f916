//! The build cache: `<store root>/build-cache/<key>.json` maps a RUN
//! step's key to the layer it made. The key is the sha256 of the parent's
//! layer chain, the command, its environment (ENV and build args,
//! resolved), user, workdir and the store's id mapping. COPY and ADD need
//! no entry: their layer is named by its content, so the same files give
//! the same layer, and a changed file a new one (and a miss for every
//! step after it, whose parent chain changed).
//!
//! An entry names a layer; it is only a hit while the store still has the
//! layer (`husk image prune` removes layers no image refers to, and the
//! entries pointing at them with them: `image::store`).

use crate::image::digest::Digest;
use crate::image::{ImageError, Owners};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

pub use crate::image::store::BUILD_CACHE as DIR;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Entry {
    pub diff_id: Digest,
    /// Size of the layer's tar.
    pub size: u64,
}

pub struct Cache {
    dir: PathBuf,
}

pub fn run_key(
    parent: &[Digest],
    argv: &[String],
    env: &[(String, String)],
    user: &str,
    workdir: &str,
    owners: &Owners,
) -> String {
    let doc = serde_json::json!({
        "v": 1,
        "parent": parent,
        "run": argv,
        "env": env,
        "user": user,
        "workdir": workdir,
        "ids": owners.key_suffix(),
    });
    Digest::of(&serde_json::to_vec(&doc).unwrap_or_default()).hex().to_string()
}

impl Cache {
    pub fn open(root: &Path) -> Result<Cache, ImageError> {
        let dir = root.join(DIR);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(ImageError::Store { path: dir.display().to_string(), why: e.to_string() }),
        }
        Ok(Cache { dir })
    }

    pub fn get(&self, key: &str) -> Option<Entry> {
        let bytes = std::fs::read(self.dir.join(format!("{key}.json"))).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub fn put(&self, key: &str, e: &Entry) -> std::io::Result<()> {
        crate::files::write_durable(&self.dir.join(format!("{key}.json")), &serde_json::to_vec(e).unwrap_or_default())
    }
}
