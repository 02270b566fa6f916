//! `husk run`: one command in a fresh sandbox.

use crate::backend::RunIo;
use crate::cli::RunArgs;
use crate::cli::report::{check_verdict_file, report};
use crate::image::store::{Check, Lease};
use crate::outcome::{ErrorReport, Outcome, Termination};
use crate::paths::{Paths, PathsError};
use crate::plan::InitRole;
use crate::sandbox::prepare::{Prepared, host_for, prepare};
use std::path::Path;

pub fn run(args: RunArgs, paths: &Result<Paths, PathsError>, state_dir: Option<&Path>, t_start: u64) -> i32 {
    let mut p = args.process.clone();
    // This command's redaction: `--redact` now, its secrets once read.
    let redact = p.secrets.redaction();
    if let Err(e) = check_verdict_file(&mut p) {
        return report(&Outcome::setup_failed(e.into()), "", "none", None, &p, &redact);
    }
    let fail = |e: ErrorReport| report(&Outcome::setup_failed(e), "", "none", None, &p, &redact);
    let sandbox = crate::cli::spec::sandbox_options(&args.sandbox);
    let lowered = crate::cli::spec::process_options(&args.process)
        .and_then(|process| crate::request::lower::run_spec(args.command.clone(), &sandbox, &process, &redact));
    let spec = match lowered {
        Ok(s) => s,
        Err(e) => return fail(e.into()),
    };
    let capture = match spec.output {
        crate::spec::OutputSpec::Capture { limit } => Some(limit),
        crate::spec::OutputSpec::Passthrough => None,
    };
    // The one pipeline of run and create (sandbox/prepare.rs).
    let host = host_for(paths);
    // This run's teardown may finish after it exits, in a reaper whose
    // lock slots live in the state dir (backend/native/teardown.rs).
    if let Ok(p) = paths {
        crate::backend::native::teardown::detach_in(&p.state);
    }
    let state = || crate::backend::runsc::config::state_dir(state_dir);
    let Prepared { backend, note, plan, lease, .. } = match prepare(spec, &host, paths, state, InitRole::Run) {
        Ok(p) => p,
        Err(e) => return report(&Outcome::setup_failed(e.report), "", e.runtime, None, &p, &redact),
    };
    let id = plan.id.clone();
    let mut isolation = backend.isolation(&plan);
    isolation.runtime_choice = note;
    let tap = match crate::cli::report::stream_tap(&p, &redact) {
        Ok(t) => t,
        Err(e) => return report(&Outcome::setup_failed(e), &id, backend.name(), None, &p, &redact),
    };
    let mut outcome = backend.run(plan, RunIo { capture, tap: tap.as_ref(), redact: &redact, t_start });
    crate::cli::report::stream_done(tap);
    if let Some(lease) = &lease {
        blame_damaged_layer(&mut outcome, lease);
    }
    report(&outcome, &id, backend.name(), Some(&isolation), &p, &redact)
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
