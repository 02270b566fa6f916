//! Pool members and their claim. A member of a `husk serve --pool` is an
//! ordinary sandbox (made by `husk create`, its own supervisor, READY with
//! nothing of anyone's running) that carries the label `husk.pool=NAME`.
//! Claiming it is one request to its supervisor (`Request::Claim`), which
//! answers requests one at a time: of two claims of one member exactly one
//! wins, and the winner's labels, name and lease replace the pool label for
//! good, so the member can never be handed out twice (single use).
//! Who keeps pools filled is `husk serve`'s business (cmd/serve/pool.rs);
//! nothing here keeps state.

use super::SandboxError;
use super::proto::{Client, Request};
use super::state::{Record, State, Store};
use std::collections::BTreeMap;
use std::time::Duration;

/// An unclaimed member's pool.
pub const POOL_LABEL: &str = "husk.pool";
/// A digest of the spec a member was made with: a restarted serve adopts
/// members whose spec is the pool's, and removes the others.
pub const SPEC_LABEL: &str = "husk.pool.spec";
/// A claimed sandbox's former pool (informational; it is the caller's now).
pub const CLAIMED_FROM_LABEL: &str = "husk.pool.from";

/// What the caller asks of the member it claims.
pub struct ClaimRequest<'a> {
    pub pool: &'a str,
    pub labels: BTreeMap<String, String>,
    pub ttl: Duration,
    pub name: Option<&'a str>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// Its supervisor does not answer: the member is broken (replace it).
    #[error("pool member {id} does not answer: {why}")]
    Dead { id: String, why: String },
    /// The supervisor refused: claimed by someone else a moment ago, or not
    /// fresh (it ran an exec). Either way not this caller's.
    #[error("pool member {id} refused the claim: {why}")]
    Refused { id: String, why: String },
    /// The caller's name is taken (the member stays in the pool).
    #[error(transparent)]
    Name(SandboxError),
}

/// Claims member `id`; its record as the supervisor now holds it. One
/// connect and one request: the supervisor answers before it writes
/// state.json, so the record is the one read before, changed as the
/// supervisor changed it (`relabel`).
pub fn claim(store: &Store, id: &str, req: &ClaimRequest<'_>) -> Result<Record, ClaimError> {
    let dir = store.dir(id);
    let dead = |e: SandboxError| ClaimError::Dead { id: id.to_string(), why: e.to_string() };
    let rec = store.read(id).map_err(dead)?;
    let client = Client::connect(&dir, rec.supervisor).map_err(dead)?.timeout(Duration::from_secs(1));
    // The name first, so a taken name costs the member nothing.
    if let Some(n) = req.name {
        store.reserve_name(n, id).map_err(ClaimError::Name)?;
    }
    let release = || {
        if let Some(n) = req.name {
            store.release_name(n, id);
        }
    };
    let call = Request::Claim {
        pool: req.pool.to_string(),
        labels: req.labels.clone(),
        ttl_ms: req.ttl.as_millis() as u64,
        name: req.name.map(str::to_string),
    };
    match client.call(&call) {
        Ok((r, _)) if r.ok => {
            let mut rec = rec;
            relabel(&mut rec.labels, req.pool, req.labels.clone());
            rec.name = req.name.map(str::to_string);
            rec.ttl_ms = r.ttl_ms;
            rec.expires_ms = r.expires_ms;
            rec.state = State::Ready;
            Ok(rec)
        }
        Ok((r, _)) => {
            release();
            Err(ClaimError::Refused { id: id.to_string(), why: r.error.unwrap_or_else(|| "refused".into()) })
        }
        Err(e) => {
            release();
            Err(dead(e))
        }
    }
}

/// A claimed member's labels: the pool's go, the caller's come.
pub fn relabel(labels: &mut BTreeMap<String, String>, pool: &str, callers: BTreeMap<String, String>) {
    labels.remove(POOL_LABEL);
    labels.remove(SPEC_LABEL);
    labels.insert(CLAIMED_FROM_LABEL.into(), pool.into());
    labels.extend(callers);
}

/// What became of a member serve asked to retire (`retire`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retired {
    /// Its supervisor accepted and is tearing the sandbox down.
    Ending,
    /// Claimed before the request arrived: the caller's now, left alone.
    Claimed,
    /// Gone already, or its supervisor did not answer (see `retire`).
    Silent,
}

/// Asks member `id`'s supervisor to destroy it if it is still an unclaimed
/// member of `pool` (`Request::Retire`). The supervisor orders this with
/// claims, so a member handed to a caller a moment ago is never destroyed
/// by a pool that has not heard of the claim yet. A member whose
/// supervisor is gone is swept; one that does not answer is left to its
/// lease (it might have been claimed: destroying it could take a caller's
/// sandbox).
pub fn retire(store: &Store, id: &str, pool: &str) -> Retired {
    let asked = store
        .read(id)
        .and_then(|rec| Client::connect(&store.dir(id), rec.supervisor))
        .and_then(|c| c.timeout(Duration::from_secs(2)).call(&Request::Retire { pool: pool.to_string() }));
    match asked {
        Ok((r, _)) if r.ok => Retired::Ending,
        Ok(_) => Retired::Claimed,
        Err(_) => {
            let _ = super::gc::sweep_one(store, id);
            Retired::Silent
        }
    }
}
