//! `husk fork SANDBOX [--count N]`: args -> `build::fork::fork` -> the ids
//! printed, then the handover confirmed (forks whose ids reached nobody
//! are removed). `husk create --from-snapshot` takes its snapshot here
//! (`snapshot_for_create`) and is created by create's own path.

use crate::build::fork::{ForkError, ForkRequest, Snapshot, fork as fork_sandbox, snapshot};
use crate::cli::CreateArgs;
use crate::cli::images::ForkArgs;
use crate::outcome::EXIT_HUSK_FAILED;
use crate::paths::{Paths, PathsError};
use crate::sandbox::lifecycle::summary;
use serde_json::json;
use std::collections::BTreeMap;

fn fail(json: bool, e: &ForkError) -> i32 {
    if json {
        crate::cli::report::json_failure(e.report(), BTreeMap::new(), false);
    }
    crate::errln!("husk: {e}");
    EXIT_HUSK_FAILED
}

pub fn fork(a: ForkArgs, paths: &Result<Paths, PathsError>) -> i32 {
    let req = ForkRequest { source: a.sandbox.clone(), count: a.count, labels: a.label.clone(), ttl: a.ttl };
    let forked = match fork_sandbox(paths, &req) {
        Ok(f) => f,
        Err(e) => return fail(a.json, &e),
    };
    if a.json {
        let forks: Vec<_> = forked.sandboxes.iter().map(summary).collect();
        crate::outln!("{}", json!({ "snapshot": forked.snapshot, "sandboxes": forks }));
    } else {
        for r in &forked.sandboxes {
            crate::outln!("{}", r.id);
        }
    }
    // Printing is part of the transaction: unconfirmed, the guard's drop
    // removes the forks.
    if !crate::print::stdout_ok() {
        drop(forked.handover);
        let e = crate::sandbox::SandboxError::Usage("stdout is closed: the forks' ids could not be printed".into());
        return fail(a.json, &e.into());
    }
    forked.handover.confirm();
    if !a.json {
        let s = &forked.snapshot;
        crate::errln!(
            "husk: snapshot {} of {}: {} changed, {} removed, {} bytes",
            s.name,
            s.sandbox,
            s.changes.changed,
            s.changes.whiteouts,
            s.changes.bytes
        );
    }
    0
}

/// `husk create --from-snapshot SANDBOX ...`: the snapshot image is taken
/// here and create's own flags run on it (its config carries the source's
/// env, workdir and user as defaults). The caller creates, then hands the
/// snapshot to `create_done`. Err: the exit code of the printed failure.
pub fn snapshot_for_create(args: &mut CreateArgs, paths: &Result<Paths, PathsError>) -> Result<Option<Snapshot>, i32> {
    let Some(target) = args.from_snapshot.take() else { return Ok(None) };
    let snap = snapshot(paths, &target).map_err(|e| fail(args.json, &e))?;
    args.sandbox.image = Some(snap.committed.name.clone());
    Ok(Some(snap))
}

/// After create: the snapshot stays (handed over) when create succeeded,
/// and its image is removed when it failed.
pub fn create_done(snap: Option<Snapshot>, code: i32) -> i32 {
    if code == 0
        && let Some(s) = snap
    {
        s.handed_over();
    }
    code
}
