//! Host paths in and out of a live sandbox (`husk cp HOST ID:PATH`, `husk
//! cp ID:PATH HOST`), and `husk run --copy-in/--copy-out`'s whole sequence
//! as one call: create, copy in, exec, copy out, destroy. The sandbox side
//! is `files` (a copier inside, RESOLVE_IN_ROOT, the sandbox's user,
//! bounds); here the host side packs or unpacks as the caller, following
//! nothing the sandbox made (a symlink to /etc, a `..` name).

use super::SandboxError;
use super::files::{self, Files, FilesError};
use super::lifecycle::{destroy, store_of};
use super::state::{Record, Store};
use crate::copy::pack::Packer;
use crate::copy::tarw::TarWriter;
use crate::copy::unpack::{Resolve, Shape, Unpacker, open_target};
use crate::copy::{CopyError, Report, split_source};
use crate::outcome::{ErrorReport, Outcome, Termination};
use crate::paths::{Paths, PathsError};
use crate::request::CreateOptions;
use crate::spec::{ExecSpec, RuntimeChoice};
use crate::step::Phase;
use nix::fcntl::AT_FDCWD;
use std::os::fd::AsFd;

/// A host file or tree into the sandbox, packed here as the caller.
pub fn copy_in(store: &Store, f: &Files, host: &str, path: &str) -> Result<Report, FilesError> {
    // The source is checked before the sandbox is asked for anything.
    let (parent, name) = check_source(host)?;
    let shown_root = crate::copy::split_path(host).map(|(p, _)| p).unwrap_or(".");
    files::put_with(store, f, path, Shape::Tree, &mut |w| {
        let mut p = Packer { out: TarWriter::new(w), limits: f.limits, report: Report::default(), shown_root };
        p.add(parent.as_fd(), &name, name.to_bytes())?;
        p.finish().map(|_| ())
    })
}

/// The host source of a copy in: its parent directory and name, when it
/// is there (never following a symlink in its last component).
pub fn check_source(host: &str) -> Result<(std::os::fd::OwnedFd, std::ffi::CString), FilesError> {
    let (parent, name) = split_source(AT_FDCWD, host, Resolve::Host).map_err(FilesError::Host)?;
    nix::sys::stat::fstatat(&parent, name.as_c_str(), nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|e| FilesError::Host(CopyError::fs(host, e)))?;
    Ok((parent, name))
}

/// A sandbox's file or tree onto the host, unpacked here as the caller.
pub fn copy_out(store: &Store, f: &Files, path: &str, host: &str) -> Result<Report, FilesError> {
    let mut host_report = None;
    let r = files::get_with(store, f, path, &mut |r| {
        let target = open_target(AT_FDCWD, host, Resolve::Host, Shape::Tree)?;
        host_report = Some(Unpacker::new(target, f.limits).run(r)?);
        Ok(())
    })?;
    Ok(host_report.unwrap_or(r))
}

/// One copy of a run: a host path and a path in the sandbox.
#[derive(Clone, Debug)]
pub struct HostCopy {
    pub host: String,
    pub path: String,
}

/// A command in a fresh sandbox with files copied in before it starts and
/// out after it ends.
pub struct RunWithCopies<'a> {
    /// The sandbox (the run's own flags, created as `husk create` makes one).
    pub create: CreateOptions,
    pub copy_in: Vec<HostCopy>,
    pub copy_out: Vec<HostCopy>,
    /// The command, run as an exec in the sandbox.
    pub exec: ExecSpec,
    pub t_start: u64,
    /// `--json-stream`'s tap of the command's output.
    pub tap: Option<&'a crate::stream::Tap>,
}

/// What one copy moved, as the verdict's `copies` lists it.
#[derive(serde::Serialize, Debug, Clone)]
pub struct CopyDone {
    pub direction: &'static str,
    pub host: String,
    pub path: String,
    pub entries: u64,
    pub bytes: u64,
}

/// How the run went: the command's outcome (or husk's failure), the
/// sandbox it ran in (None when none was made) and what each copy moved.
pub struct RanWithCopies {
    pub outcome: Outcome,
    pub sandbox: Option<Record>,
    pub copies: Vec<CopyDone>,
}

/// The whole sequence. The sandbox is never handed over (its `Handover`
/// stays unconfirmed): if the caller is killed, the supervisor sees the
/// hang-up and destroys it; otherwise it is destroyed here before return.
pub fn run_with_copies(paths: &Result<Paths, PathsError>, req: RunWithCopies) -> RanWithCopies {
    let failed =
        |e: ErrorReport| RanWithCopies { outcome: Outcome::setup_failed(e), sandbox: None, copies: Vec::new() };
    if let Err(e) = before_create(&req) {
        return failed(e);
    }
    let RunWithCopies { create, copy_in, copy_out, exec, t_start, tap } = req;
    let created = match crate::sandbox::create(&create, paths) {
        Ok(c) => c,
        Err(e) => return failed(e.report()),
    };
    let rec = created.record.clone();
    let store = match store_of(paths) {
        Ok(s) => s,
        Err(e) => {
            return RanWithCopies {
                outcome: Outcome::setup_failed(e.report()),
                sandbox: Some(rec),
                copies: Vec::new(),
            };
        }
    };
    let files = Files { target: rec.id.clone(), user: exec.user.clone(), wait: false, limits: Default::default() };
    let steps = Steps { store: &store, rec: &rec, files: &files, copy_in: &copy_in, copy_out: &copy_out };
    let (mut outcome, copies) = steps.run(exec, t_start, tap);
    if let Err(e) = destroy(&store, &rec.id, true)
        && outcome.error.is_none()
    {
        outcome = with_failure(outcome, e.report());
    }
    // Never confirmed: only this call knew the sandbox.
    drop(created);
    RanWithCopies { outcome, sandbox: Some(rec), copies }
}

/// What can be refused before a sandbox is made: a runtime that cannot
/// copy, a host source that is not there.
fn before_create(req: &RunWithCopies) -> Result<(), ErrorReport> {
    if req.create.sandbox.runtime == RuntimeChoice::Runsc {
        return Err(unsupported(crate::backend::CopyStartError::Gvisor));
    }
    for c in &req.copy_in {
        check_source(&c.host).map_err(|e| copy_failed(&e, &format!("--copy-in {}:{}", c.host, c.path)))?;
    }
    Ok(())
}

struct Steps<'a> {
    store: &'a Store,
    rec: &'a Record,
    files: &'a Files,
    copy_in: &'a [HostCopy],
    copy_out: &'a [HostCopy],
}

impl Steps<'_> {
    /// The copies in, the command, the copies out: the outcome the verdict
    /// reports, and what each copy moved.
    fn run(&self, exec: ExecSpec, t_start: u64, tap: Option<&crate::stream::Tap>) -> (Outcome, Vec<CopyDone>) {
        let mut copies = Vec::new();
        // A runtime chosen by `auto` may be gVisor.
        if let Err(e) = crate::backend::copy_supported(&self.rec.backend) {
            return (Outcome::setup_failed(unsupported(e)), copies);
        }
        let done = |direction, c: &HostCopy, r: Report| CopyDone {
            direction,
            host: c.host.clone(),
            path: c.path.clone(),
            entries: r.entries,
            bytes: r.bytes,
        };
        let t0 = crate::spawn::now_ns();
        for c in self.copy_in {
            match copy_in(self.store, self.files, &c.host, &c.path) {
                Ok(r) => copies.push(done("in", c, r)),
                Err(e) => {
                    let err = copy_failed(&e, &format!("--copy-in {}:{}", c.host, c.path));
                    return (Outcome::setup_failed(err), copies);
                }
            }
        }
        let copy_in_ms = ms_since(t0);
        let req =
            crate::sandbox::exec::ExecRequest { target: self.rec.id.clone(), wait: false, ready_check: false, exec };
        let mut outcome = match crate::sandbox::exec::exec_to(self.store, &req, t_start, tap) {
            Ok(r) => r.outcome,
            Err(e) => return (Outcome::setup_failed(e.report()), copies),
        };
        if !self.copy_in.is_empty() {
            outcome.phases_ms.insert("copy_in", copy_in_ms);
        }
        if outcome.termination == Termination::SetupFailed {
            return (outcome, copies);
        }
        let t1 = crate::spawn::now_ns();
        for c in self.copy_out {
            match copy_out(self.store, self.files, &c.path, &c.host) {
                Ok(r) => copies.push(done("out", c, r)),
                Err(e) => {
                    let how = ended(&outcome);
                    let mut err = copy_failed(&e, &format!("--copy-out {}:{}", c.path, c.host));
                    err.message = format!("{} (after the command {how})", err.message);
                    return (with_failure(outcome, err), copies);
                }
            }
        }
        if !self.copy_out.is_empty() {
            outcome.phases_ms.insert("copy_out", ms_since(t1));
        }
        (outcome, copies)
    }
}

fn unsupported(e: crate::backend::CopyStartError) -> ErrorReport {
    ErrorReport::new(Phase::Copy, format!("--copy-in/--copy-out: {e}"))
        .with_hint(Some("copies need the native runtime (--runtime native)".into()))
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

/// A usage failure of a copy (both sides, or neither, name a sandbox).
pub fn usage(m: String) -> FilesError {
    FilesError::Sandbox(SandboxError::Usage(m))
}
