//! `POST /v1/sandboxes/{id}/pause` and `/resume`: `husk pause|resume
//! --json` (src/cmd/pause.rs); the answer is the sandbox's record, as
//! `GET /v1/sandboxes/{id}` gives it (state PAUSED or READY).

use super::{ApiError, Ctx, Reply, body, lookup, run_json, with_api_state};
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
    let mut args = vec!["pause", "--json"];
    if b.memory_reclaim {
        args.push("--memory-reclaim");
    }
    args.push(&id);
    let done = run_json(ctx, &args)?;
    let mut v = with_api_state(run_json(ctx, &["inspect", &id])?);
    if let Some(n) = done.get("reclaimed_bytes") {
        v["reclaimed_bytes"] = n.clone();
    }
    Ok(Reply::Json(200, v))
}

pub(super) fn resume(ctx: &Ctx, what: &str) -> Result<Reply, ApiError> {
    let id = lookup(ctx, what)?;
    run_json(ctx, &["resume", "--json", &id])?;
    Ok(Reply::Json(200, with_api_state(run_json(ctx, &["inspect", &id])?)))
}
