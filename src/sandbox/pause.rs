//! `husk pause` / `husk resume` from the caller's side: one request to
//! the sandbox's supervisor, which holds the pause from then on
//! (supervisor/pause.rs), so the caller may exit, or be killed, as soon as
//! it has the answer.

use super::SandboxError;
use super::proto::{Client, Reply, Request};
use super::state::Store;

/// Pauses the sandbox `target` (id or name); `reclaim`: and pushes its
/// memory out. Returns its id and the supervisor's answer.
pub fn pause(store: &Store, target: &str, reclaim: bool) -> Result<(String, Reply), SandboxError> {
    call(store, target, &Request::Pause { reclaim }, "pause refused")
}

/// Lets the sandbox `target` run again (a no-op if it is not paused).
pub fn resume(store: &Store, target: &str) -> Result<(String, Reply), SandboxError> {
    call(store, target, &Request::Resume, "resume refused")
}

fn call(store: &Store, target: &str, req: &Request, refused: &str) -> Result<(String, Reply), SandboxError> {
    let rec = super::registry::live_record(store, target)?;
    let c = Client::connect(&store.dir(&rec.id), rec.supervisor)?;
    let (reply, _) = c.call(req)?;
    if !reply.ok {
        return Err(SandboxError::Supervisor(reply.error.unwrap_or_else(|| refused.into())));
    }
    Ok((rec.id, reply))
}
