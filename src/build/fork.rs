//! Fork and commit as library calls (the CLI's `husk fork`, `husk commit`
//! and `husk create --from-snapshot`, `husk serve`'s fork and commit
//! routes and `husk mcp`'s tools call these; none prints).
//!
//! A fork starts new sandboxes from a live sandbox's current filesystem
//! (not its processes). The source's changes are read once, with its cgroup
//! frozen, into one layer on its image (what a commit stores, commit.rs),
//! kept as the image `snapshot/<id>:<tag>`; every new sandbox runs on that
//! image. So a fork costs the changed data once (the layer tar and its
//! unpacked copy in the store), however many sandboxes share it, and
//! nothing of the image below.
//!
//! It lives here, above `sandbox/`, because it is a commit (build/) plus
//! creates (sandbox/): the layering forbids sandbox/ to name build/.

use super::commit::{CommitError, Committed, commit as store_commit};
use crate::image::Store as Images;
use crate::outcome::ErrorReport;
use crate::paths::{Paths, PathsError};
use crate::sandbox::lifecycle::{Meta, create_spec, destroy, store_of};
use crate::sandbox::registry::live_record;
use crate::sandbox::snapshot_images::{Pending, image_name};
use crate::sandbox::state::{self, Record};
use crate::sandbox::{SandboxError, supervisor::Handover};
use crate::spec::{PullPolicy, RootSpec};
use crate::step::Phase;
use std::collections::BTreeMap;
use std::time::Duration;

/// The most forks one call makes (the CLI's `--count` range).
pub const MAX_FORKS: u32 = 1000;

/// What to fork and how the forks differ from their source.
#[derive(Clone, Debug, Default)]
pub struct ForkRequest {
    /// The live source sandbox: id, name or id prefix.
    pub source: String,
    /// How many sandboxes start from the one snapshot (1..=MAX_FORKS).
    pub count: u32,
    /// `KEY=VALUE` labels for every fork; the source's are not copied.
    pub labels: Vec<String>,
    /// Each fork's lease (default: the source's).
    pub ttl: Option<Duration>,
}

/// What to commit: a live sandbox's changes as the image `name`.
#[derive(Clone, Debug)]
pub struct CommitRequest {
    pub sandbox: String,
    pub name: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    #[error("{0}")]
    Paths(String),
    #[error(transparent)]
    Image(#[from] crate::image::ImageError),
    #[error(transparent)]
    Sandbox(Box<SandboxError>),
    #[error("snapshot of sandbox {source_id}: {err}")]
    Snapshot { source_id: String, err: Box<CommitError> },
    #[error("fork {n} of {count} from {snapshot}: {err} (the forks made before it were removed)")]
    Create { n: u32, count: u32, snapshot: String, err: Box<SandboxError> },
}

impl From<SandboxError> for ForkError {
    fn from(e: SandboxError) -> Self {
        ForkError::Sandbox(Box::new(e))
    }
}

impl ForkError {
    /// The failure as the verdict's `error` reports it: a sandbox's own
    /// failure (not found, busy, a fork's create) by its step, the rest as
    /// the image step.
    pub fn report(&self) -> ErrorReport {
        match self {
            ForkError::Sandbox(s) => s.report(),
            ForkError::Create { err, .. } => {
                let mut r = err.report();
                r.message = self.to_string();
                r
            }
            ForkError::Snapshot { err, .. } => match err.as_ref() {
                CommitError::Sandbox(s) => s.report(),
                _ => ErrorReport::new(Phase::Image, self.to_string()),
            },
            other => ErrorReport::new(Phase::Image, other.to_string()),
        }
    }
}

/// A commit's failure as the verdict's `error` reports it (the same shape
/// as a fork's: a missing or busy sandbox by its own step).
pub fn commit_report(e: &CommitError) -> ErrorReport {
    match e {
        CommitError::Sandbox(s) => s.report(),
        other => ErrorReport::new(Phase::Image, other.to_string()),
    }
}

/// `husk commit`: the live sandbox's changes stored as a new image.
pub fn commit(paths: &Result<Paths, PathsError>, req: &CommitRequest) -> Result<Committed, CommitError> {
    let p = paths.as_ref().map_err(|e| SandboxError::State(e.to_string()))?;
    let images = Images::open(&p.root)?;
    let sandboxes = crate::sandbox::state::Store::open(&p.state)?;
    store_commit(&images, &sandboxes, &req.sandbox, &req.name, "commit")
}

/// A snapshot image while the sandboxes that run on it are made: removed
/// when dropped unless `handed_over` (its record then keeps it while the
/// source lives).
pub struct Snapshot {
    pub committed: Committed,
    /// The source sandbox as it was found.
    pub source: Record,
    hold: SnapshotHold,
}

struct SnapshotHold {
    images: Images,
    name: String,
    pending: Option<Pending>,
}

impl Snapshot {
    /// The sandboxes made on it reached their caller.
    pub fn handed_over(self) {
        self.hold.handed_over();
    }
}

impl SnapshotHold {
    fn handed_over(mut self) {
        if let Some(p) = self.pending.take() {
            p.handed_over();
        }
    }
}

impl Drop for SnapshotHold {
    fn drop(&mut self) {
        if self.pending.is_some() {
            let _ = self.images.remove(&self.name);
        }
    }
}

/// The source's changes, stored as a new image, recorded in the state dir
/// before it is stored (`husk create --from-snapshot` creates on it).
pub fn snapshot(paths: &Result<Paths, PathsError>, target: &str) -> Result<Snapshot, ForkError> {
    let p = paths.as_ref().map_err(|e| ForkError::Paths(e.to_string()))?;
    let images = Images::open(&p.root)?;
    let sandboxes = store_of(paths)?;
    let source = live_record(&sandboxes, target)?;
    let tag = crate::ids::new_id();
    let name = image_name(&source.id, &tag);
    let pending = Pending::start(&sandboxes, &source.id, &tag)?;
    // From here on the hold removes the image on every failure path.
    let hold = SnapshotHold { images, name, pending: Some(pending) };
    let committed = store_commit(&hold.images, &sandboxes, &source.id, &hold.name, "fork")
        .map_err(|err| ForkError::Snapshot { source_id: source.id.clone(), err: Box::new(err) })?;
    Ok(Snapshot { committed, source, hold })
}

/// Made forks whose ids have not reached their caller yet. `confirm` once
/// they did (the CLI after printing them, serve after writing the
/// response); dropped unconfirmed, it destroys the forks and their
/// snapshot image: ids nobody received would be sandboxes nobody removes.
pub struct ForkHandover {
    made: Vec<(Record, Handover)>,
    sandboxes: state::Store,
    snapshot: Option<SnapshotHold>,
}

impl ForkHandover {
    pub fn confirm(mut self) {
        for (_, handover) in self.made.drain(..) {
            handover.confirm();
        }
        if let Some(s) = self.snapshot.take() {
            s.handed_over();
        }
    }
}

impl Drop for ForkHandover {
    fn drop(&mut self) {
        for (rec, handover) in self.made.drain(..) {
            drop(handover);
            let _ = destroy(&self.sandboxes, &rec.id, true);
        }
        // The hold's own drop removes the image.
        self.snapshot.take();
    }
}

/// A fork's result: the snapshot, the forks' records, and the guard that
/// keeps them only once confirmed.
pub struct Forked {
    pub snapshot: Committed,
    pub sandboxes: Vec<Record>,
    pub handover: ForkHandover,
}

/// Every fork's labels.
type Labels = BTreeMap<String, String>;

/// Checks a request before anything is made.
fn check(req: &ForkRequest) -> Result<Labels, ForkError> {
    if req.count == 0 || req.count > MAX_FORKS {
        return Err(SandboxError::Usage(format!("count must be 1 to {MAX_FORKS}, not {}", req.count)).into());
    }
    if req.ttl.is_some_and(|t| t.is_zero()) {
        return Err(SandboxError::Usage("ttl must be longer than 0 (e.g. 30s, 10m, 2h)".into()).into());
    }
    let mut labels = BTreeMap::new();
    for l in &req.labels {
        let (k, v) = state::parse_label(l)?;
        labels.insert(k, v);
    }
    Ok(labels)
}

/// `husk fork`: the source's spec (limits, network, mounts, user, env,
/// workdir) on the snapshot, `count` times, all or nothing. Published host
/// ports become 0 (each fork gets its own, reported in its record): N
/// sandboxes cannot share one.
pub fn fork(paths: &Result<Paths, PathsError>, req: &ForkRequest) -> Result<Forked, ForkError> {
    let labels = check(req)?;
    let Snapshot { committed, source, hold } = snapshot(paths, &req.source)?;
    let mut spec = source.spec.clone();
    spec.root = RootSpec::Image(committed.name.clone());
    spec.pull = PullPolicy::Never;
    for p in &mut spec.publish {
        p.host_port = 0;
    }
    let sandboxes = store_of(paths)?;
    // The source's secrets, from its supervisor: a fork runs what its
    // source ran, with the same environment.
    let secrets = crate::sandbox::exec::secrets_of(&sandboxes, &source)?;
    let mut guard = ForkHandover { made: Vec::new(), sandboxes, snapshot: Some(hold) };
    for n in 1..=req.count {
        let meta = Meta {
            name: None,
            labels: labels.clone(),
            ttl: req.ttl.unwrap_or(Duration::from_millis(source.ttl_ms)),
            max_lifetime: source.max_lifetime_ms.map(Duration::from_millis),
            concurrent: source.concurrent,
            ready_check: false,
            secrets: secrets.clone(),
        };
        match create_spec(spec.clone(), meta, paths) {
            Ok(r) => guard.made.push(r),
            // All or nothing: the guard's drop removes the forks made so far
            // and the snapshot.
            Err(err) => {
                return Err(ForkError::Create { n, count: req.count, snapshot: committed.name, err: Box::new(err) });
            }
        }
    }
    let recs = guard.made.iter().map(|(r, _)| r.clone()).collect();
    Ok(Forked { snapshot: committed, sandboxes: recs, handover: guard })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(count: u32, labels: &[&str], ttl: Option<Duration>) -> ForkRequest {
        ForkRequest { source: "x".into(), count, labels: labels.iter().map(|l| l.to_string()).collect(), ttl }
    }

    #[test]
    fn fork_request_is_refused_before_anything_is_made() {
        let step = |r: &ForkRequest| check(r).err().map(|e| e.report().step);
        assert_eq!(step(&req(0, &[], None)), Some(Phase::Arguments));
        assert_eq!(step(&req(MAX_FORKS + 1, &[], None)), Some(Phase::Arguments));
        assert_eq!(step(&req(1, &[], Some(Duration::ZERO))), Some(Phase::Arguments));
        assert!(step(&req(1, &["no-equals-sign"], None)).is_some(), "a label is KEY=VALUE");
        let labels = check(&req(3, &["a=1", "b=2"], Some(Duration::from_secs(5)))).unwrap();
        assert_eq!(labels.get("b").map(String::as_str), Some("2"));
    }

    #[test]
    fn a_missing_source_reports_the_sandbox_step_through_fork_and_commit() {
        let missing = SandboxError::Unknown { what: "x".into(), state: "/s".into() };
        let msg = missing.to_string();
        let fork = ForkError::from(SandboxError::Unknown { what: "x".into(), state: "/s".into() }).report();
        let commit = commit_report(&CommitError::Sandbox(missing));
        assert_eq!((fork.step, &fork.message), (Phase::Sandbox, &msg));
        assert_eq!((commit.step, &commit.message), (Phase::Sandbox, &msg));
    }
}
