//! `husk push NAME [REF]`: a stored image to a registry. Its layers are
//! written again from the store (export::serialize, uncompressed tars),
//! blobs the repository already has are skipped (HEAD), the others
//! uploaded, and the manifest is put last, so a registry never names an
//! image whose blobs it lacks. The pushed manifest's digest is what `husk
//! pull` and `docker pull` of REF then get.

use super::export::{ExportError, RemoveOnDrop, serialize};
use crate::image::oci::MEDIA_OCI_MANIFEST;
use crate::image::reference::{Reference, ReferenceError};
use crate::image::registry::push::Payload;
use crate::image::registry::{Client, ClientOptions, RegistryError, creds};
use crate::image::{ImageError, Owners, Store};

#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error("{0}: push to a tag (REGISTRY/REPO:TAG); a digest names content, it cannot be pushed to")]
    Digest(String),
    #[error("{}: {source}", path.display())]
    Io { path: std::path::PathBuf, source: std::io::Error },
}

/// What a push did.
#[derive(Debug, serde::Serialize)]
pub struct Pushed {
    pub name: String,
    pub reference: String,
    pub manifest: crate::image::digest::Digest,
    pub blobs_uploaded: usize,
    pub blobs_skipped: usize,
    pub bytes_uploaded: u64,
}

/// Pushes the stored image `name` to `target` (a registry reference with
/// a tag; `None`: `name` itself is one).
pub fn push(
    store: &Store,
    name: &str,
    target: Option<&str>,
    owners: &Owners,
    client: &ClientOptions,
) -> Result<Pushed, PushError> {
    let r = Reference::parse(target.unwrap_or(name))?;
    if r.digest.is_some() {
        return Err(PushError::Digest(r.to_string()));
    }
    let tag = r.manifest_ref();
    // Held shared for the whole push: prune (exclusive) would remove the
    // work directory under tmp/.
    let _store = store.lock_store(false)?;
    let work = store.root().join("tmp").join(format!("push-{}-{}", std::process::id(), crate::ids::new_id()));
    std::fs::create_dir(&work).map_err(|source| PushError::Io { path: work.clone(), source })?;
    let _cleanup = RemoveOnDrop(work.clone());
    let s = serialize(store, name, owners, &work)?;
    let cred = creds::lookup(&r.registry, store.root())
        .map_err(|e| RegistryError::Auth { registry: r.registry.clone(), why: e.to_string() })?;
    let client = Client::new(r.api_host(), &r.repository, cred, client)?.for_push();
    let mut out = Pushed {
        name: s.name.clone(),
        reference: format!("{}:{tag}", r.repo_name()),
        manifest: s.manifest_digest(),
        blobs_uploaded: 0,
        blobs_skipped: 0,
        bytes_uploaded: 0,
    };
    let mut seen = std::collections::BTreeSet::new();
    for l in &s.layers {
        if !seen.insert(l.digest.hex().to_string()) {
            continue;
        }
        if client.has_blob(&l.digest)? {
            out.blobs_skipped += 1;
        } else {
            client.upload_blob(&l.digest, Payload::File(&l.path))?;
            out.blobs_uploaded += 1;
            out.bytes_uploaded += l.size;
        }
    }
    let config = s.config_digest();
    if client.has_blob(&config)? {
        out.blobs_skipped += 1;
    } else {
        client.upload_blob(&config, Payload::Bytes(&s.config))?;
        out.blobs_uploaded += 1;
        out.bytes_uploaded += s.config.len() as u64;
    }
    out.manifest = client.put_manifest(&tag, MEDIA_OCI_MANIFEST, &s.manifest)?;
    Ok(out)
}
