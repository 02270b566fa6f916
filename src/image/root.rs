//! An image as a sandbox root: resolve the reference (a stored name, or a
//! path imported on the fly and cached), lease its layers, and hand the
//! planner the layer directories, a view of the merged tree and the
//! image's run defaults. `root_input` gives the other roots (the host, a
//! rootfs directory) the same shape.

use super::import::{ImportOptions, Stored, import};
use super::oci::{self, ImageConfig};
use super::pull::{PullOptions, pull};
use super::reference::Reference;
use super::registry::ClientOptions;
use super::source::split_ref;
use super::store::Lease;
use super::view::LayeredView;
use super::{ImageError, Limits, Owners, Store};
use crate::host::HostFacts;
use crate::paths::{Paths, PathsError};
use crate::plan::{ImageDefaults, RootInput};
use crate::rootfs::RootSource;
use crate::spec::{IdRange, PullPolicy, RegistrySpec, RootSpec, Spec};
use crate::userns::{IdMap, IdMode};
use std::path::Path;

/// How layers are owned for runs with this id range (the same choice as
/// the sandbox's id map: shifted into the range as root, the invoking
/// user rootless).
pub fn owners_for(host: &HostFacts, id_range: Option<IdRange>) -> Owners {
    match IdMap::plan(host, id_range, 0, 0).map(|m| m.mode) {
        Ok(IdMode::Privileged { uid_range, gid_range }) => Owners::Shift { uid: uid_range, gid: gid_range },
        _ => Owners::Invoker,
    }
}

/// Limits for on-the-fly imports (HUSK_MAX_LAYER_SIZE may raise or lower
/// the layer bound, as `husk image import --max-layer-size` does).
pub fn limits_from_env() -> Limits {
    let mut l = Limits::default();
    if let Some(n) = std::env::var("HUSK_MAX_LAYER_SIZE").ok().and_then(|v| crate::units::parse_size(&v).ok()) {
        l.max_layer_bytes = n;
    }
    l
}

/// Whether `reference` means a path to import rather than a stored name:
/// it exists on disk and either looks like a path or names no stored image.
fn is_path(store: &Store, reference: &str) -> bool {
    // No stored name starts with / or . (image::normalize_name), so such a
    // reference is a path even when it is missing: the import then says
    // that it does not exist instead of calling it a bad name.
    if reference.starts_with('/') || reference.starts_with('.') {
        return true;
    }
    if split_ref(reference).is_none() {
        return false;
    }
    let looks_like_path = reference.starts_with('/') || reference.starts_with('.') || reference.contains('/');
    looks_like_path || store.find(reference).is_err()
}

/// The stored name a (non-path) `reference` means, pulling it as `policy`
/// says. A stored name (what `husk image import --name` gave) wins over a
/// registry reference; else the reference is made canonical
/// (`python` -> `docker.io/library/python:latest`) and looked up under
/// that name, or, pinned by digest, as any stored pull of that manifest.
pub fn resolve_name(
    store: &Store,
    reference: &str,
    policy: PullPolicy,
    remote: &RegistrySpec,
    owners: Owners,
    progress: bool,
) -> Result<String, ImageError> {
    if policy != PullPolicy::Always
        && let Ok(rec) = store.find(reference)
    {
        return Ok(rec.name);
    }
    let r = match Reference::parse(reference) {
        Ok(r) => r,
        Err(e) if policy == PullPolicy::Always => return Err(e.into()),
        Err(_) => return Err(ImageError::NotFound(super::normalize_name(reference)?)),
    };
    if policy != PullPolicy::Always {
        if let Ok(rec) = store.find(&r.store_name()) {
            return Ok(rec.name);
        }
        if let Some(d) = &r.digest {
            let same = |rec: &super::store::Record| {
                rec.manifest.as_ref() == Some(d)
                    && rec.pulled.as_ref().is_some_and(|p| p.registry == r.registry && p.repository == r.repository)
            };
            if let Some(rec) = store.list()?.records.into_iter().find(same) {
                return Ok(rec.name);
            }
        }
        if policy == PullPolicy::Never {
            return Err(ImageError::NotPulled(reference.to_string()));
        }
    }
    let opts = PullOptions {
        platform: match &remote.platform {
            Some(p) => super::pull::parse_platform(p).map_err(|e| ImageError::Platform(e.to_string()))?,
            None => oci::host_platform(),
        },
        client: ClientOptions::new(&remote.insecure, &remote.ca_files, &remote.mirrors)?,
        progress: None,
        import: on_the_fly(owners, progress),
    };
    match pull(store, &r, &opts) {
        Ok(rep) => Ok(rep.name),
        // A name the user may have meant as a local image: say both.
        Err(err) if policy == PullPolicy::Missing => {
            let name = super::normalize_name(reference).unwrap_or_else(|_| reference.to_string());
            Err(ImageError::PullFailed { name, canonical: r.to_string(), err: Box::new(err) })
        }
        Err(err) => Err(err),
    }
}

/// How `--image` imports or pulls on the fly: under the stored name the
/// source gives, with the environment's limits, trusting stored layers
/// (`husk image verify` checks them; a run re-checks only on failure).
fn on_the_fly(owners: Owners, progress: bool) -> ImportOptions {
    ImportOptions {
        name: None,
        limits: limits_from_env(),
        owners,
        progress,
        stored: Stored::Trust,
        replace: Vec::new(),
        expect_id: None,
    }
}

/// The stored name `reference` (a path, a stored name or a registry
/// reference) means, importing or pulling it as needed.
pub fn stored_name(
    store: &Store,
    reference: &str,
    policy: PullPolicy,
    remote: &RegistrySpec,
    owners: Owners,
    progress: bool,
) -> Result<String, ImageError> {
    Ok(if is_path(store, reference) {
        let opts = on_the_fly(owners, progress);
        import(store, reference, &opts)?.name
    } else {
        resolve_name(store, reference, policy, remote, owners, progress)?
    })
}

/// Resolves `reference` for a run. The lease must live as long as the
/// sandbox: it keeps `husk image rm` and `prune` off these layers.
pub fn root_for_run(
    store_root: &Path,
    reference: &str,
    policy: PullPolicy,
    remote: &RegistrySpec,
    owners: Owners,
    progress: bool,
) -> Result<(RootInput<'static>, Lease), ImageError> {
    let store = Store::open(store_root)?;
    let name = stored_name(&store, reference, policy, remote, owners, progress)?;
    let (rec, dirs, lease) = store.lease(&name, &owners)?;
    if dirs.is_empty() {
        return Err(ImageError::Format(format!("image {} has no layers: nothing to run", rec.name)));
    }
    let config: ImageConfig = oci::parse(&format!("config {}", rec.config), &store.get_blob(&rec.config)?)?;
    let image = super::config::defaults(&config)?;
    let view = LayeredView::open(&dirs).map_err(|e| ImageError::Store {
        path: store_root.display().to_string(),
        why: format!("opening layers: {e}"),
    })?;
    let passwd = view.read_file("/etc/passwd");
    let group = view.read_file("/etc/group");
    let source = RootSource::Layers { dirs, view: Box::new(view), userxattr: true, label: rec.name.clone() };
    Ok((RootInput { source, image, passwd, group }, lease))
}

/// Resolves the root source for the spec (host, rootfs; images via the
/// store). The lease, when there is one, must outlive the sandbox.
pub fn root_input(
    spec: &Spec,
    host: &HostFacts,
    paths: &Result<Paths, PathsError>,
) -> Result<(RootInput<'static>, Option<Lease>), String> {
    match &spec.root {
        RootSpec::Host => Ok((
            RootInput {
                source: RootSource::Host,
                image: ImageDefaults::default(),
                passwd: std::fs::read_to_string("/etc/passwd").ok(),
                group: std::fs::read_to_string("/etc/group").ok(),
            },
            None,
        )),
        RootSpec::Rootfs(dir) => {
            let dir = std::fs::canonicalize(dir)
                .map_err(|e| format!("--rootfs {}: {e}; give an existing directory", dir.display()))?;
            let passwd = crate::rootfs::resolve::read_in_root(&dir, "etc/passwd");
            let group = crate::rootfs::resolve::read_in_root(&dir, "etc/group");
            Ok((RootInput { source: RootSource::Dir(dir), image: ImageDefaults::default(), passwd, group }, None))
        }
        RootSpec::Image(r) => {
            let paths = paths.as_ref().map_err(|e| format!("--image {r}: {e}"))?;
            let owners = owners_for(host, spec.id_range);
            let progress = nix::unistd::isatty(std::io::stderr()).unwrap_or(false);
            let (input, lease) = root_for_run(&paths.root, r, spec.pull, &spec.registry, owners, progress)
                .map_err(|e| format!("--image {r}: {e}"))?;
            Ok((input, Some(lease)))
        }
    }
}
