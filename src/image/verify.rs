//! `husk image verify [NAME] [--repair]`: every blob an image names is
//! hashed again against its digest, and every layer is checked against
//! the file manifest recorded when it was unpacked (each file hashed).
//! A repair imports the image again from the source it was imported
//! from: the blobs there are verified on the way in, damaged stored blobs
//! are rewritten and damaged layers are unpacked again and exchanged for
//! the old ones. When that source is gone or itself damaged, the report
//! says the image must be imported again from a good copy.

use super::digest::Digest;
use super::import::{ImportOptions, Stored, import};
use super::manifest::Damage;
use super::store::{Check, LayerState, Record, Store};
use super::{ImageError, Owners};
use serde::Serialize;
use std::collections::HashMap;

#[derive(Clone, Debug, Serialize)]
pub struct BlobCheck {
    pub digest: Digest,
    /// "manifest", "config" or "layer".
    pub role: &'static str,
    /// "ok", "damaged", "missing" (manifests and configs must be stored;
    /// a layer's blob is only kept by some sources, so a missing one is
    /// "absent" and not damage).
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LayerCheck {
    pub diff_id: Digest,
    /// "ok", "damaged", "missing", "unverifiable" (no manifest: unpacked
    /// by an older husk; a repair unpacks it again with one).
    pub status: &'static str,
    /// The damaged entries (at most manifest::MAX_SHOWN) and their count.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub damaged: Vec<Damage>,
    pub damaged_count: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ImageCheck {
    pub name: String,
    pub id: Digest,
    pub source: String,
    /// "ok", "damaged" (not repaired), "repaired", or "unrepairable"
    /// (a repair was tried and failed: see `repair_error`).
    pub status: &'static str,
    pub blobs: Vec<BlobCheck>,
    pub layers: Vec<LayerCheck>,
    /// The command that repairs it, when it is damaged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair_error: Option<String>,
}

impl ImageCheck {
    fn needs_repair(&self) -> bool {
        self.blobs.iter().any(|b| b.status == "damaged" || b.status == "missing")
            || self.layers.iter().any(|l| l.status != "ok")
    }
}

/// Checks `rec` (blobs and layers, every file hashed). `seen` caches
/// layer results across images that share a layer.
pub fn check_image(
    store: &Store,
    rec: &Record,
    owners: &Owners,
    seen: &mut HashMap<Digest, LayerCheck>,
) -> Result<ImageCheck, ImageError> {
    let mut blobs = Vec::new();
    if let Some(m) = &rec.manifest {
        blobs.push(blob_check(store, m, "manifest"));
    }
    blobs.push(blob_check(store, &rec.config, "config"));
    for l in &rec.layers {
        if let Some(b) = &l.blob {
            let c = blob_check(store, b, "layer");
            if c.status != "missing" {
                blobs.push(c);
            }
        }
    }
    let mut layers = Vec::new();
    for l in &rec.layers {
        if let Some(c) = seen.get(&l.diff_id) {
            layers.push(c.clone());
            continue;
        }
        let c = layer_check(&l.diff_id, store.check_layer(&l.diff_id, owners, Check::Full)?);
        seen.insert(l.diff_id.clone(), c.clone());
        layers.push(c);
    }
    let mut out = ImageCheck {
        name: rec.name.clone(),
        id: rec.id().clone(),
        source: rec.source.clone(),
        status: "ok",
        blobs,
        layers,
        repair: None,
        repair_error: None,
    };
    if out.needs_repair() {
        out.status = "damaged";
        out.repair = Some(format!("husk image verify {} --repair", rec.name));
    }
    Ok(out)
}

fn layer_check(diff_id: &Digest, state: LayerState) -> LayerCheck {
    let (status, why, damaged, damaged_count) = match state {
        LayerState::Intact => ("ok", None, Vec::new(), 0),
        LayerState::Missing => ("missing", Some("the unpacked layer directory is missing".into()), Vec::new(), 0),
        LayerState::NoManifest => (
            "unverifiable",
            Some("no file manifest (unpacked by an older husk); --repair unpacks it again with one".into()),
            Vec::new(),
            0,
        ),
        LayerState::ManifestDamaged(why) => ("damaged", Some(why), Vec::new(), 0),
        LayerState::Damaged(f) => ("damaged", Some(f.summary()), f.damaged, f.count),
    };
    LayerCheck { diff_id: diff_id.clone(), status, damaged, damaged_count, why }
}

fn blob_check(store: &Store, digest: &Digest, role: &'static str) -> BlobCheck {
    let path = store.root().join("blobs").join(digest.hex());
    let done = |status, why: Option<String>| BlobCheck { digest: digest.clone(), role, status, why };
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return done("missing", Some("not in the store".into())),
        Err(e) => return done("damaged", Some(format!("{}: {e}", path.display()))),
    };
    let found = match super::digest::sha256_hex(file) {
        Ok(hex) => hex,
        Err(e) => return done("damaged", Some(format!("reading {}: {e}", path.display()))),
    };
    if found == digest.hex() {
        done("ok", None)
    } else {
        done("damaged", Some(format!("content hashes to sha256:{found}")))
    }
}

/// Repairs `check` by importing the image again from its source: stored
/// blobs that do not match are rewritten, the layers found damaged (and
/// any the quick check finds) are unpacked again and exchanged. The source
/// must still hold the same image.
pub fn repair(store: &Store, rec: &Record, owners: Owners, check: &mut ImageCheck) {
    let replace: Vec<Digest> = check.layers.iter().filter(|l| l.status != "ok").map(|l| l.diff_id.clone()).collect();
    let opts = ImportOptions {
        name: Some(rec.name.clone()),
        limits: super::root::limits_from_env(),
        owners,
        progress: false,
        stored: Stored::Check,
        replace,
        expect_id: Some(rec.id().clone()),
    };
    let result = match rec.source.strip_prefix(super::store::PULLED_PREFIX) {
        // A pulled image's source is its reference pinned by digest.
        Some(reference) => super::reference::Reference::parse(reference).map_err(Into::into).and_then(|r| {
            let popts = super::pull::PullOptions {
                platform: super::oci::host_platform(),
                client: super::registry::ClientOptions::from_env()?,
                progress: None,
                import: opts,
            };
            super::pull::pull(store, &r, &popts)
        }),
        None => import(store, &rec.source, &opts),
    };
    match result {
        Ok(_) => {
            check.status = "repaired";
            check.repair = None;
        }
        Err(e) => {
            check.status = "unrepairable";
            check.repair = Some(match rec.source.strip_prefix(super::store::PULLED_PREFIX) {
                Some(_) => format!("fetch it again: `{}`", super::store::refetch_hint(&rec.source, &rec.name)),
                None => format!("import it again from a good copy: `husk image import PATH --name {}`", rec.name),
            });
            check.repair_error = Some(format!("re-importing from {}: {e}", rec.source));
        }
    }
}
