//! The pools' side of the API, in a connection's process: a claim (POST
//! /v1/sandboxes {"pool": NAME}) and GET/POST/DELETE /v1/pools. What the
//! process knows of the pools is the loop's state when it was forked
//! (`pool::Pools`); what it changes it tells the loop (`pool::Note`).

use super::body::{self, ClaimArgs};
use super::pool::{MAX_NOTE, Note};
use super::spec::PoolSpec;
use super::{ApiError, Ctx, Reply, with_api_state};
use crate::sandbox::pool::{CLAIMED_FROM_LABEL, ClaimError, ClaimRequest};
use serde_json::{Value, json};

fn no_pool(name: &str) -> ApiError {
    ApiError::new(404, "pool", format!("husk serve has no pool {name:?}"))
        .hint("GET /v1/pools lists the pools; start husk serve with --pool NAME=IMAGE:SIZE or POST /v1/pools")
}

/// A claim: the oldest READY member that takes it, else (a miss) a cold
/// create with the pool's spec. Never waits for a refill.
pub fn claim(ctx: &Ctx, req: ClaimArgs) -> Result<Reply, ApiError> {
    let pools = &ctx.pools;
    let pool = pools.find(&req.pool).ok_or_else(|| no_pool(&req.pool))?;
    let store = super::store(ctx)?;
    let mut labels = req.labels.clone();
    labels.insert(super::SERVE_LABEL.into(), ctx.address.clone());
    let ask = ClaimRequest { pool: &req.pool, labels, ttl: req.ttl, name: req.name.as_deref() };
    let started = std::time::Instant::now();
    for id in &pool.members {
        match crate::sandbox::pool::claim(store, id, &ask) {
            Ok(rec) => {
                // The claim itself: from the first member asked to the
                // supervisor's answer (what serve adds is the connection).
                let claim_ms = started.elapsed().as_secs_f64() * 1e3;
                pools.notify(&Note::Claimed { pool: req.pool.clone(), id: id.clone() });
                let mut v = with_api_state(crate::sandbox::lifecycle::summary(&rec));
                v["pooled"] = json!(true);
                v["claim_ms"] = json!(claim_ms);
                return Ok(Reply::Json(201, v));
            }
            Err(ClaimError::Name(e)) => return Err(ApiError::of_sandbox(&e)),
            Err(ClaimError::Dead { .. } | ClaimError::Refused { .. }) => {
                pools.notify(&Note::Suspect { pool: req.pool.clone(), id: id.clone() });
            }
        }
    }
    pools.notify(&Note::Miss { pool: req.pool.clone() });
    let mut o = pool.options().clone();
    o.ttl = req.ttl;
    o.name = req.name.clone();
    o.labels.insert(CLAIMED_FROM_LABEL.into(), req.pool.clone());
    o.labels.insert(super::SERVE_LABEL.into(), ctx.address.clone());
    o.labels.extend(req.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    // A miss whose cold create fails too says why the pool is empty (the
    // same cause, usually: a missing image).
    let mut v = super::sandboxes::create_isolated(ctx, &o).map_err(|mut e| {
        if let Some(why) = pool.refill_trouble() {
            e.message = format!("{}; {why}", e.message);
            e.hint.get_or_insert_with(|| {
                format!("GET /v1/pools/{} shows the pool; husk serve's stderr says each failure", req.pool)
            });
        }
        e
    })?;
    v["pooled"] = json!(false);
    Ok(Reply::Json(201, v))
}

/// GET /v1/pools and GET /v1/pools/NAME.
pub fn get(ctx: &Ctx, name: Option<&str>) -> Result<Reply, ApiError> {
    match name {
        None => Ok(Reply::Json(200, ctx.pools.json())),
        Some(n) => Ok(Reply::Json(200, ctx.pools.find(n).ok_or_else(|| no_pool(n))?.json())),
    }
}

/// POST /v1/pools: a new pool, filled in the background.
pub fn add(ctx: &Ctx, body: &[u8]) -> Result<Reply, ApiError> {
    let spec: PoolSpec = body::parse(body)?;
    spec.validate().map_err(|e| ApiError::new(400, "pool", e.to_string()))?;
    if ctx.pools.find(&spec.name).is_some() {
        return Err(ApiError::new(409, "pool", format!("pool {:?} exists", spec.name))
            .hint("DELETE /v1/pools/NAME first to change its spec"));
    }
    super::store(ctx)?;
    let note = Note::Add { spec: Box::new(spec.clone()) };
    if serde_json::to_vec(&note).map(|b| b.len() + 1).unwrap_or(usize::MAX) > MAX_NOTE {
        return Err(ApiError::new(400, "pool", format!("the pool's spec is longer than {MAX_NOTE} bytes")));
    }
    ctx.pools.notify(&note);
    Ok(Reply::Json(201, json!({"name": spec.name, "spec": spec, "size": spec.size, "ready": 0})))
}

/// DELETE /v1/pools/NAME: the pool goes and its unclaimed members with it
/// (claimed ones are their callers').
pub fn delete(ctx: &Ctx, name: &str) -> Result<Reply, ApiError> {
    let pool = ctx.pools.find(name).ok_or_else(|| no_pool(name))?;
    ctx.pools.notify(&Note::Delete { pool: name.to_string() });
    let members: Vec<Value> = pool.members.iter().map(|m| json!(m)).collect();
    Ok(Reply::Json(200, json!({"name": name, "deleted": true, "members_removed": members})))
}
