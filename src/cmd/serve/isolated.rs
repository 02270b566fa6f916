//! `sandbox::create` in a child of serve's own: the library call forks the
//! sandbox's supervisor, which keeps every fd its caller has open, and must
//! not keep a client's connection (a connection's process) or the listening
//! socket and pending connections (the loop, refilling pools). The child
//! holds nothing but stdin (/dev/null), stdout (where it answers) and
//! stderr, makes the sandbox, answers, and confirms the handover once the
//! answer is written (as `husk create` does once the id is printed).
//! This is a fork, not a program: no argv, no re-parsing.

use crate::outcome::ErrorReport;
use crate::paths::{Paths, PathsError};
use crate::sandbox::CreateOptions;
use crate::sys::process::{Forked, SingleThreaded};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The child's answer: one JSON line on its stdout.
#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// The record as `husk create --json` prints it.
    Created(Value),
    /// The failure (`ErrorReport`'s JSON) and the keys beyond it
    /// (`sandbox_id`, `ready_check`).
    Failed { error: Value, extra: BTreeMap<String, Value> },
}

/// Why no child was started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("forking for the create: {0}")]
    Threads(#[from] crate::sys::process::ThreadsError),
    #[error("forking for the create: {0}")]
    Fork(crate::sys::Errno),
}

/// Forks the child; returns its pid. `stdout`/`stderr`: where it answers
/// and where its own complaints go.
pub fn spawn(
    opts: &CreateOptions,
    paths: &Result<Paths, PathsError>,
    stdout: BorrowedFd<'_>,
    stderr: BorrowedFd<'_>,
) -> Result<nix::unistd::Pid, SpawnError> {
    let one = SingleThreaded::check()?;
    match crate::sys::process::fork(&one).map_err(SpawnError::Fork)? {
        Forked::Parent { pid, .. } => Ok(pid),
        Forked::Child(_) => {
            let code = child(opts, paths, stdout.as_raw_fd(), stderr.as_raw_fd());
            crate::sys::process::exit_now(code)
        }
    }
}

fn child(opts: &CreateOptions, paths: &Result<Paths, PathsError>, stdout: i32, stderr: i32) -> i32 {
    use std::io::Write;
    let null = std::fs::File::open("/dev/null");
    let wired = null.map_err(|e| e.to_string()).and_then(|null| {
        let dup = |from, to| crate::sys::fd::dup_onto(from, to).map_err(|e| e.to_string());
        dup(null.as_raw_fd(), 0)?;
        dup(stdout, 1)?;
        dup(stderr, 2)?;
        drop(null);
        crate::sys::fd::close_from(3, crate::sys::fd::CloseRange::Close).map_err(|e| e.to_string())
    });
    if let Err(e) = wired {
        let _ = writeln!(std::io::stderr(), "husk serve: the create's stdio: {e}");
        return crate::outcome::EXIT_HUSK_FAILED;
    }
    let answer = |a: &Answer| -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer(&mut out, a)?;
        out.write_all(b"\n")?;
        out.flush()
    };
    match crate::sandbox::create(opts, paths) {
        Ok(created) => {
            if answer(&Answer::Created(created.summary())).is_ok() {
                created.confirm();
                0
            } else {
                // Nobody learned the id.
                let _ = crate::sandbox::lifecycle::store_of(paths).and_then(|s| created.abandon(&s));
                crate::outcome::EXIT_HUSK_FAILED
            }
        }
        Err(e) => {
            let extra = e.extra().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            let report: ErrorReport = e.report();
            let error = serde_json::to_value(&report).unwrap_or(Value::Null);
            let _ = answer(&Answer::Failed { error, extra });
            crate::outcome::EXIT_HUSK_FAILED
        }
    }
}

/// Reads a child's answer (its whole stdout).
pub fn read_answer(out: &[u8]) -> Result<Answer, serde_json::Error> {
    serde_json::from_slice(out)
}
