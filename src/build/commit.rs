//! `husk commit SANDBOX NAME[:TAG]`: a live sandbox's filesystem changes
//! (snapshot.rs says precisely which) as one new layer on its image, with
//! the sandbox's environment, workdir and user as the image's config. The
//! sandbox's cgroup is frozen while its root is read, so the layer is the
//! filesystem at one instant: no process of it writes meanwhile (a write
//! in flight when the freeze lands completes before, or after the thaw).
//! The sandbox's supervisor freezes and thaws on our behalf
//! (`Request::Freeze`): killed mid-read, we leave nothing frozen.

use super::config::State;
use super::diff::Unshift;
use super::export::RemoveOnDrop;
use super::layer::{self, Hashing, LayerTar};
use super::layer_tar::StableTar;
use super::snapshot::{SnapshotError, SnapshotReport, write_changes};
use crate::host::HostFacts;
use crate::image::digest::Digest;
use crate::image::reference::Reference;
use crate::image::root::owners_for;
use crate::image::store::{COMMITTED_PREFIX, LayerRef, Record, now_secs};
use crate::image::view::LayeredView;
use crate::image::{ImageError, Owners, Store, normalize_name};
use crate::sandbox::proto::{Client, Request};
use crate::sandbox::registry::live_record;
use crate::sandbox::state::{Record as Sandbox, Store as Sandboxes};
use crate::spec::RootSpec;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error("sandbox {id}: {why}")]
    Unsupported { id: String, why: String },
    #[error("sandbox {id}: {why}")]
    Freeze { id: String, why: String },
    #[error("sandbox {id}: {err}")]
    Snapshot { id: String, err: SnapshotError },
    /// Creating or ending the layer tar in the store's tmp failed.
    #[error("writing the layer into the image store ({}): {source}", path.display())]
    Store { path: std::path::PathBuf, source: std::io::Error },
    #[error("{}: {source}", path.display())]
    Io { path: std::path::PathBuf, source: std::io::Error },
}

/// What a commit stored.
#[derive(Debug, serde::Serialize)]
pub struct Committed {
    pub name: String,
    pub id: Digest,
    pub sandbox: String,
    pub base: String,
    pub layer: Digest,
    pub changes: SnapshotReport,
}

/// The stored image a sandbox runs on (its `--image` reference as given,
/// else the reference's canonical stored name).
fn image_of(store: &Store, sbx: &Sandbox) -> Result<Record, CommitError> {
    let RootSpec::Image(reference) = &sbx.spec.root else {
        return Err(CommitError::Unsupported {
            id: sbx.id.clone(),
            why: "it does not run on an image (--image); only an image's sandbox can be committed".into(),
        });
    };
    match store.find(reference) {
        Ok(r) => Ok(r),
        Err(first) => match Reference::parse(reference).map(|r| r.store_name()) {
            Ok(name) => store.find(&name).map_err(|_| first.into()),
            Err(_) => Err(first.into()),
        },
    }
}

/// How long the supervisor keeps the sandbox frozen for one read at most;
/// past it the sandbox runs again and the read fails as torn.
const FREEZE_FOR_MS: u64 = 5 * 60 * 1000;

/// Has the sandbox's supervisor freeze it; the connection is the hold
/// (its close, however we end, thaws).
fn hold_frozen(sandboxes: &Sandboxes, sbx: &Sandbox) -> Result<Client, CommitError> {
    let client = Client::connect(&sandboxes.dir(&sbx.id), sbx.supervisor)?;
    let (reply, _) = client.call(&Request::Freeze { for_ms: FREEZE_FOR_MS })?;
    if !reply.ok {
        let why = reply.error.unwrap_or_else(|| "its supervisor refused to freeze it".into());
        return Err(CommitError::Freeze { id: sbx.id.clone(), why });
    }
    Ok(client)
}

/// Lets go of the freeze; an error if it lapsed while we read.
fn thaw(client: Client, id: &str) -> Result<(), CommitError> {
    let (reply, _) = client.call(&Request::Thaw)?;
    if !reply.ok {
        let why = reply.error.unwrap_or_else(|| "the freeze lapsed".into());
        return Err(CommitError::Freeze { id: id.to_string(), why });
    }
    Ok(())
}

/// Where a commit writes its layer tar.
pub struct LayerFile {
    tar: StableTar<Hashing>,
    /// The path `layer::publish` reads it back from.
    read_back: PathBuf,
    /// What an error names (the store's tmp/, or the named file).
    shown: PathBuf,
}

/// The layer tar's file: unnamed (O_TMPFILE) in the store's tmp/, so a
/// commit killed mid-way leaves nothing to sweep; its path for reading
/// back is /proc/self/fd/N of the kept fd. A filesystem without O_TMPFILE
/// gets the named file `out` (removed by the caller, or by `husk gc` once
/// its writer is gone: `sweep_commit_tars`).
/// The second value keeps an unnamed file alive (until the layer is published).
fn layer_file(out: &Path) -> Result<(LayerFile, Option<OwnedFd>), CommitError> {
    let store_err = |source| CommitError::Store { path: out.to_path_buf(), source };
    let dir = out.parent().unwrap_or(out);
    let tmp = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir);
    match tmp {
        Ok(file) => {
            let kept = OwnedFd::from(file.try_clone().map_err(store_err)?);
            let read_back = PathBuf::from(format!("/proc/self/fd/{}", kept.as_raw_fd()));
            Ok((LayerFile { tar: layer::create_in(file), read_back, shown: dir.to_path_buf() }, Some(kept)))
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)) => {
            let tar = layer::create(out).map_err(store_err)?;
            Ok((LayerFile { tar, read_back: out.to_path_buf(), shown: out.to_path_buf() }, None))
        }
        Err(e) => Err(store_err(e)),
    }
}

/// Reads the frozen sandbox `target`'s changes into the layer tar `file`;
/// the base image's record and the owners its layers were unpacked for.
pub fn snapshot(
    store: &Store,
    sandboxes: &Sandboxes,
    target: &str,
    file: LayerFile,
) -> Result<(Sandbox, Record, Owners, LayerTar, SnapshotReport), CommitError> {
    let sbx = live_record(sandboxes, target)?;
    let unsupported = |why: &str| CommitError::Unsupported { id: sbx.id.clone(), why: why.into() };
    if sbx.backend != "native" {
        return Err(unsupported("only native sandboxes can be read (runsc keeps its root inside gVisor)"));
    }
    let base = image_of(store, &sbx)?;
    let owners = owners_for(&HostFacts::probe(), sbx.spec.id_range);
    let (_, dirs, _lease) = store.lease(&base.name, &owners)?;
    let view = LayeredView::open(&dirs).map_err(|source| CommitError::Io { path: dirs[0].clone(), source })?;
    let init = sbx.init.ok_or_else(|| unsupported("its init is not running"))?;
    if sbx.cgroup.is_none() {
        return Err(unsupported(
            "it has no cgroup (HUSK_NO_CGROUP / rootless), so it cannot be frozen for a consistent read",
        ));
    }
    let frozen = hold_frozen(sandboxes, &sbx)?;
    // After the freeze: the pid is still the sandbox's init (not reused).
    if !init.alive() {
        return Err(unsupported("its init ended"));
    }
    let root = std::path::PathBuf::from(format!("/proc/{}/root", init.pid));
    let info = format!("/proc/{}/mountinfo", init.pid);
    let mounts = crate::files::read_text(&info).map_err(|source| CommitError::Io { path: info.into(), source })?;
    let mounts = super::snapshot::mount_points(&mounts);
    let LayerFile { mut tar, read_back, shown } = file;
    let store_err = |source| CommitError::Store { path: shown.clone(), source };
    let report =
        write_changes(&root, &sbx.workdir, mounts, &view, Unshift::new(owners), &mut tar).map_err(|err| match err {
            SnapshotError::Write { source } => store_err(source),
            err => CommitError::Snapshot { id: sbx.id.clone(), err },
        })?;
    thaw(frozen, &sbx.id)?;
    let t = layer::finish(tar, &read_back).map_err(store_err)?;
    Ok((sbx, base, owners, t, report))
}

/// `husk commit SANDBOX NAME[:TAG]`; `how` names the command in the
/// image's history ("commit", "fork").
pub fn commit(
    store: &Store,
    sandboxes: &Sandboxes,
    target: &str,
    name: &str,
    how: &str,
) -> Result<Committed, CommitError> {
    let name = normalize_name(name)?;
    let _lock = store.lock_store(false)?;
    let out = store.root().join("tmp").join(format!("commit-{}-{}.tar", std::process::id(), crate::ids::new_id()));
    let _cleanup = RemoveOnDrop(out.clone());
    let (file, _unnamed) = layer_file(&out)?;
    let (sbx, base, owners, tar, changes) = snapshot(store, sandboxes, target, file)?;
    layer::publish(store, &tar, &owners, &name)?;
    let config = store.get_blob(&base.config)?;
    let mut state = State::from_image(&config, base.layers.clone())
        .map_err(|e| ImageError::Config(format!("image {}: {e}", base.name)))?;
    state.layers.push(LayerRef {
        diff_id: tar.diff_id.clone(),
        blob: Some(tar.diff_id.clone()),
        size: tar.size,
        media_type: layer::MEDIA_TAR.into(),
    });
    // The sandbox's environment as it ran: the image's, then its own.
    for (k, v) in &sbx.spec.env {
        state.set_env(k, v);
    }
    state.workdir = sbx.workdir.clone();
    if let Some(u) = &sbx.spec.user {
        state.user = u.clone();
    }
    state.add_history(&format!("husk {how} {}", sbx.id), false);
    let config = state.config_json();
    let config_digest = Digest::of(&config);
    let manifest = state.manifest_json(&config);
    let id = Digest::of(&manifest);
    store.put_blob(&config_digest, &config)?;
    store.put_blob(&id, &manifest)?;
    let rec = Record {
        name: name.clone(),
        manifest: Some(id.clone()),
        config: config_digest,
        platform: base.platform.clone(),
        source: format!("{COMMITTED_PREFIX}{}", sbx.id),
        pulled: None,
        layers: state.layers.clone(),
        imported_at: now_secs(),
    };
    store.write_record(&rec)?;
    Ok(Committed { name, id, sandbox: sbx.id, base: base.name, layer: tar.diff_id, changes })
}
