//! Running something in a sandbox for an E2B request, through the library
//! (`sandbox::exec`), from this connection's process.

use super::super::{ApiError, Ctx};
use crate::outcome::{Outcome, Termination};
use crate::sandbox::exec::{ExecRequest, ExecResult};
use crate::spec::ExecSpec;
use base64::Engine;
use serde_json::Value;
use std::os::fd::{AsRawFd, OwnedFd};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Output kept of a helper command (stat, mkdir): small by nature.
const HELPER_CAPTURE: u64 = 1 << 20;

/// The exec's stdin is this process's fd 0 (as `husk exec`'s is the
/// terminal's): point it at `/dev/null` unless the caller gives one.
pub fn stdin_null() -> Result<(), ApiError> {
    let null = std::fs::File::open("/dev/null").map_err(|e| ApiError::new(500, "serve", format!("/dev/null: {e}")))?;
    crate::sys::fd::dup_onto(null.as_raw_fd(), 0).map_err(|e| ApiError::new(500, "serve", format!("dup2: {e}")))
}

/// The request for `argv` in sandbox `id`: queued behind others rather than
/// refused (the SDK has no "busy" answer to give its caller).
pub fn request(id: &str, argv: Vec<String>) -> ExecRequest {
    ExecRequest {
        target: id.to_string(),
        wait: true,
        exec: ExecSpec { argv, ..Default::default() },
        ready_check: false,
        // Its own: the sandbox's secrets join it when the exec asks.
        redact: crate::redact::Redaction::none(),
    }
}

/// `sh -c SCRIPT sh ARGS...` in the sandbox, output captured: the exit
/// status and stdout/stderr text.
pub struct Ran {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

pub fn sh(ctx: &Ctx, id: &str, user: Option<String>, script: &str, args: &[&str]) -> Result<Ran, ApiError> {
    let mut argv = vec!["sh".to_string(), "-c".into(), script.into(), "sh".into()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let mut req = request(id, argv);
    req.exec.user = user;
    req.exec.capture = Some(HELPER_CAPTURE);
    stdin_null()?;
    let r = exec(ctx, &req)?;
    let o = r.outcome;
    if o.termination == Termination::SetupFailed {
        return Err(setup_failed(&o));
    }
    let text = |c: Option<crate::capture::Captured>| c.map(|c| c.text).unwrap_or_default();
    Ok(Ran { status: o.status, stdout: text(o.stdout), stderr: text(o.stderr) })
}

pub fn exec(ctx: &Ctx, req: &ExecRequest) -> Result<ExecResult, ApiError> {
    let store = super::super::store(ctx)?;
    crate::sandbox::exec::exec(store, req, crate::spawn::now_ns()).map_err(|e| ApiError::of_sandbox(&e))
}

/// A command that never started.
pub fn setup_failed(o: &Outcome) -> ApiError {
    let (step, message, hint) = match &o.error {
        Some(e) => (e.step.name().to_string(), e.message.clone(), e.hint.clone()),
        None => ("exec".to_string(), "the command did not start".to_string(), None),
    };
    let status = if step == "busy" { 409 } else { 500 };
    ApiError { status, step, errno: serde_json::Value::Null, message, hint, extra: None }
}

/// Runs `run` with a tap whose output a relay writes to `out` as `event`s,
/// and waits for the relay to have written all of it. `Err`: nothing ran.
/// Start the cancel watcher before: it must not hold the pipe's write
/// end, or the relay would never see the end of the output.
pub fn tapped<R>(
    out: std::io::Result<OwnedFd>,
    event: Event,
    redact: &crate::redact::Redaction,
    run: impl FnOnce(&crate::stream::Tap) -> R,
) -> Result<R, RelayError> {
    let out = out.map_err(RelayError::Dup)?;
    let (rx, tx) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(RelayError::Pipe)?;
    let (relay, tx) = Relay::start(out, rx, tx, event)?;
    let tap = crate::stream::Tap::new(tx, redact);
    let r = run(&tap);
    tap.flush();
    drop(tap);
    relay.wait();
    Ok(r)
}

/// Why the relay of an exec's output could not start (nothing ran).
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("duplicating the connection for the relay: {0}")]
    Dup(std::io::Error),
    #[error("the relay's pipe: {0}")]
    Pipe(nix::errno::Errno),
    #[error("the relay: {0}")]
    Threads(#[from] crate::sys::process::ThreadsError),
    #[error("forking the relay: {0}")]
    Fork(nix::errno::Errno),
}

/// How a relay words one chunk of output ("stdout" or "stderr").
pub type Event = fn(&str, &[u8]) -> Vec<u8>;

/// A forked process that turns the exec's tap (NDJSON chunks, from a pipe)
/// into the protocol's output events on the client's socket, while this
/// process, single-threaded, runs the exec.
pub struct Relay {
    pid: nix::unistd::Pid,
}

impl Relay {
    fn start(out: OwnedFd, rx: OwnedFd, tx: OwnedFd, event: Event) -> Result<(Relay, OwnedFd), RelayError> {
        let one = crate::sys::process::SingleThreaded::check()?;
        match crate::sys::process::fork(&one).map_err(RelayError::Fork)? {
            crate::sys::process::Forked::Child(_) => {
                // Only the tap writes: the relay reads to the end.
                drop(tx);
                relay(out, rx, event);
                crate::sys::process::exit_now(0)
            }
            crate::sys::process::Forked::Parent { pid, .. } => Ok((Relay { pid }, tx)),
        }
    }

    fn wait(self) {
        let _ = nix::sys::wait::waitpid(self.pid, None);
    }
}

fn relay(out: OwnedFd, rx: OwnedFd, event: Event) {
    use std::io::{BufRead, Write};
    let mut out = std::fs::File::from(out);
    let lines = std::io::BufReader::new(std::fs::File::from(rx));
    for line in lines.lines() {
        let Ok(line) = line else { return };
        let Ok(c) = serde_json::from_str::<Value>(&line) else { continue };
        let bytes = match (c["data"].as_str(), c["data_b64"].as_str()) {
            (Some(d), _) => d.as_bytes().to_vec(),
            (_, Some(b)) => B64.decode(b).unwrap_or_default(),
            _ => continue,
        };
        let which = if c["stream"] == "stderr" { "stderr" } else { "stdout" };
        // A client gone: keep reading, so the command is never blocked on
        // a full pipe (the watcher ends it).
        let _ = out.write_all(&event(which, &bytes));
    }
}
