//! `husk fork SANDBOX [--count N]` and `husk create --from-snapshot
//! SANDBOX`: new sandboxes that start from a live sandbox's current
//! filesystem (not its processes). The source's changes are read once,
//! with its cgroup frozen, into one layer on its image (what `husk commit`
//! stores, build/commit.rs), kept as the image `snapshot/<id>:<tag>`;
//! every new sandbox runs on that image. So a fork costs the changed data
//! once (the layer tar and its unpacked copy in the store), however many
//! sandboxes share it, and nothing of the image below.

use crate::build::commit::{CommitError, Committed, commit};
use crate::cli::CreateArgs;
use crate::cli::images::ForkArgs;
use crate::image::Store as Images;
use crate::outcome::EXIT_HUSK_FAILED;
use crate::paths::{Paths, PathsError};
use crate::sandbox::lifecycle::{Meta, create_spec, destroy, store_of, summary};
use crate::sandbox::registry::live_record;
use crate::sandbox::state::{self, Record};
use crate::sandbox::{SandboxError, supervisor::Handover};
use crate::spec::{PullPolicy, RootSpec};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

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

fn fail(json: bool, e: &ForkError) -> i32 {
    if json {
        let report = match e {
            ForkError::Sandbox(s) | ForkError::Create { err: s, .. } => s.report(),
            other => crate::outcome::ErrorReport::new(crate::step::Phase::Image, other.to_string()),
        };
        crate::cli::report::json_failure(report, BTreeMap::new(), false);
    }
    crate::errln!("husk: {e}");
    EXIT_HUSK_FAILED
}

/// The source's changes, stored as a new image (its name in `Committed`),
/// recorded in the state dir (`Pending`) before it is stored.
fn snapshot(
    paths: &Result<Paths, PathsError>,
    target: &str,
) -> Result<(Images, Record, Committed, Pending), ForkError> {
    let p = paths.as_ref().map_err(|e| ForkError::Paths(e.to_string()))?;
    let images = Images::open(&p.root)?;
    let sandboxes = store_of(paths)?;
    let source = live_record(&sandboxes, target)?;
    let tag = crate::ids::new_id();
    let name = format!("snapshot/{}:{tag}", source.id);
    let pending = Pending::start(&sandboxes, &source.id, &tag)?;
    let snap = commit(&images, &sandboxes, &source.id, &name, "fork")
        .map_err(|err| ForkError::Snapshot { source_id: source.id.clone(), err: Box::new(err) })?;
    Ok((images, source, snap, pending))
}

/// The state dir's record of one snapshot image it made,
/// `<state>/sandboxes/snapshots/<source id>:<tag>`: locked while its fork
/// runs, and saying `handed-over` once the forks' ids reached the caller.
/// `husk gc` removes the image of a record nobody holds when its forks
/// were never handed over (the fork was killed or failed), or its source
/// is gone; either way only once no sandbox runs on it (`sweep_snapshots`).
/// Only this state dir's snapshots are touched: another state dir sharing
/// the image store has its own records.
pub struct Pending {
    file: nix::fcntl::Flock<std::fs::File>,
}

/// What a snapshot record says once its forks were handed over.
const HANDED_OVER: &[u8] = b"handed-over\n";

fn snapshots_dir(sandboxes: &state::Store) -> std::path::PathBuf {
    sandboxes.root.join("snapshots")
}

impl Pending {
    fn start(sandboxes: &state::Store, source: &str, tag: &str) -> Result<Pending, ForkError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = snapshots_dir(sandboxes);
        let io = |e: std::io::Error, p: &std::path::Path| {
            ForkError::from(SandboxError::State(format!("recording the snapshot in {}: {e}", p.display())))
        };
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(io(e, &dir)),
            _ => {}
        }
        let path = dir.join(format!("{source}:{tag}"));
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| io(e, &path))?;
        let file = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| io(std::io::Error::from(e), &path))?;
        Ok(Pending { file })
    }

    /// The forks reached their caller: the image stays while its source lives.
    fn handed_over(self) {
        use std::io::Write;
        let _ = (&*self.file).write_all(HANDED_OVER);
    }
}

/// What `husk gc` did with this state dir's snapshot images.
#[derive(serde::Serialize, Debug, Default)]
pub struct SnapshotSweep {
    pub removed: Vec<String>,
    /// Kept: a fork of it is under way, its source lives (and it was
    /// handed over), or a sandbox runs on it; with why.
    pub kept: Vec<String>,
    pub errors: Vec<String>,
}

/// `husk gc`: this state dir's snapshot images nobody needs any more.
pub fn sweep_snapshots(images: &Images, sandboxes: &state::Store) -> SnapshotSweep {
    let mut out = SnapshotSweep::default();
    let Ok(entries) = std::fs::read_dir(snapshots_dir(sandboxes)) else { return out };
    for e in entries.flatten() {
        let key = e.file_name().to_string_lossy().into_owned();
        let Some((source, tag)) = key.split_once(':') else { continue };
        if !state::is_id(source) || tag.is_empty() || !tag.bytes().all(|b| b.is_ascii_alphanumeric()) {
            continue;
        }
        let name = format!("snapshot/{key}");
        let Ok(f) = std::fs::OpenOptions::new().read(true).write(true).open(e.path()) else { continue };
        let Ok(lock) = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) else {
            out.kept.push(format!("{name}: a fork of it is under way"));
            continue;
        };
        let handed_over = std::fs::read(e.path()).is_ok_and(|b| b == HANDED_OVER);
        if handed_over && sandboxes.dir(source).is_dir() {
            out.kept.push(format!("{name}: its source sandbox {source} lives"));
            continue;
        }
        match images.remove(&name) {
            Ok(_) => {
                let _ = std::fs::remove_file(e.path());
                out.removed.push(name);
            }
            // Its fork ended before storing it, or it was removed by hand.
            Err(crate::image::ImageError::NotFound(_)) => {
                let _ = std::fs::remove_file(e.path());
            }
            Err(crate::image::ImageError::InUse(_)) => out.kept.push(format!("{name}: a sandbox runs on it")),
            Err(err) => out.errors.push(format!("removing {name}: {err}")),
        }
        drop(lock);
    }
    out
}

fn parse_labels(raw: &[String]) -> Result<BTreeMap<String, String>, ForkError> {
    let mut labels = BTreeMap::new();
    for l in raw {
        let (k, v) = state::parse_label(l)?;
        labels.insert(k, v);
    }
    Ok(labels)
}

/// `husk fork`: the source's spec (limits, network, mounts, user, env,
/// workdir) on the snapshot, `--count` times. Published host ports become
/// 0 (each fork gets its own, reported in its record): N sandboxes cannot
/// share one.
/// The ids are printed before the handovers are confirmed, as create
/// does: forks whose ids reached nobody are removed.
fn fork_inner(a: &ForkArgs, paths: &Result<Paths, PathsError>) -> Result<(Committed, Vec<Record>), ForkError> {
    let labels = parse_labels(&a.label)?;
    let (images, source, snap, pending) = snapshot(paths, &a.sandbox)?;
    let mut spec = source.spec.clone();
    spec.root = RootSpec::Image(snap.name.clone());
    spec.pull = PullPolicy::Never;
    for p in &mut spec.publish {
        p.host_port = 0;
    }
    let sandboxes = store_of(paths)?;
    // The source's secrets, from its supervisor: a fork runs what its
    // source ran, with the same environment.
    let secrets = crate::sandbox::exec::secrets_of(&sandboxes, &source)?;
    let mut made: Vec<(Record, Handover)> = Vec::new();
    for n in 1..=a.count {
        let meta = Meta {
            name: None,
            labels: labels.clone(),
            ttl: a.ttl.unwrap_or(Duration::from_millis(source.ttl_ms)),
            max_lifetime: source.max_lifetime_ms.map(Duration::from_millis),
            concurrent: source.concurrent,
            ready_check: false,
            secrets: secrets.clone(),
        };
        match create_spec(spec.clone(), meta, paths) {
            Ok(r) => made.push(r),
            Err(err) => {
                // All or nothing: a partial set of forks is not what was asked for.
                for (rec, handover) in made {
                    drop(handover);
                    let _ = destroy(&sandboxes, &rec.id, true);
                }
                let _ = images.remove(&snap.name);
                return Err(ForkError::Create { n, count: a.count, snapshot: snap.name, err: Box::new(err) });
            }
        }
    }
    let recs: Vec<Record> = made.iter().map(|(r, _)| r.clone()).collect();
    print(a.json, &snap, &recs);
    if !crate::print::stdout_ok() {
        for (rec, handover) in made {
            drop(handover);
            let _ = destroy(&sandboxes, &rec.id, true);
        }
        let _ = images.remove(&snap.name);
        return Err(SandboxError::Usage("stdout is closed: the forks' ids could not be printed".into()).into());
    }
    for (_, handover) in made {
        handover.confirm();
    }
    pending.handed_over();
    Ok((snap, recs))
}

pub fn fork(a: ForkArgs, paths: &Result<Paths, PathsError>) -> i32 {
    if a.memory {
        return super::fork_memory::fork(&a, paths);
    }
    match fork_inner(&a, paths) {
        Ok((snap, _)) => {
            if !a.json {
                crate::errln!(
                    "husk: snapshot {} of {}: {} changed, {} removed, {} bytes",
                    snap.name,
                    snap.sandbox,
                    snap.changes.changed,
                    snap.changes.whiteouts,
                    snap.changes.bytes
                );
            }
            0
        }
        Err(e) => fail(a.json, &e),
    }
}

/// `husk create --from-snapshot SANDBOX ...`: create's own flags on the
/// snapshot image, whose config carries the source's env, workdir and
/// user as defaults.
pub fn create_from_snapshot(mut args: CreateArgs, paths: &Result<Paths, PathsError>) -> i32 {
    let Some(target) = args.from_snapshot.take() else {
        return super::sandbox::create(args, paths);
    };
    let (images, _, snap, pending) = match snapshot(paths, &target) {
        Ok(s) => s,
        Err(e) => return fail(args.json, &e),
    };
    args.sandbox.image = Some(snap.name.clone());
    let code = super::sandbox::create(args, paths);
    if code != 0 {
        let _ = images.remove(&snap.name);
    } else {
        pending.handed_over();
    }
    code
}

/// What `husk fork` prints: the forks' ids, one a line, or with --json
/// the snapshot and the forks' records.
fn print(json: bool, snap: &Committed, recs: &[Record]) {
    if json {
        let forks: Vec<_> = recs.iter().map(summary).collect();
        crate::outln!("{}", json!({ "snapshot": snap, "sandboxes": forks }));
    } else {
        for r in recs {
            crate::outln!("{}", r.id);
        }
    }
}
