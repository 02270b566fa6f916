//! `husk fork SANDBOX --memory [--count N]`: the forks restored from one
//! checkpoint of the source (src/sandbox/memfork.rs); prints their ids,
//! or with --json the image and the forks' records. The ids are printed
//! before the handovers are confirmed, as create does.

use crate::cli::images::ForkArgs;
use crate::outcome::EXIT_HUSK_FAILED;
use crate::paths::{Paths, PathsError};
use crate::sandbox::SandboxError;
use crate::sandbox::lifecycle::{destroy, store_of, summary};
use crate::sandbox::memfork::{MemoryForkRequest, fork_memory};
use serde_json::json;

pub fn fork(a: &ForkArgs, paths: &Result<Paths, PathsError>) -> i32 {
    match fork_inner(a, paths) {
        Ok(()) => 0,
        Err(e) => {
            if a.json {
                crate::cli::report::json_failure(e.report(), std::collections::BTreeMap::new(), false);
            }
            crate::errln!("husk: {e}");
            EXIT_HUSK_FAILED
        }
    }
}

fn fork_inner(a: &ForkArgs, paths: &Result<Paths, PathsError>) -> Result<(), SandboxError> {
    let mut labels = std::collections::BTreeMap::new();
    for l in &a.label {
        let (k, v) = crate::sandbox::state::parse_label(l)?;
        labels.insert(k, v);
    }
    let req = MemoryForkRequest { target: &a.sandbox, count: a.count, ttl: a.ttl, labels };
    let made = fork_memory(paths, &req)?;
    if a.json {
        let forks: Vec<_> = made.forks.iter().map(|(r, _)| summary(r)).collect();
        crate::outln!("{}", json!({ "source": made.source, "checkpoint": made.image, "sandboxes": forks }));
    } else {
        for (r, _) in &made.forks {
            crate::outln!("{}", r.id);
        }
    }
    if !crate::print::stdout_ok() {
        let store = store_of(paths)?;
        for (rec, handover) in made.forks {
            drop(handover);
            let _ = destroy(&store, &rec.id, true);
        }
        return Err(SandboxError::Usage("stdout is closed: the forks' ids could not be printed".into()));
    }
    if !a.json {
        crate::errln!(
            "husk: {} fork(s) of {} restored from one {} KiB checkpoint (taken in {} ms)",
            made.forks.len(),
            made.source,
            made.image.bytes / 1024,
            made.image.took_ms
        );
    }
    for (_, handover) in made.forks {
        handover.confirm();
    }
    Ok(())
}
