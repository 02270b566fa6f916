//! The sandbox routes: JSON bodies into typed requests (body.rs), one
//! library call each, its typed result or error into JSON. No husk command
//! line is built or parsed here.
//!
//! create forks (isolated.rs): the library forks the sandbox's supervisor,
//! which must not inherit this connection. exec, list, inspect, renew and
//! destroy run in this connection's own process (`serve::server` forks one
//! per connection), the exec with its stdin on a memory file at fd 0 and,
//! streamed, its events written onto the connection.

use super::body::{self, CreateBody, ExecBody, RenewBody};
use super::isolated::{self, Answer};
use super::{ApiError, Ctx, Reply, cancel, failure, lookup, status_of_step, store, with_api_state};
use crate::outcome::{Outcome, Verdict};
use crate::paths::Paths;
use crate::sandbox::{CreateOptions, SandboxError};
use crate::serve::http::{self, Head};
use crate::serve::server::Conn;
use serde_json::{Value, json};
use std::os::fd::AsFd;

/// A library error as the API answers it (the CLI's failure object, with
/// the status its step maps to).
pub fn api_error(e: &SandboxError) -> ApiError {
    failure(&json!(e.report()), serde_json::Map::new())
}

/// POST /v1/sandboxes without a pool (a claim is claim.rs's).
pub fn create(ctx: &Ctx, req: &CreateBody) -> Result<Reply, ApiError> {
    let opts = req.to_options(&ctx.address)?;
    Ok(Reply::Json(201, create_isolated(ctx, &opts)?))
}

/// `sandbox::create` in a child of this process (isolated.rs); the record
/// with the API's state names.
pub fn create_isolated(ctx: &Ctx, opts: &CreateOptions) -> Result<Value, ApiError> {
    use std::io::Read;
    let io = |what: &str, e: &dyn std::fmt::Display| ApiError::new(500, "create", format!("{what}: {e}"));
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| io("pipe2", &e))?;
    let paths = Paths::from_cli(ctx.root.as_deref(), ctx.state_dir.as_deref());
    let pid = isolated::spawn(opts, &paths, w.as_fd(), std::io::stderr().as_fd()).map_err(|e| io("create", &e))?;
    drop(w);
    let mut out = Vec::new();
    let read = std::fs::File::from(r).read_to_end(&mut out);
    let _ = nix::sys::wait::waitpid(pid, None);
    read.map_err(|e| io("reading the create's answer", &e))?;
    match isolated::read_answer(&out) {
        Ok(Answer::Created(v)) => Ok(with_api_state(v)),
        Ok(Answer::Failed { error, extra }) => Err(failure(&error, extra.into_iter().collect())),
        Err(e) => Err(io("the create ended without an answer", &e)),
    }
}

pub fn list(ctx: &Ctx, head: &Head) -> Result<Reply, ApiError> {
    let want = head
        .query_all("label")
        .map(crate::sandbox::state::parse_label)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| api_error(&e))?;
    let recs = crate::sandbox::list(store(ctx)?, &want);
    let items: Vec<Value> = recs.iter().map(|r| with_api_state(crate::sandbox::lifecycle::summary(r))).collect();
    Ok(Reply::Json(200, json!({"sandboxes": items})))
}

/// A live sandbox's record, as `husk inspect` prints it.
pub fn inspected(ctx: &Ctx, id: &str) -> Result<Value, ApiError> {
    crate::sandbox::inspect(store(ctx)?, id, false).map(with_api_state).map_err(|e| api_error(&e))
}

pub fn get(ctx: &Ctx, what: &str) -> Result<Reply, ApiError> {
    let id = match lookup(ctx, what) {
        Ok(id) => id,
        Err(e) => {
            // A sandbox that ended recently is DESTROYED, with how and when.
            if let Ok(store) = store(ctx)
                && let Some(t) = crate::sandbox::tombstone::find(store, what)
            {
                let mut v = serde_json::to_value(&t).unwrap_or(json!({}));
                v["state"] = json!("DESTROYED");
                v["lease_remaining_ms"] = json!(0);
                v["message"] = json!(t.error().to_string());
                return Ok(Reply::Json(200, v));
            }
            return Err(e);
        }
    };
    Ok(Reply::Json(200, inspected(ctx, &id)?))
}

pub fn destroy(ctx: &Ctx, what: &str) -> Result<Reply, ApiError> {
    let id = lookup(ctx, what)?;
    let targets = crate::sandbox::Targets { sandboxes: vec![id.clone()], ..Default::default() };
    let r = crate::sandbox::remove(store(ctx)?, &targets, false).map_err(|e| api_error(&e))?;
    if !r.errors.is_empty() {
        // As `husk rm --json` reports it: one failure naming each.
        let error = json!({"step": "sandbox", "message": r.errors.join("; ")});
        return Err(failure(&error, serde_json::Map::new()));
    }
    if !r.removed.contains(&id) {
        return Err(ApiError::new(500, "destroy", "the sandbox was not removed"));
    }
    Ok(Reply::Json(200, json!({"id": id, "destroyed": true})))
}

pub fn renew(ctx: &Ctx, what: &str, body: &[u8]) -> Result<Reply, ApiError> {
    let id = lookup(ctx, what)?;
    let req: RenewBody =
        if body.iter().all(u8::is_ascii_whitespace) { RenewBody::default() } else { body::parse(body)? };
    let ttl = req.ttl.as_ref().map(|t| body::duration("ttl", "ttl", t)).transpose()?;
    crate::sandbox::renew(store(ctx)?, &id, ttl).map_err(|e| api_error(&e))?;
    Ok(Reply::Json(200, inspected(ctx, &id)?))
}

fn wants_stream(head: &Head) -> bool {
    head.query("stream").is_some_and(|v| v == "1" || v == "true")
        || head.header("accept").is_some_and(|a| a.contains("application/x-ndjson"))
}

/// The exec's stdin: the body's bytes in a memory file at fd 0 (this
/// connection's process runs one request).
fn stdin_from(bytes: &[u8]) -> Result<(), ApiError> {
    use std::io::{Seek, Write};
    use std::os::fd::AsRawFd;
    let err = |what: &str, e: &dyn std::fmt::Display| ApiError::new(500, "serve", format!("{what}: {e}"));
    let mut f = nix::sys::memfd::memfd_create(c"husk-serve-stdin", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
        .map(std::fs::File::from)
        .map_err(|e| err("memfd_create", &e))?;
    f.write_all(bytes).and_then(|_| f.rewind()).map_err(|e| err("buffering stdin", &e))?;
    crate::sys::fd::dup_onto(f.as_raw_fd(), 0).map_err(|e| err("dup2", &e))
}

/// The verdict of an exec that could not start (as `husk exec` prints it).
fn not_started(e: &SandboxError) -> Outcome {
    Outcome::setup_failed(e.report())
}

pub fn exec(ctx: &Ctx, head: &Head, what: &str, body: &[u8], conn: &mut Conn, t_start: u64) -> Result<Reply, ApiError> {
    let id = lookup(ctx, what)?;
    let req: ExecBody = body::parse(body)?;
    let stream = wants_stream(head);
    let (opts, stdin) = req.to_options(&id, stream, ctx.code_timeout)?;
    let store = store(ctx)?;
    stdin_from(&stdin)?;
    if stream {
        http::write_stream_head(conn, 200, "application/x-ndjson")
            .map_err(|e| ApiError::new(500, "serve", e.to_string()))?;
        let watcher = cancel::Watcher::start(conn);
        let tap = conn.fd().try_clone_to_owned().map(crate::stream::Tap::new);
        let result = match &tap {
            Ok(tap) => crate::sandbox::exec_with(store, &opts, t_start, Some(tap)),
            Err(e) => Err(SandboxError::State(format!("duplicating the connection for the stream: {e}"))),
        };
        if let Ok(tap) = tap {
            tap.flush();
        }
        let failed;
        let verdict = match &result {
            Ok(r) => r.verdict(true),
            Err(e) => {
                failed = not_started(e);
                Verdict::new("", "native", &failed, None, true)
            }
        };
        let mut line = serde_json::to_vec(&json!({"verdict": verdict})).unwrap_or_default();
        line.push(b'\n');
        drop(watcher);
        // A client that left reads nothing more; the exec is over either way.
        let _ = std::io::Write::write_all(conn, &line);
        conn.finish();
        return Ok(Reply::Streamed);
    }
    // A client that goes away cancels its exec (nobody would read the verdict).
    let watcher = cancel::Watcher::start(conn);
    let result = crate::sandbox::exec_with(store, &opts, t_start, None);
    drop(watcher);
    let failed;
    let verdict = match &result {
        Ok(r) => r.verdict(true),
        Err(e) => {
            failed = not_started(e);
            Verdict::new("", "native", &failed, None, true)
        }
    };
    let mut bytes = serde_json::to_vec(&verdict).map_err(|e| ApiError::new(500, "serve", e.to_string()))?;
    bytes.push(b'\n');
    // The verdict whatever the command did; only a failure to reach the
    // sandbox at all (gone, busy) changes the status.
    let step = verdict.error.map(|e| e.step.to_string());
    let status = match (verdict.termination, step.as_deref()) {
        (crate::outcome::Termination::SetupFailed, Some(step @ ("busy" | "sandbox" | "arguments"))) => {
            status_of_step(step, "")
        }
        _ => 200,
    };
    Ok(Reply::Raw(status, "application/json", bytes))
}
