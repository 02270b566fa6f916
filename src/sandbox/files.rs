//! Files in and out of a live sandbox: the library behind `husk cp` (and
//! the files endpoints of `husk serve`). A copy is admitted like an exec
//! (the supervisor's busy / `--wait` rules, the lease renewed, the exec's
//! cgroup leaf), planned as the exec's user would be, and done by a copier
//! the sandbox's backend starts inside (`backend::start_copy`); the host
//! side only produces or consumes a tar stream (`copy::pack`,
//! `copy::unpack`).
//!
//! - `put_tar` / `get_tar`: a tar stream in or out;
//! - `put_with` / `get_with`: the same with the host side's own packer or
//!   unpacker (`husk cp` from or to a host path);
//! - `put_file` / `get_file`: one regular file's bytes;
//! - `list`: one directory's entries.

use super::SandboxError;
use super::proto::Client;
use super::state::{Record, Store};
use crate::backend::CopyStartError;
use crate::backend::native::copy::{Copier, CopierError, Inside};
use crate::copy::unpack::Shape;
use crate::copy::{CopyError, Limits, Report};
use crate::outcome::ErrorReport;
use crate::spec::ExecSpec;
use crate::step::Phase;
use std::io::{Read, Write};

/// Which sandbox, as whom, and how much.
#[derive(Clone, Debug, Default)]
pub struct Files {
    /// Id, name or id prefix.
    pub target: String,
    /// The user files are read and written as (default: the sandbox's).
    pub user: Option<String>,
    /// Queue behind a running exec instead of failing with "busy".
    pub wait: bool,
    pub limits: Limits,
}

#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("{0}")]
    Start(String, Option<crate::sys::Errno>),
    /// The copy failed inside the sandbox.
    #[error("in sandbox {id}: {error}")]
    Inside { id: String, error: CopyError, hint: Option<String> },
    /// The copy failed on the host's side (its path, or the stream).
    #[error("{0}")]
    Host(CopyError),
}

impl FilesError {
    pub fn hint(&self) -> Option<&str> {
        match self {
            FilesError::Sandbox(e) => e.hint(),
            FilesError::Inside { hint, .. } => hint.as_deref(),
            _ => None,
        }
    }

    /// The failure as a verdict's `error` reports it.
    pub fn report(&self) -> ErrorReport {
        match self {
            FilesError::Sandbox(e) => e.report(),
            FilesError::Start(m, errno) => ErrorReport::new(Phase::Copy, m.clone()).with_errno(*errno),
            FilesError::Inside { error, hint, .. } => {
                ErrorReport::new(Phase::Copy, self.to_string()).with_errno(error.errno()).with_hint(hint.clone())
            }
            FilesError::Host(e) => ErrorReport::new(Phase::Copy, self.to_string()).with_errno(e.errno()),
        }
    }
}

/// A copy admitted by the supervisor: its connection is held (the copy
/// counts as a running exec) until this is dropped.
struct Admitted {
    rec: Record,
    client: Client,
    copier: Copier,
}

/// `path` inside the sandbox, absolute: relative paths are the workdir's.
fn in_sandbox(rec: &Record, path: &str) -> String {
    if path.starts_with('/') { path.to_string() } else { format!("{}/{path}", rec.workdir.trim_end_matches('/')) }
}

fn admit(store: &Store, f: &Files, op: impl FnOnce(&Record) -> Inside) -> Result<Admitted, FilesError> {
    let rec = super::registry::live_record(store, &f.target)?;
    crate::backend::copy_supported(&rec.backend).map_err(|e| FilesError::Start(e.to_string(), None))?;
    let x = ExecSpec { argv: vec!["husk-cp".into()], user: f.user.clone(), ..Default::default() };
    let plan = super::held::plan_in(&rec, &x, crate::spawn::now_ns())?;
    let client = Client::connect(&store.dir(&rec.id), rec.supervisor)?;
    let req =
        super::proto::Request::Exec { wait: f.wait, exec_id: None, warm: false, ready_check: false, timeout_ms: None };
    let (reply, fds) = super::exec::admit(&client, &rec, req, "copy")?;
    let state_dir = store.state_dir();
    // A copy captures no output: nothing to hide.
    let nothing = crate::redact::Redaction::none();
    let at = super::exec::attached(&rec, &state_dir, &reply, fds, None, None, &nothing);
    let copier = crate::backend::start_copy(&rec.backend, &plan, at, op(&rec), f.limits).map_err(|e| {
        let errno = match &e {
            CopyStartError::Copier(CopierError::Step(s)) => Some(s.errno),
            CopyStartError::Copier(CopierError::Clone(e) | CopierError::Channel(e)) => Some(*e),
            _ => None,
        };
        FilesError::Start(format!("sandbox {}: {e}", rec.id), errno)
    })?;
    Ok(Admitted { rec, client, copier })
}

/// Where a sandbox's files may be written, for an EROFS.
fn writable_places(rec: &Record) -> String {
    let mut places = vec![format!("the workdir {}", rec.workdir), "/tmp".to_string()];
    places.extend(rec.spec.tmpfs.iter().map(|t| t.target.clone()));
    places
        .extend(rec.spec.binds.iter().filter(|b| b.access == crate::spec::Access::ReadWrite).map(|b| b.target.clone()));
    format!(
        "sandbox {}'s root is read-only; write into {}, or create the sandbox with --writable",
        rec.id,
        places.join(", ")
    )
}

fn inside(rec: &Record, error: CopyError) -> FilesError {
    let hint = match error.errno() {
        Some(crate::sys::Errno::EROFS) => Some(writable_places(rec)),
        Some(crate::sys::Errno::EACCES | crate::sys::Errno::EPERM) => Some(format!(
            "the copy runs as the sandbox's user ({}); pick a place that user may write, or pass --user",
            rec.spec.user.as_deref().unwrap_or("its default")
        )),
        _ => None,
    };
    FilesError::Inside { id: rec.id.clone(), error, hint }
}

/// Which side's failure explains a copy that failed on both: the side
/// that reads the stream fails because the writer stopped (a truncated
/// stream), the writer because the reader stopped (EPIPE).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    In,
    Out,
}

impl Admitted {
    /// Ends the copy: the copier's report, then the connection (the
    /// supervisor renews the lease and removes the leaf).
    fn finish(self, host: Result<(), CopyError>, dir: Direction) -> Result<Report, FilesError> {
        let Admitted { rec, client, copier } = self;
        let inside_result = copier.finish();
        drop(client);
        match (host, inside_result) {
            (Ok(()), Ok(r)) => Ok(r),
            (Err(h), Err(CopierError::Copy(e))) if dir == Direction::Out && !is_pipe(&e) || is_pipe(&h) => {
                Err(inside(&rec, e))
            }
            (Err(h), _) => Err(FilesError::Host(h)),
            (Ok(()), Err(CopierError::Copy(e))) => Err(inside(&rec, e)),
            (Ok(()), Err(e)) => Err(FilesError::Start(format!("sandbox {}: {e}", rec.id), None)),
        }
    }
}

/// A failure that only says the other end stopped.
fn is_pipe(e: &CopyError) -> bool {
    e.errno() == Some(crate::sys::Errno::EPIPE)
}

/// Copies into the sandbox: `source` writes a tar stream, which is
/// unpacked at `dest` (`Shape::Tree`: `cp`'s naming; `Shape::Entries`:
/// into the existing directory `dest`).
pub fn put_with(
    store: &Store,
    f: &Files,
    dest: &str,
    shape: Shape,
    source: &mut dyn FnMut(&mut dyn Write) -> Result<(), CopyError>,
) -> Result<Report, FilesError> {
    let a = admit(store, f, |rec| Inside::Put { dest: in_sandbox(rec, dest), shape })?;
    let mut pipe = std::fs::File::from(a.copier.data.try_clone().map_err(|e| FilesError::Host(io_err(e)))?);
    let host = source(&mut pipe);
    drop(pipe);
    a.finish(host, Direction::In)
}

/// Copies out of the sandbox: `path` is packed there, and `sink` reads the
/// tar stream (to its end-of-archive marker; the rest is drained here).
pub fn get_with(
    store: &Store,
    f: &Files,
    path: &str,
    sink: &mut dyn FnMut(&mut dyn Read) -> Result<(), CopyError>,
) -> Result<Report, FilesError> {
    let a = admit(store, f, |rec| Inside::Get { path: in_sandbox(rec, path) })?;
    let mut pipe = std::fs::File::from(a.copier.data.try_clone().map_err(|e| FilesError::Host(io_err(e)))?);
    let host =
        sink(&mut pipe).and_then(|()| std::io::copy(&mut pipe, &mut std::io::sink()).map(|_| ()).map_err(io_err));
    drop(pipe);
    a.finish(host, Direction::Out)
}

/// A tar stream from `input`, unpacked in the sandbox.
pub fn put_tar(store: &Store, f: &Files, dest: &str, shape: Shape, input: &mut dyn Read) -> Result<Report, FilesError> {
    put_with(store, f, dest, shape, &mut |w| std::io::copy(input, w).map(|_| ()).map_err(io_err))
}

/// `path` in the sandbox as a tar stream to `out`, checked on the way
/// (names, bounds: `copy::relay`).
pub fn get_tar(store: &Store, f: &Files, path: &str, out: &mut dyn Write) -> Result<Report, FilesError> {
    let limits = f.limits;
    get_with(store, f, path, &mut |r| crate::copy::relay(r, &mut *out, limits).map(|_| ()))
}

/// One file's bytes (`size` of them, from `data`) written at `dest` with
/// `mode`, as the sandbox's user.
pub fn put_file(
    store: &Store,
    f: &Files,
    dest: &str,
    data: &mut dyn Read,
    size: u64,
    mode: u32,
) -> Result<Report, FilesError> {
    let Some((_, name)) = crate::copy::split_path(dest) else {
        return Err(FilesError::Host(CopyError::BadName { name: dest.into(), why: "name a file".into() }));
    };
    let name = name.to_string();
    put_with(store, f, dest, Shape::Tree, &mut |w| crate::copy::single_file(w, name.as_bytes(), data, size, mode))
}

/// The bytes of the regular file `path` in the sandbox, to `out`.
pub fn get_file(store: &Store, f: &Files, path: &str, out: &mut dyn Write) -> Result<Report, FilesError> {
    get_with(store, f, path, &mut |r| crate::copy::file_of(r, &mut *out, path))
}

/// The entries of the directory `path` in the sandbox.
pub fn list(store: &Store, f: &Files, path: &str) -> Result<Vec<crate::copy::list::Entry>, FilesError> {
    let a = admit(store, f, |rec| Inside::List { path: in_sandbox(rec, path) })?;
    let mut pipe = std::fs::File::from(a.copier.data.try_clone().map_err(|e| FilesError::Host(io_err(e)))?);
    let mut text = Vec::new();
    // Bounded: a listing of max_entries names of at most 255 bytes each.
    let cap = f.limits.max_entries.saturating_mul(512).saturating_add(4096);
    let host = Read::by_ref(&mut pipe).take(cap).read_to_end(&mut text).map(|_| ()).map_err(io_err);
    drop(pipe);
    a.finish(host, Direction::Out)?;
    serde_json::from_slice(&text).map_err(|e| FilesError::Host(CopyError::Stream(format!("the listing: {e}"))))
}

fn io_err(e: std::io::Error) -> CopyError {
    match e.raw_os_error() {
        Some(n) => CopyError::Fs { path: "the stream".into(), errno: crate::sys::Errno::from_raw(n) },
        None => CopyError::Stream(e.to_string()),
    }
}
