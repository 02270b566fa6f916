//! `POST /v1/sandboxes/{id}/fork` and `POST /v1/sandboxes/{id}/commit`:
//! the JSON body becomes the library's request (`build::fork`), one call,
//! the result as JSON (what `husk fork --json` / `husk commit --json`
//! print). Copies in and out are the files endpoint's (a tar stream each
//! way, docs/api.md).
//!
//! A fork starts supervisors, which keep every fd of the process that
//! forks them but stdio: this connection's socket among them, for the
//! sandboxes' lifetime. So the fork runs in a child of the connection's
//! process with a pipe as stdout (the answer) and one as stdin (the
//! confirmation) and no other fd; it keeps the forks' handover until the
//! answer was written to the client: an answer that could not be written
//! leaves no sandbox behind (as `husk fork` with a closed stdout).

use super::{ApiError, Ctx, Reply, body, json_bytes, status_of_step, with_api_state};
use crate::build::fork::{CommitRequest, ForkRequest, commit, commit_report, fork};
use crate::outcome::ErrorReport;
use crate::paths::Paths;
use crate::serve::http;
use crate::serve::server::Conn;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ForkBody {
    /// How many forks (default 1).
    count: Option<u32>,
    /// Labels of every fork (the source's are not copied).
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// Each fork's lease, "30s" or seconds (default: the source's).
    ttl: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommitBody {
    /// NAME[:TAG] of the new image.
    tag: String,
}

/// A library failure as serve answers every failure: the status of its
/// step, a missing sandbox as 404 `lookup`.
fn api_error(r: &ErrorReport) -> ApiError {
    let v = serde_json::to_value(r).unwrap_or_default();
    let step = v["step"].as_str().unwrap_or("husk").to_string();
    let message = v["message"].as_str().unwrap_or_default().to_string();
    let status = status_of_step(&step, &message);
    ApiError {
        status,
        step: if status == 404 { "lookup".into() } else { step },
        errno: v["errno"].clone(),
        message,
        hint: v["hint"].as_str().map(str::to_string),
        extra: None,
    }
}

/// The path segment naming the sandbox, refused as `lookup` refuses it
/// (it reaches the state dir).
fn check_target(what: &str) -> Result<(), ApiError> {
    if what.is_empty()
        || what.starts_with('-')
        || !what.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        return Err(ApiError::new(404, "lookup", format!("{what:?} is not a sandbox id or name")));
    }
    Ok(())
}

fn paths(ctx: &Ctx) -> Result<Paths, crate::paths::PathsError> {
    Paths::from_cli(ctx.root.as_deref(), ctx.state_dir.as_deref())
}

fn fork_request(ctx: &Ctx, what: &str, raw: &[u8]) -> Result<ForkRequest, ApiError> {
    check_target(what)?;
    let b: ForkBody = if raw.iter().all(u8::is_ascii_whitespace) { ForkBody::default() } else { body::parse(raw)? };
    let bad = |m: String| ApiError::new(400, "request", m).hint("see docs/api.md");
    let ttl = match &b.ttl {
        None => None,
        Some(v) => {
            let t = body::scalar("ttl", v)?;
            match crate::units::parse_duration(&t) {
                Ok(d) => Some(d),
                Err(e) => return Err(bad(format!("ttl {t:?}: {e}"))),
            }
        }
    };
    let mut labels = Vec::new();
    for (k, v) in &b.labels {
        if k.starts_with(crate::sandbox::pool::POOL_LABEL) || k == super::SERVE_LABEL {
            return Err(bad(format!("labels: {k:?} is reserved for husk serve")));
        }
        labels.push(format!("{k}={v}"));
    }
    // serve's own, so --destroy-on-exit removes the forks too.
    labels.push(format!("{}={}", super::SERVE_LABEL, ctx.address));
    Ok(ForkRequest { source: what.to_string(), count: b.count.unwrap_or(1), labels, ttl })
}

/// `POST /v1/sandboxes/{id}/fork`: `201 {"snapshot", "sandboxes": [...]}`.
pub(super) fn fork_route(ctx: &Ctx, what: &str, raw: &[u8], conn: &mut Conn) -> Result<Reply, ApiError> {
    let req = fork_request(ctx, what, raw)?;
    let internal = |what: &str, e: &dyn std::fmt::Display| ApiError::new(500, "serve", format!("{what}: {e}"));
    let (result_r, result_w) = nix::unistd::pipe().map_err(|e| internal("pipe", &e))?;
    let (confirm_r, confirm_w) = nix::unistd::pipe().map_err(|e| internal("pipe", &e))?;
    let one = crate::sys::process::SingleThreaded::check().map_err(|e| internal("forking the fork's process", &e))?;
    match crate::sys::process::fork(&one).map_err(|e| internal("forking the fork's process", &e))? {
        crate::sys::process::Forked::Child(_) => {
            drop((result_r, confirm_w));
            // The answer pipe on stdout and the confirmation on stdin, every
            // other fd closed: the forks' supervisors replace stdio with
            // /dev/null, so they keep nothing of this request.
            let wired = crate::sys::fd::dup_onto(result_w.as_raw_fd(), 1)
                .and_then(|()| crate::sys::fd::dup_onto(confirm_r.as_raw_fd(), 0))
                .and_then(|()| crate::sys::fd::close_from(3, crate::sys::fd::CloseRange::Close));
            let code = match wired {
                Ok(()) => fork_child(ctx, &req),
                Err(_) => 1,
            };
            crate::sys::process::exit_now(code)
        }
        crate::sys::process::Forked::Parent { pid, .. } => {
            drop((result_w, confirm_r));
            let mut confirm = std::fs::File::from(confirm_w);
            let reply = read_answer(std::fs::File::from(result_r)).map(|v| {
                if http::write_response(conn, 201, "application/json", &json_bytes(&v)).is_ok() {
                    let _ = confirm.write_all(b"1");
                }
                Reply::Streamed
            });
            // Unconfirmed (the answer was not written), the child removes
            // the forks once this end is closed.
            drop(confirm);
            let _ = nix::sys::wait::waitpid(pid, None);
            reply
        }
    }
}

/// In the fork's own process: the library call, its answer on `out` (a
/// length and the JSON), then the handover confirmed when the connection's
/// process says the answer was written (one byte on `confirm`).
fn fork_child(ctx: &Ctx, req: &ForkRequest) -> i32 {
    let mut out = std::io::stdout().lock();
    let forked = match fork(&paths(ctx), req) {
        Ok(f) => f,
        Err(e) => {
            let err = api_error(&e.report());
            let _ = send(&mut out, &json!({"error": {"status": err.status, "body": err.json()}}));
            return 0;
        }
    };
    let forks: Vec<Value> =
        forked.sandboxes.iter().map(|r| with_api_state(crate::sandbox::lifecycle::summary(r))).collect();
    if send(&mut out, &json!({"ok": {"snapshot": forked.snapshot, "sandboxes": forks}})).is_err() {
        return 1;
    }
    let mut byte = [0u8; 1];
    if matches!(std::io::stdin().lock().read(&mut byte), Ok(1)) && byte[0] == b'1' {
        forked.handover.confirm();
    }
    0
}

fn send(out: &mut impl Write, v: &Value) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    out.write_all(&(bytes.len() as u64).to_le_bytes())?;
    out.write_all(&bytes)?;
    out.flush()
}

/// The child's answer: the result, or the failure as it answers it (a
/// length, then the JSON; the child stays until the confirmation).
fn read_answer(mut r: std::fs::File) -> Result<Value, ApiError> {
    let lost =
        |e: std::io::Error| ApiError::new(500, "serve", format!("the fork's process ended without an answer: {e}"));
    let mut len = [0u8; 8];
    r.read_exact(&mut len).map_err(lost)?;
    let n = u64::from_le_bytes(len) as usize;
    let mut buf = vec![0u8; n];
    r.read_exact(&mut buf).map_err(lost)?;
    let v: Value = serde_json::from_slice(&buf)
        .map_err(|e| ApiError::new(500, "serve", format!("the fork's process answered no JSON: {e}")))?;
    if let Some(ok) = v.get("ok") {
        return Ok(ok.clone());
    }
    let e = &v["error"];
    let b = &e["body"]["error"];
    Err(ApiError {
        status: e["status"].as_u64().unwrap_or(500) as u16,
        step: b["step"].as_str().unwrap_or("serve").to_string(),
        errno: b["errno"].clone(),
        message: b["message"].as_str().unwrap_or_default().to_string(),
        hint: b["hint"].as_str().map(str::to_string),
        extra: None,
    })
}

/// `POST /v1/sandboxes/{id}/commit`: `201` with what `husk commit --json`
/// prints. No supervisor is started, so it runs in the connection's process.
pub(super) fn commit_route(ctx: &Ctx, what: &str, raw: &[u8]) -> Result<Reply, ApiError> {
    check_target(what)?;
    let b: CommitBody = body::parse(raw)?;
    let req = CommitRequest { sandbox: what.to_string(), name: b.tag };
    match commit(&paths(ctx), &req) {
        Ok(c) => Ok(Reply::Json(201, serde_json::to_value(&c).unwrap_or_default())),
        Err(e) => Err(api_error(&commit_report(&e))),
    }
}
