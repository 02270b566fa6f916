//! `PUT|GET /v1/sandboxes/{id}/files`: files in and out of a live
//! sandbox through `sandbox::files`, the code `husk cp` runs (a copier
//! inside the sandbox: RESOLVE_IN_ROOT, the sandbox's user, bounds), in
//! this connection's own process.
//!
//! - `GET ?path=P`: the regular file P's bytes (`application/octet-stream`);
//!   `&format=tar` (or `Accept: application/x-tar`): P, file or tree, as a
//!   tar stream; `&list=1`: the directory P's entries as JSON.
//! - `PUT ?path=P`: the body is the file P's bytes (`&mode=644`, octal);
//!   with `Content-Type: application/x-tar` it is a tar stream unpacked into
//!   the existing directory P.
//! - `&user=NAME|UID[:GID]` reads and writes as that user; `&wait=1` queues
//!   behind a running exec instead of 409.

use super::ApiError;
use crate::copy::CopyError;
use crate::copy::unpack::Shape;
use crate::sandbox::files::{self, Files, FilesError};
use crate::sandbox::state::Store;
use crate::serve::http::Head;
use crate::sys::Errno;
use serde_json::{Value, json};

/// A GET answers from memory: at most this much file data.
pub const MAX_GET_BYTES: u64 = 256 << 20;

/// What the route gives back: JSON, or bytes with their content type.
pub enum Answer {
    Json(u16, Value),
    Bytes(&'static str, Vec<u8>),
}

fn files_of(head: &Head, id: &str) -> Files {
    let on = |k: &str| head.query(k).is_some_and(|v| v == "1" || v == "true");
    Files {
        target: id.to_string(),
        user: head.query("user").map(str::to_string),
        wait: on("wait"),
        limits: crate::copy::Limits { max_bytes: MAX_GET_BYTES, ..Default::default() },
    }
}

fn path_of(head: &Head) -> Result<&str, ApiError> {
    match head.query("path") {
        Some(p) if !p.is_empty() && !p.contains('\0') => Ok(p),
        _ => Err(ApiError::new(400, "request", "name the file: ?path=/ABS/PATH (or relative to the workdir)")
            .hint("see docs/api.md, files")),
    }
}

pub fn get(store: &Store, head: &Head, id: &str) -> Result<Answer, ApiError> {
    let path = path_of(head)?;
    let f = files_of(head, id);
    if head.query("list").is_some_and(|v| v == "1" || v == "true") {
        let entries = files::list(store, &f, path).map_err(|e| error(&e))?;
        return Ok(Answer::Json(200, json!({"path": path, "entries": entries})));
    }
    let tar = head.query("format") == Some("tar") || head.header("accept").is_some_and(|a| a.contains("x-tar"));
    let mut out = Vec::new();
    if tar {
        files::get_tar(store, &f, path, &mut out).map_err(|e| error(&e))?;
        Ok(Answer::Bytes("application/x-tar", out))
    } else {
        files::get_file(store, &f, path, &mut out).map_err(|e| error(&e))?;
        Ok(Answer::Bytes("application/octet-stream", out))
    }
}

pub fn put(store: &Store, head: &Head, id: &str, body: &[u8]) -> Result<Answer, ApiError> {
    let path = path_of(head)?;
    let mut f = files_of(head, id);
    f.limits.max_bytes = u64::MAX;
    let tar = head.header("content-type").is_some_and(|t| t.contains("x-tar"));
    let report = if tar {
        files::put_tar(store, &f, path, Shape::Entries, &mut &body[..])
    } else {
        let mode = match head.query("mode") {
            None => 0o644,
            Some(m) => u32::from_str_radix(m, 8).ok().filter(|m| *m <= 0o7777).ok_or_else(|| {
                ApiError::new(400, "request", format!("mode {m:?}: give octal permissions like 644 or 755"))
            })?,
        };
        files::put_file(store, &f, path, &mut &body[..], body.len() as u64, mode)
    }
    .map_err(|e| error(&e))?;
    Ok(Answer::Json(200, json!({"path": path, "entries": report.entries, "bytes": report.bytes})))
}

/// A copy's failure as the API answers it: verdict-shaped, step "copy"
/// (a sandbox that is not there or busy keeps its lookup/busy answer).
fn error(e: &FilesError) -> ApiError {
    if let FilesError::Sandbox(s) = e {
        return ApiError::of_sandbox(s);
    }
    let r = e.report();
    let status = match e {
        FilesError::Inside { error, .. } | FilesError::Host(error) => match error {
            CopyError::NotFound { .. } | CopyError::Fs { errno: Errno::ENOENT, .. } => 404,
            CopyError::Fs { errno: Errno::EROFS | Errno::EACCES | Errno::EPERM, .. } => 403,
            CopyError::TooBig { .. } | CopyError::TooManyEntries { .. } => 413,
            CopyError::Fs { .. } | CopyError::Stream(_) => 500,
            _ => 400,
        },
        _ => 500,
    };
    let errno = r.errno.map_or(Value::Null, |e| json!(format!("{e:?}")));
    ApiError { status, step: r.step.name().to_string(), errno, message: r.message, hint: r.hint, extra: None }
}
