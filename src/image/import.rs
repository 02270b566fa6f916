//! `husk image import`: resolve the source, unpack the layers the store
//! lacks (in parallel, one thread per layer up to the CPU count), then
//! record the image. Every thread is joined before this returns, so a
//! caller about to clone a sandbox is single-threaded again.

use super::digest::Digest;
use super::layer::{Owners, UnpackReport};
use super::progress::{Bars, State};
use super::source::{self, Resolved};
use super::store::{Check, LayerRef, LayerState, Publish, Record, Store, now_secs};
use super::unpack::{LayerJob, unpack_layer};
use super::{ImageError, Limits, normalize_name};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct ImportOptions {
    pub name: Option<String>,
    pub limits: Limits,
    pub owners: Owners,
    /// Draw a progress bar on stderr (the caller checks it is a TTY).
    pub progress: bool,
    /// What to do with layers the store already has.
    pub stored: Stored,
    /// Layers to unpack again even when they look intact (a full check by
    /// `husk image verify --repair` found them damaged).
    pub replace: Vec<Digest>,
    /// The image the source must still hold (a repair must not re-point
    /// the name to whatever the source holds now).
    pub expect_id: Option<Digest>,
}

/// How an import treats layers already in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Reuse what is present (an on-the-fly import by `husk run`, which
    /// must stay as fast as a stored name).
    Trust,
    /// Check each against its manifest (quick: no file is read) and
    /// unpack again the ones that do not match: the repair a damaged
    /// image is told to make is a re-import.
    Check,
}

#[derive(Clone, Debug, Serialize)]
pub struct LayerOutcome {
    pub diff_id: Digest,
    pub blob: Option<Digest>,
    pub size: u64,
    pub media_type: String,
    /// "extracted" now, "reused" from the store, or "replaced" (it was
    /// damaged and unpacked again).
    pub status: &'static str,
    /// Why a replaced layer was found damaged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damage: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unpack: Option<UnpackReport>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ImportReport {
    pub name: String,
    pub id: Digest,
    pub manifest: Option<Digest>,
    pub config: Digest,
    pub platform: String,
    pub source: String,
    pub layers: Vec<LayerOutcome>,
    pub extracted: usize,
    pub reused: usize,
    /// Stored layers that were damaged and unpacked again.
    pub replaced: usize,
    /// Stored manifests/configs that no longer matched their digest and
    /// were written again from the source.
    pub blobs_replaced: usize,
    pub seconds: f64,
}

/// Imports `reference` (PATH or PATH:TAG) into `store`.
pub fn import(store: &Store, reference: &str, opts: &ImportOptions) -> Result<ImportReport, ImageError> {
    let t0 = Instant::now();
    // Shared: other imports and runs go on; rm/prune wait for us, so a
    // layer we just published cannot be pruned before our record exists.
    let _store_lock = store.lock_store(false)?;
    // Builds of killed imports would otherwise stay until `prune`; a sweep
    // that fails leaves them for gc and never fails the import.
    let _ = store.sweep_tmp();
    let r = source::resolve(reference)?;
    import_locked(store, r, opts, t0)
}

/// Stores an image another module resolved (a registry pull): the same
/// layer builds, blobs and record as a file import.
pub fn import_resolved(store: &Store, r: Resolved, opts: &ImportOptions) -> Result<ImportReport, ImageError> {
    let t0 = Instant::now();
    let _store_lock = store.lock_store(false)?;
    let _ = store.sweep_tmp();
    import_locked(store, r, opts, t0)
}

fn import_locked(store: &Store, r: Resolved, opts: &ImportOptions, t0: Instant) -> Result<ImportReport, ImageError> {
    let name = match &opts.name {
        Some(n) => normalize_name(n)?,
        None => normalize_name(&r.default_name)
            .or_else(|_| normalize_name(&sanitize(&r.default_name)))
            .map_err(|e| ImageError::BadName { name: r.default_name.clone(), why: format!("{e}; pass --name") })?,
    };
    let image_id = r.manifest.as_ref().map(|m| m.0.clone()).unwrap_or_else(|| r.config_digest.clone());
    if let Some(want) = opts.expect_id.as_ref().filter(|w| **w != image_id) {
        return Err(ImageError::Source(format!(
            "{} now holds image {image_id}, not {want}; import the image you mean explicitly",
            r.source
        )));
    }

    // Each distinct missing or damaged diff_id once (an image may repeat
    // a layer).
    let mut todo: Vec<(usize, Publish)> = Vec::new();
    let mut damage: Vec<Option<String>> = vec![None; r.layers.len()];
    for (i, l) in r.layers.iter().enumerate() {
        if todo.iter().any(|&(j, _)| r.layers[j].diff_id == l.diff_id) {
            continue;
        }
        let present = store.has_layer(&l.diff_id, &opts.owners);
        if !present {
            todo.push((i, Publish::IfMissing));
        } else if opts.replace.contains(&l.diff_id) {
            damage[i] = Some("found damaged by a full check".into());
            todo.push((i, Publish::Replace));
        } else if opts.stored == Stored::Check {
            let why = match store.check_layer(&l.diff_id, &opts.owners, Check::Quick)? {
                LayerState::Damaged(f) => Some(f.summary()),
                LayerState::ManifestDamaged(why) => Some(why),
                LayerState::Missing => Some("removed while importing".into()),
                LayerState::Intact | LayerState::NoManifest => None,
            };
            if why.is_some() {
                damage[i] = why;
                todo.push((i, Publish::Replace));
            }
        }
    }
    let results = build_layers(store, &r, &todo, opts, &name)?;

    let mut blobs_replaced = 0;
    if let Some((d, bytes)) = &r.manifest {
        blobs_replaced += usize::from(store.put_blob(d, bytes)?);
    }
    blobs_replaced += usize::from(store.put_blob(&r.config_digest, &r.config_bytes)?);
    let rec = Record {
        name: name.clone(),
        manifest: r.manifest.as_ref().map(|m| m.0.clone()),
        config: r.config_digest.clone(),
        layers: r
            .layers
            .iter()
            .map(|l| LayerRef {
                diff_id: l.diff_id.clone(),
                blob: l.digest.clone(),
                size: l.size,
                media_type: l.media_type.clone(),
            })
            .collect(),
        platform: r.platform.clone(),
        source: r.source.clone(),
        pulled: r.pulled.clone(),
        imported_at: now_secs(),
    };
    let unchanged = store.find(&name).is_ok_and(|old| Record { imported_at: rec.imported_at, ..old } == rec);
    if !unchanged {
        store.write_record(&rec)?;
    }

    let mut layers = Vec::new();
    let (mut extracted, mut replaced) = (0, 0);
    for (i, l) in r.layers.iter().enumerate() {
        let unpack = todo.iter().position(|&(j, _)| j == i).and_then(|k| results[k].clone());
        let status = match (&unpack, &damage[i]) {
            (None, _) => "reused",
            (Some(_), Some(_)) => {
                replaced += 1;
                "replaced"
            }
            (Some(_), None) => {
                extracted += 1;
                "extracted"
            }
        };
        layers.push(LayerOutcome {
            diff_id: l.diff_id.clone(),
            blob: l.digest.clone(),
            size: l.size,
            media_type: l.media_type.clone(),
            status,
            damage: damage[i].clone(),
            unpack,
        });
    }
    Ok(ImportReport {
        name,
        id: image_id,
        manifest: rec.manifest,
        config: rec.config,
        platform: r.platform.clone(),
        source: r.source.clone(),
        reused: layers.len() - extracted - replaced,
        layers,
        extracted,
        replaced,
        blobs_replaced,
        seconds: crate::outcome::round3(t0.elapsed().as_secs_f64()),
    })
}

/// A default name made acceptable (directory names may hold anything).
fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._-/:@+".contains(c) { c.to_ascii_lowercase() } else { '-' })
        .collect();
    s.trim_start_matches(['/', '.', '-', ':']).to_string()
}

/// One layer's build: its report, None when another process published it.
type Built = Result<Option<UnpackReport>, ImageError>;

/// Unpacks `todo` (indexes into r.layers) in parallel. Returns, per todo
/// entry, the report (None when another process published it first).
fn build_layers(
    store: &Store,
    r: &Resolved,
    todo: &[(usize, Publish)],
    opts: &ImportOptions,
    name: &str,
) -> Result<Vec<Option<UnpackReport>>, ImageError> {
    if todo.is_empty() {
        return Ok(Vec::new());
    }
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let cancel = AtomicBool::new(false);
    // Bytes read of each layer's blob, for the bars.
    let read: Vec<Arc<AtomicU64>> = todo.iter().map(|_| Arc::new(AtomicU64::new(0))).collect();
    // umask 0 while the layers are written: creation modes are then the
    // image's own, which saves a chmod per file. Restored before return.
    let old_umask = nix::sys::stat::umask(nix::sys::stat::Mode::empty());
    let results: Mutex<Vec<Option<Built>>> = Mutex::new((0..todo.len()).map(|_| None).collect());
    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(todo.len()).max(1);
    let work = || {
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            if k >= todo.len() {
                break;
            }
            let res = if cancel.load(Ordering::Relaxed) {
                Err(ImageError::Layer { image: name.into(), err: cancelled(&r.layers[todo[k].0].diff_id) })
            } else {
                build_one(store, r, todo[k], opts, &cancel, &read[k], name)
            };
            if res.is_err() {
                cancel.store(true, Ordering::Relaxed);
            }
            results.lock().unwrap_or_else(|p| p.into_inner())[k] = Some(res);
            done.fetch_add(1, Ordering::Release);
        }
    };
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(work);
        }
        if opts.progress {
            let layers = todo
                .iter()
                .map(|&(i, _)| {
                    let l = &r.layers[i];
                    (l.digest.as_ref().unwrap_or(&l.diff_id).short().to_string(), l.size)
                })
                .collect();
            let mut bars = Bars::new(layers, if r.pulled.is_some() { "pulling" } else { "unpacking" });
            loop {
                // `done` is read first: the last draw then shows every
                // result stored before it.
                let finished = done.load(Ordering::Acquire) >= todo.len();
                let bytes: Vec<u64> = read.iter().map(|b| b.load(Ordering::Relaxed)).collect();
                let states: Vec<State> = results
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .zip(&bytes)
                    .map(|(res, &n)| match res {
                        Some(Ok(_)) => State::Done,
                        Some(Err(_)) => State::Failed,
                        None if n > 0 => State::Running,
                        None => State::Waiting,
                    })
                    .collect();
                bars.draw(&bytes, &states);
                if finished {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    });
    nix::sys::stat::umask(old_umask);
    let mut out = Vec::new();
    let mut first_err = None;
    for res in results.into_inner().unwrap_or_else(|p| p.into_inner()) {
        match res {
            Some(Ok(rep)) => out.push(rep),
            Some(Err(e)) => {
                let cancelled = matches!(&e, ImageError::Layer { err, .. } if err.is_cancelled());
                if first_err.is_none() || (!cancelled && first_err.as_ref().is_some_and(|(c, _)| *c)) {
                    first_err = Some((cancelled, e));
                }
                out.push(None);
            }
            None => out.push(None),
        }
    }
    match first_err {
        Some((_, e)) => Err(e),
        None => Ok(out),
    }
}

fn cancelled(d: &Digest) -> super::unpack::LayerError {
    super::unpack::LayerError::Unpack { digest: d.clone(), err: super::layer::UnpackError::Cancelled }
}

fn build_one(
    store: &Store,
    r: &Resolved,
    (i, publish): (usize, Publish),
    opts: &ImportOptions,
    cancel: &AtomicBool,
    read: &Arc<AtomicU64>,
    name: &str,
) -> Result<Option<UnpackReport>, ImageError> {
    let l = &r.layers[i];
    store.ensure_layer(&l.diff_id, &opts.owners, publish, |dest| {
        let (blob, _) = r.blobs.open(&l.path)?;
        unpack_layer(LayerJob {
            blob,
            label: l.digest.clone().unwrap_or_else(|| l.diff_id.clone()),
            digest: l.digest.clone(),
            size: l.size,
            media_type: l.media_type.clone(),
            diff_id: l.diff_id.clone(),
            limits: opts.limits,
            owners: opts.owners,
            dest,
            cancel,
            progress: Some(read.clone()),
            umask: Some(0),
        })
        .map_err(|err| ImageError::Layer { image: name.to_string(), err })
    })
}
