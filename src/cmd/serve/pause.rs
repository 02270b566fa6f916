//! `POST /v1/sandboxes/{id}/pause` and `/resume`: the library's pause and
//! resume (src/sandbox/pause.rs), as `husk pause|resume` call them; the answer is the sandbox's record, as
//! `GET /v1/sandboxes/{id}` gives it (state PAUSED or READY).

use super::sandboxes::api_error;
use super::{ApiError, Ctx, Reply, body, lookup};
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PauseBody {
    /// `husk pause --memory-reclaim`.
    #[serde(default)]
    memory_reclaim: bool,
}

pub(super) fn pause(ctx: &Ctx, what: &str, req: &[u8]) -> Result<Reply, ApiError> {
    let id = lookup(ctx, what)?;
    let b: PauseBody = if req.iter().all(u8::is_ascii_whitespace) { PauseBody::default() } else { body::parse(req)? };
    let store = super::store(ctx)?;
    let (_, done) = crate::sandbox::pause::pause(store, &id, b.memory_reclaim).map_err(|e| api_error(&e))?;
    let mut v = super::sandboxes::inspected(ctx, &id)?;
    if let Some(n) = done.reclaimed_bytes {
        v["reclaimed_bytes"] = serde_json::json!(n);
    }
    Ok(Reply::Json(200, v))
}

pub(super) fn resume(ctx: &Ctx, what: &str) -> Result<Reply, ApiError> {
    let id = lookup(ctx, what)?;
    crate::sandbox::pause::resume(super::store(ctx)?, &id).map_err(|e| api_error(&e))?;
    Ok(Reply::Json(200, super::sandboxes::inspected(ctx, &id)?))
}
