//! `husk push`, `husk commit`: images out of the store and out of live
//! sandboxes (docs/build.md).

use crate::build::fork::{CommitRequest, commit_report};
use crate::cli::images::{CommitArgs, PushArgs};
use crate::host::HostFacts;
use crate::image::Store;
use crate::image::registry::ClientOptions;
use crate::image::root::owners_for;
use crate::outcome::EXIT_HUSK_FAILED;
use crate::paths::{Paths, PathsError};

/// Prints a failure (and, with --json, the verdict-shaped error) and
/// gives the exit code.
fn fail(json: bool, e: &dyn std::fmt::Display) -> i32 {
    if json {
        let report = crate::outcome::ErrorReport::new(crate::step::Phase::Image, e.to_string());
        crate::cli::report::json_failure(report, Default::default(), false);
    }
    crate::errln!("husk: {e}");
    EXIT_HUSK_FAILED
}

pub fn push(a: PushArgs, paths: &Result<Paths, PathsError>) -> i32 {
    let paths = match paths {
        Ok(p) => p,
        Err(e) => return fail(a.json, e),
    };
    let store = match Store::open(&paths.root) {
        Ok(s) => s,
        Err(e) => return fail(a.json, &e),
    };
    let owners = owners_for(&HostFacts::probe(), None);
    let client =
        ClientOptions { insecure: a.insecure_registry.clone(), ca_files: a.registry_ca.clone(), mirrors: vec![] };
    match crate::build::push::push(&store, &a.name, a.reference.as_deref(), &owners, &client) {
        Ok(r) => {
            if a.json {
                crate::outln!("{}", serde_json::to_string(&r).unwrap_or_default());
            } else {
                crate::outln!(
                    "pushed {} to {} ({}; {} blobs uploaded, {} already there)",
                    r.name,
                    r.reference,
                    r.manifest,
                    r.blobs_uploaded,
                    r.blobs_skipped
                );
            }
            0
        }
        Err(e) => fail(a.json, &e),
    }
}

pub fn commit(a: CommitArgs, paths: &Result<Paths, PathsError>) -> i32 {
    let req = CommitRequest { sandbox: a.sandbox, name: a.name };
    match crate::build::fork::commit(paths, &req) {
        Ok(r) => {
            if a.json {
                crate::outln!("{}", serde_json::to_string(&r).unwrap_or_default());
            } else {
                crate::outln!(
                    "{} {} (sandbox {} on {}: {} changed, {} removed, {} bytes)",
                    r.name,
                    r.id,
                    r.sandbox,
                    r.base,
                    r.changes.changed,
                    r.changes.whiteouts,
                    r.changes.bytes
                );
            }
            0
        }
        Err(e) => {
            if a.json {
                crate::cli::report::json_failure(commit_report(&e), Default::default(), false);
            }
            crate::errln!("husk: {e}");
            EXIT_HUSK_FAILED
        }
    }
}
