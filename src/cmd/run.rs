//! `husk run`: one command in a fresh sandbox.

use crate::backend::{self, RunIo};
use crate::cli::RunArgs;
use crate::cli::report::{check_verdict_file, report};
use crate::cli::spec::{apply_process_args, apply_sandbox_args};
use crate::host::HostFacts;
use crate::image::store::{Check, Lease};
use crate::outcome::{ErrorReport, Outcome, Termination};
use crate::paths::{Paths, PathsError};
use crate::plan::InitRole;
use crate::spec::{OutputSpec, Spec};
use crate::step::Phase;
use std::path::Path;

pub fn run(args: RunArgs, paths: &Result<Paths, PathsError>, state_dir: Option<&Path>, t_start: u64) -> i32 {
    if super::run_copy::wants_copies(&args) {
        return super::run_copy::run(args, paths, t_start);
    }
    let mut p = args.process.clone();
    if let Err(e) = check_verdict_file(&mut p) {
        return report(&Outcome::setup_failed(e.into()), "", "none", None, &p);
    }
    let fail = |e: ErrorReport| report(&Outcome::setup_failed(e), "", "none", None, &p);
    let mut spec = Spec::new(args.command.clone());
    if let Err(e) =
        apply_sandbox_args(&mut spec, &args.sandbox).and_then(|_| apply_process_args(&mut spec, &args.process))
    {
        return fail(e.into());
    }
    let mut host = HostFacts::probe();
    // One store for everything (images, compiled seccomp profiles).
    if let Ok(p) = paths {
        host.store_root = p.root.clone();
        crate::backend::native::teardown::detach_in(&p.state);
    }
    let (root, _lease) = match crate::image::root::root_input(&spec, &host, paths) {
        Ok(r) => r,
        Err(e) => return fail(ErrorReport::new(Phase::Root, e)),
    };
    let selected = match backend::select(&spec, &host, state_dir) {
        Ok(b) => b,
        Err(e) => return fail(e.into()),
    };
    let backend = selected.backend;
    let capture = match spec.output {
        OutputSpec::Capture { limit } => Some(limit),
        OutputSpec::Passthrough => None,
    };
    let plan = match backend::plan_for(backend.as_ref(), spec, &host, root, InitRole::Run) {
        Ok(p) => p,
        Err(e) => return report(&Outcome::setup_failed(e.report), "", e.runtime, None, &p),
    };
    let id = plan.id.clone();
    let mut isolation = backend.isolation(&plan);
    isolation.runtime_choice = selected.note;
    let tap = match crate::cli::report::stream_tap(&p) {
        Ok(t) => t,
        Err(e) => return report(&Outcome::setup_failed(e), &id, backend.name(), None, &p),
    };
    let mut outcome = backend.run(plan, RunIo { capture, tap: tap.as_ref(), t_start });
    crate::cli::report::stream_done(tap);
    if let Some(lease) = &_lease {
        blame_damaged_layer(&mut outcome, lease);
    }
    report(&outcome, &id, backend.name(), Some(&isolation), &p)
}

/// A command of an image that failed to start may have failed because the
/// store is damaged (garbage written into a layer file: ENOEXEC; a file
/// gone: ENOENT). Only then are the layers checked, so a healthy run never
/// pays for it; a damaged layer is named in the hint with its repair.
fn blame_damaged_layer(outcome: &mut Outcome, lease: &Lease) {
    if outcome.termination != Termination::SetupFailed {
        return;
    }
    let Some(err) = outcome.error.as_mut() else { return };
    let check = if err.errno == Some(crate::sys::Errno::ENOEXEC) { Check::Full } else { Check::Quick };
    if let Some(damage) = lease.diagnose(check) {
        err.hint = Some(match err.hint.take() {
            Some(h) => format!("{damage}; {h}"),
            None => damage,
        });
    }
}
