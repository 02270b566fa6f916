//! `husk run --copy-in HOST:PATH / --copy-out PATH:HOST`: one command in a
//! fresh sandbox with files copied in before it starts and out after it
//! ends. The sandbox is a live one for the length of the run (`husk
//! create`'s path, its lease held by this process), so the copies are
//! `husk cp`'s own (sandbox::files: RESOLVE_IN_ROOT, the sandbox's user,
//! bounds) and the command is an exec in it: a copy-out still sees the
//! command's files after the command ended, and nothing is torn down
//! before it is done.
//!
//! The sandbox is never handed over (its `Handover` stays unconfirmed):
//! if husk run is killed, the supervisor sees the hang-up and destroys it.

use crate::cli::RunArgs;
use crate::cli::cp::CopyOut;
use crate::cli::report::{check_verdict_file, report, report_with};
use crate::cli::{CreateArgs, ProcessArgs};
use crate::outcome::{ErrorReport, Outcome, Termination};
use crate::paths::{Paths, PathsError};
use crate::sandbox::exec::ExecRequest;
use crate::sandbox::files::{Files, FilesError};
use crate::sandbox::state::{Record, Store};
use crate::step::Phase;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// The sandbox's lease between the steps of the run (each copy and the
/// exec renew it; it never runs out while the command runs). It only
/// matters if husk run is stopped without a chance to remove the sandbox
/// and its hang-up went unseen.
const RUN_LEASE: Duration = Duration::from_secs(60);

/// The label `husk ls` shows on such a sandbox while the run lasts.
const LABEL: &str = "husk.run=copy";

pub fn run(args: RunArgs, paths: &Result<Paths, PathsError>, t_start: u64) -> i32 {
    let mut p = args.process.clone();
    if let Err(e) = check_verdict_file(&mut p) {
        return report(&Outcome::setup_failed(e.into()), "", "none", None, &p);
    }
    if let Err(e) = before_create(&args) {
        return report(&Outcome::setup_failed(e), "", "none", None, &p);
    }
    let create = CreateArgs {
        sandbox: args.sandbox.clone(),
        env: p.env.clone(),
        env_file: p.env_file.clone(),
        user: p.user.clone(),
        ttl: RUN_LEASE,
        max_lifetime: None,
        name: None,
        label: vec![LABEL.into()],
        concurrent: false,
        warm: None,
        session: None,
        ready_cmd: None,
        secrets: p.secrets.clone(),
        ready_timeout: std::time::Duration::from_secs(60),
        json: false,
        pool: None,
        server: None,
        pool_fallback: false,
        from_snapshot: None,
    };
    let (rec, handover) = match super::sandbox::create_inner(create, paths) {
        Ok(r) => r,
        Err(e) => return report(&Outcome::setup_failed(e.report()), "", "none", None, &p),
    };
    let store = match crate::sandbox::lifecycle::store_of(paths) {
        Ok(s) => s,
        Err(e) => return report(&Outcome::setup_failed(e.report()), &rec.id, "none", None, &p),
    };
    let (mut outcome, copies) = steps(&store, &rec, &args, &p, t_start);
    if let Err(e) = crate::sandbox::lifecycle::destroy(&store, &rec.id, true)
        && outcome.error.is_none()
    {
        outcome = with_failure(outcome, e.report());
    }
    drop(handover);
    let mut extra = BTreeMap::new();
    extra.insert("copies", json!(copies));
    report_with(&outcome, &rec.id, &rec.backend, Some(&rec.isolation), &p, &extra)
}

/// The copies in, the command, the copies out: the outcome the verdict
/// reports, and what each copy moved.
fn steps(
    store: &Store,
    rec: &Record,
    args: &RunArgs,
    p: &ProcessArgs,
    t_start: u64,
) -> (Outcome, Vec<serde_json::Value>) {
    let mut copies = Vec::new();
    let files = Files { target: rec.id.clone(), user: p.user.clone(), wait: false, limits: Default::default() };
    // --runtime auto may have chosen gVisor.
    if let Err(e) = crate::backend::copy_supported(&rec.backend) {
        return (Outcome::setup_failed(unsupported(e)), copies);
    }
    let t0 = crate::spawn::now_ns();
    for c in &args.copy_in {
        match super::cp::copy_in(store, &files, &c.host, &c.path) {
            Ok(r) => copies.push(
                json!({"direction": "in", "host": c.host, "path": c.path, "entries": r.entries, "bytes": r.bytes}),
            ),
            Err(e) => {
                return (Outcome::setup_failed(copy_failed(&e, &format!("--copy-in {}:{}", c.host, c.path))), copies);
            }
        }
    }
    let copy_in_ms = ms_since(t0);
    let req = ExecRequest {
        target: rec.id.clone(),
        wait: false,
        ready_check: false,
        exec: crate::spec::ExecSpec {
            argv: args.command.clone(),
            env: Vec::new(),
            user: p.user.clone(),
            workdir: None,
            timeout: p.timeout,
            kill_grace: p.kill_grace,
            capture: (p.json || p.json_stream).then_some(p.output_limit),
            tty: p.tty,
        },
    };
    let tap = match crate::cli::report::stream_tap(p) {
        Ok(t) => t,
        Err(e) => return (Outcome::setup_failed(e), copies),
    };
    let result = crate::sandbox::exec::exec_to(store, &req, t_start, tap.as_ref());
    crate::cli::report::stream_done(tap);
    let mut outcome = match result {
        Ok(r) => r.outcome,
        Err(e) => return (Outcome::setup_failed(e.report()), copies),
    };
    if !args.copy_in.is_empty() {
        outcome.phases_ms.insert("copy_in", copy_in_ms);
    }
    if outcome.termination == Termination::SetupFailed {
        return (outcome, copies);
    }
    let t1 = crate::spawn::now_ns();
    for c in &args.copy_out {
        match copy_out(store, &files, c) {
            Ok(r) => copies.push(
                json!({"direction": "out", "host": c.host, "path": c.path, "entries": r.entries, "bytes": r.bytes}),
            ),
            Err(e) => {
                let how = ended(&outcome);
                let mut err = copy_failed(&e, &format!("--copy-out {}:{}", c.path, c.host));
                err.message = format!("{} (after the command {how})", err.message);
                return (with_failure(outcome, err), copies);
            }
        }
    }
    if !args.copy_out.is_empty() {
        outcome.phases_ms.insert("copy_out", ms_since(t1));
    }
    (outcome, copies)
}

/// What can be refused before a sandbox is made: a host source that is
/// not there.
fn before_create(args: &RunArgs) -> Result<(), ErrorReport> {
    for c in &args.copy_in {
        super::cp::check_source(&c.host).map_err(|e| copy_failed(&e, &format!("--copy-in {}:{}", c.host, c.path)))?;
    }
    Ok(())
}

fn unsupported(e: crate::backend::CopyStartError) -> ErrorReport {
    ErrorReport::new(Phase::Copy, format!("--copy-in/--copy-out: {e}"))
        .with_hint(Some("copies need the native runtime (--runtime native)".into()))
}

fn copy_out(store: &Store, f: &Files, c: &CopyOut) -> Result<crate::copy::Report, FilesError> {
    super::cp::copy_out(store, f, &c.path, &c.host)
}

fn copy_failed(e: &FilesError, what: &str) -> ErrorReport {
    let mut r = e.report();
    r.step = Phase::Copy;
    r.message = format!("{what}: {}", r.message);
    r
}

/// The command ran, but the run failed after it (a copy out, the
/// teardown): the verdict is husk's failure, and keeps the command's output.
fn with_failure(mut o: Outcome, e: ErrorReport) -> Outcome {
    o.termination = Termination::SetupFailed;
    o.status = None;
    o.signal = None;
    o.error = Some(e);
    o
}

fn ended(o: &Outcome) -> String {
    match o.termination {
        Termination::Exited => format!("exited {}", o.status.unwrap_or(0)),
        Termination::WallTimeout => "timed out".into(),
        Termination::OomKilled => "was OOM-killed".into(),
        _ => format!("was killed by signal {}", o.signal.unwrap_or(0)),
    }
}

fn ms_since(t0: u64) -> f64 {
    crate::spawn::now_ns().saturating_sub(t0) as f64 / 1e6
}

/// Which of `husk run`'s paths: with copies the run is a live sandbox's.
pub fn wants_copies(args: &RunArgs) -> bool {
    !args.copy_in.is_empty() || !args.copy_out.is_empty()
}
