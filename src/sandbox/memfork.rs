//! `husk fork SANDBOX --memory --count N`: new sandboxes that go on from a
//! live sandbox's processes, with their memory (a Python session's
//! variables, a loaded model), not only its files. Under gVisor only: the
//! source's supervisor saves the sandbox into one checkpoint image and
//! restores it at once (`Request::SaveMemory`; the source runs on, its
//! processes stopped for about a second), then each fork is created from
//! the source's spec with its processes restored from that image instead
//! of started: its own id, lease, cgroup and limits, its own copy of the
//! memory (a change in one fork is not seen in another or in the source).
//!
//! A gVisor sandbox that can be checkpointed keeps its writable state in
//! the image (gVisor's tmpfs: /tmp, the workdir in host mode) or on host
//! binds the forks share as the source's spec names them (as a file fork
//! does); a writable layer over the image's files is refused
//! (backend/runsc/checkpoint.rs). So no file snapshot is taken.
//!
//! The forks' supervisors all start before the first is waited for, so
//! their restores run side by side. All or nothing: if a fork fails, every
//! other one is removed. The image is removed once every fork was
//! restored from it (a fork's restore reads it whole at its start).

use super::SandboxError;
use super::lifecycle::{Meta, begin_spec, destroy, store_of};
use super::proto::{Client, Request};
use super::registry::live_record;
use super::state::{CheckpointRecord, Record};
use super::supervisor::Handover;
use crate::paths::{Paths, PathsError};
use std::collections::BTreeMap;
use std::time::Duration;

/// What a memory fork asks for beyond the source.
pub struct MemoryForkRequest<'a> {
    pub target: &'a str,
    pub count: u32,
    /// Each fork's lease (default: the source's).
    pub ttl: Option<Duration>,
    pub labels: BTreeMap<String, String>,
}

/// The forks, made and not yet handed over (dropping a handover
/// unconfirmed ends that fork), and the image they came from (removed).
pub struct MemoryForks {
    pub source: String,
    pub image: CheckpointRecord,
    pub forks: Vec<(Record, Handover)>,
}

pub fn fork_memory(
    paths: &Result<Paths, PathsError>,
    req: &MemoryForkRequest<'_>,
) -> Result<MemoryForks, SandboxError> {
    let store = store_of(paths)?;
    let source = live_record(&store, req.target)?;
    let secrets = super::exec::secrets_of(&store, &source)?;
    let tag = crate::ids::new_id();
    let c = Client::connect(&store.dir(&source.id), source.supervisor)?;
    let (reply, _) = c.call(&Request::SaveMemory { tag })?;
    let image = match (reply.ok, reply.checkpoint) {
        (true, Some(cp)) => cp,
        (_, _) => {
            let why = reply.error.unwrap_or_else(|| "saving the source's memory was refused".into());
            return Err(SandboxError::Supervisor(why));
        }
    };
    let mut spec = source.spec.clone();
    for p in &mut spec.publish {
        p.host_port = 0;
    }
    // Every fork's supervisor starts restoring before the first is waited
    // for: the restores run side by side.
    let mut starting = Vec::new();
    let mut failed = None;
    for n in 1..=req.count {
        let meta = Meta {
            name: None,
            labels: req.labels.clone(),
            ttl: req.ttl.unwrap_or(Duration::from_millis(source.ttl_ms)),
            max_lifetime: source.max_lifetime_ms.map(Duration::from_millis),
            concurrent: source.concurrent,
            ready_check: false,
            secrets: secrets.clone(),
        };
        match begin_spec(spec.clone(), meta, paths, Some(image.path.clone())) {
            Ok(s) => starting.push(s),
            Err(err) => {
                failed = Some((n, err));
                break;
            }
        }
    }
    let mut forks: Vec<(Record, Handover)> = Vec::new();
    for (i, s) in starting.into_iter().enumerate() {
        match s.wait() {
            Ok(made) => forks.push(made),
            Err(err) if failed.is_none() => failed = Some((i as u32 + 1, err)),
            Err(_) => {}
        }
    }
    if let Some((n, err)) = failed {
        for (rec, handover) in forks {
            drop(handover);
            let _ = destroy(&store, &rec.id, true);
        }
        let _ = std::fs::remove_dir_all(&image.path);
        return Err(SandboxError::Supervisor(format!(
            "fork {n} of {} from the memory of {}: {err} (the forks made besides it were removed)",
            req.count, source.id
        )));
    }
    let _ = std::fs::remove_dir_all(&image.path);
    Ok(MemoryForks { source: source.id, image, forks })
}
