//! Finding a sandbox and knowing whether it lives. Above both its state on
//! disk (`state`) and its supervisor's socket (`proto`): the record says
//! which supervisor to ask, the supervisor says what is true right now, and
//! a sandbox whose supervisor is gone is swept on the way (`gc`).

use super::SandboxError;
use super::proto::{Client, Request};
use super::state::{self, Record, State, Store};

/// The record as its supervisor holds it right now (ordered after every
/// request before this one); state.json when the supervisor does not
/// answer within a second.
pub fn current(store: &Store, id: &str) -> Result<Record, SandboxError> {
    let rec = store.read(id)?;
    let live = Client::connect(&store.dir(id), rec.supervisor)
        .map(|c| c.timeout(std::time::Duration::from_secs(1)))
        .and_then(|c| c.call(&Request::Status));
    let mut rec = rec;
    if let Ok((reply, _)) = live
        && let Some(state) = reply.state
    {
        rec.state = state;
        rec.active_execs = reply.active_execs;
        rec.execs = reply.exec;
        rec.expires_ms = reply.expires_ms;
        rec.ttl_ms = reply.ttl_ms;
        rec.events = reply.events;
        rec.network = reply.network.map(|n| *n);
    }
    Ok(rec)
}

/// `ID`, `NAME` or a unique id prefix -> id; one that ended recently is
/// reported as such (`sandbox ... expired at ...`), not as unknown.
pub fn resolve(store: &Store, what: &str) -> Result<String, SandboxError> {
    store.resolve(what).map_err(|e| match e {
        SandboxError::Unknown { .. } => super::tombstone::find(store, what).map(|t| t.error()).unwrap_or(e),
        e => e,
    })
}

/// Finds a sandbox that can take an exec; a dead one is cleaned up and
/// reported as gone.
pub fn live_record(store: &Store, target: &str) -> Result<Record, SandboxError> {
    live_record_for(store, target, false)
}

/// `live_record`; `creating`: a CREATING sandbox is taken too (its
/// create's readiness check, `husk create --ready-cmd`).
pub fn live_record_for(store: &Store, target: &str, creating: bool) -> Result<Record, SandboxError> {
    let id = resolve(store, target)?;
    let dir = store.dir(&id);
    // Its supervisor may have removed it since the lookup: say how it ended.
    let rec =
        state::read_record(&dir).map_err(|e| super::tombstone::find(store, &id).map(|t| t.error()).unwrap_or(e))?;
    if !state::supervised(&dir) {
        return Err(swept(store, id));
    }
    match rec.state {
        // A paused sandbox's supervisor answers (resume, renew; an exec is
        // refused naming `husk resume`).
        State::Ready | State::Executing | State::Paused => Ok(rec),
        State::Creating if creating => Ok(rec),
        State::Creating => Err(SandboxError::Gone {
            id,
            state: "still being created",
            why: Some("its --ready-cmd check runs; it takes execs once husk create has returned".into()),
        }),
        s => Err(SandboxError::Gone { id, state: s.name(), why: rec.error.clone() }),
    }
}

/// A sandbox whose supervisor is no longer running (SIGKILLed, say) is
/// gone, whatever its record still says: what remains of it is removed, and
/// the error says so.
pub fn swept(store: &Store, id: String) -> SandboxError {
    let why = match super::gc::sweep_one(store, &id) {
        Some(Err(e)) => {
            format!("its supervisor is no longer running, and removing what remained failed: {e}; `husk gc` retries")
        }
        _ => "its supervisor is no longer running; husk removed what remained".into(),
    };
    SandboxError::Gone { id, state: "gone", why: Some(why) }
}

/// Every live sandbox's record (dead ones are removed on the way).
pub fn records(store: &Store) -> Vec<Record> {
    let _ = super::gc::sweep(store);
    store.ids().iter().filter_map(|id| current(store, id).ok()).collect()
}
