//! E2B's control plane on husk sandboxes: a template is a husk image
//! reference (or, starting with `/`, a root directory), `timeout` (seconds)
//! is the lease (`ttl`), `envVars` the sandbox's environment, `metadata` its
//! labels (`e2b.KEY=VALUE`).

use super::super::{ApiError, Ctx, Reply};
use super::{E2B_LABEL, ENVD_VERSION, META_PREFIX};
use crate::sandbox::state::Record;
use crate::serve::http::Head;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// E2B's default sandbox timeout (the SDK sends its own, 300 s).
const DEFAULT_TIMEOUT_S: u64 = 300;
/// The label holding the template the sandbox was made from.
const TEMPLATE_LABEL: &str = "husk-e2b-template";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: String,
    timeout: Option<u64>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
    /// Pausing keeps memory only with the snapshot work (issue 32 says
    /// so): refused rather than silently not paused.
    #[serde(default)]
    auto_pause: bool,
    #[serde(default, rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
}

/// E2B's error body: `{code, message}` (the SDK reads `message`).
fn e2b_error(status: u16, message: impl Into<String>) -> Reply {
    Reply::Json(status, json!({"code": status, "message": message.into()}))
}

/// What husk does not do through these routes: 501 with E2B's error body,
/// which the SDK raises as its own exception (never a hang).
pub fn unsupported(what: &str) -> ApiError {
    ApiError::new(501, "e2b", format!("{what} is not supported by husk serve's E2B routes"))
        .hint("docs/e2b.md lists what works")
}

/// `unsupported`, answered.
pub fn refuse(what: &str) -> Reply {
    as_e2b(unsupported(what))
}

/// An ApiError as E2B's error body.
fn as_e2b(e: ApiError) -> Reply {
    let hint = e.hint.map(|h| format!(" ({h})")).unwrap_or_default();
    e2b_error(e.status, format!("{}{hint}", e.message))
}

fn wrap(r: Result<Reply, ApiError>) -> Result<Reply, ApiError> {
    Ok(r.unwrap_or_else(as_e2b))
}

pub fn create(ctx: &Ctx, body: &[u8]) -> Result<Reply, ApiError> {
    wrap(create_inner(ctx, body))
}

fn create_inner(ctx: &Ctx, body: &[u8]) -> Result<Reply, ApiError> {
    let req: NewSandbox = serde_json::from_slice(body)
        .map_err(|e| ApiError::new(400, "request", format!("the new sandbox's JSON: {e}")))?;
    if req.auto_pause {
        return Err(unsupported("autoPause"));
    }
    let timeout = req.timeout.unwrap_or(DEFAULT_TIMEOUT_S).max(1);
    let mut labels = BTreeMap::new();
    labels.insert(E2B_LABEL.to_string(), "1".to_string());
    labels.insert(TEMPLATE_LABEL.to_string(), req.template_id.clone());
    for (k, v) in req.metadata.iter().flatten() {
        labels.insert(format!("{META_PREFIX}{k}"), v.clone());
    }
    let mut spec = json!({
        "ttl": format!("{timeout}s"),
        "env": req.env_vars.unwrap_or_default(),
        "labels": labels,
        // Background commands and file calls run beside each other, as in
        // E2B's sandboxes.
        "concurrent": true,
    });
    if req.template_id.starts_with('/') {
        spec["rootfs"] = json!(req.template_id);
    } else {
        spec["image"] = json!(req.template_id);
    }
    if req.allow_internet_access == Some(false) {
        spec["network"] = json!("none");
    }
    // run_code keeps state between calls (a notebook): a python session
    // when the template has python, cold calls when it does not.
    let mut with_session = spec.clone();
    with_session["session"] = json!("python");
    let rec = match create_from(ctx, &with_session) {
        Ok(rec) => rec,
        Err(e) if e.status >= 500 => create_from(ctx, &spec)?,
        Err(e) => return Err(e),
    };
    let id = rec["id"].as_str().unwrap_or_default().to_string();
    Ok(Reply::Json(201, created(ctx, &id, &req.template_id)))
}

/// A sandbox made as `POST /v1/sandboxes` makes one (`sandbox::create` in
/// a child: the supervisor must not keep this connection).
fn create_from(ctx: &Ctx, spec: &Value) -> Result<Value, ApiError> {
    let body = serde_json::to_vec(spec).unwrap_or_default();
    let req: super::super::body::CreateBody = super::super::body::parse(&body)?;
    let opts = req.to_options(&ctx.address)?;
    super::super::sandboxes::create_isolated(ctx, &opts)
}

/// The SDK's `Sandbox` record: the token comes back as the envd and
/// traffic tokens, so its envd and interpreter calls carry it.
fn created(ctx: &Ctx, id: &str, template: &str) -> Value {
    let token = ctx.token.as_ref().map(|t| String::from_utf8_lossy(t).trim().to_string());
    json!({
        "templateID": template,
        "sandboxID": id,
        "clientID": "husk",
        "alias": template,
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": token,
        "trafficAccessToken": token,
        "domain": "localhost",
    })
}

/// One of ours (made through these routes), live.
fn ours(ctx: &Ctx, what: &str) -> Result<Record, ApiError> {
    let id = super::super::lookup(ctx, what)?;
    let rec =
        crate::sandbox::registry::current(super::super::store(ctx)?, &id).map_err(|e| ApiError::of_sandbox(&e))?;
    if rec.labels.get(E2B_LABEL).map(String::as_str) != Some("1") {
        return Err(ApiError::new(404, "lookup", format!("sandbox {what} was not made through the E2B API")));
    }
    Ok(rec)
}

fn rfc3339(ms: u64) -> String {
    crate::oci::log::rfc3339((ms / 1000) as i64, ((ms % 1000) * 1_000_000) as u32)
}

/// `ListedSandbox` / `SandboxDetail`.
fn detail(ctx: &Ctx, rec: &Record) -> Value {
    let template = rec.labels.get(TEMPLATE_LABEL).cloned().unwrap_or_default();
    let metadata: BTreeMap<&str, &str> =
        rec.labels.iter().filter_map(|(k, v)| Some((k.strip_prefix(META_PREFIX)?, v.as_str()))).collect();
    let memory_mb = rec.spec.limits.memory.map_or(0, |b| b >> 20);
    let cpus = rec.spec.limits.cpus_milli.map_or(1, |m| m.div_ceil(1000).max(1));
    let mut v = created(ctx, &rec.id, &template);
    for (k, x) in [
        ("startedAt", json!(rfc3339(rec.created_ms))),
        ("endAt", json!(rfc3339(rec.expires_ms))),
        ("cpuCount", json!(cpus)),
        ("memoryMB", json!(memory_mb)),
        ("diskSizeMB", json!(0)),
        ("state", json!("running")),
        ("metadata", json!(metadata)),
    ] {
        v[k] = x;
    }
    v
}

pub fn list(ctx: &Ctx, head: &Head) -> Result<Reply, ApiError> {
    let store = super::super::store(ctx)?;
    // `metadata=k1=v1&k2=v2`, itself query-encoded.
    let mut want = vec![(E2B_LABEL.to_string(), "1".to_string())];
    if let Some(m) = head.query("metadata") {
        for pair in m.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            want.push((format!("{META_PREFIX}{}", pct_decode(k)), pct_decode(v)));
        }
    }
    let paused_only = head.query("state").is_some_and(|s| !s.split(',').any(|s| s == "running"));
    let items: Vec<Value> = if paused_only {
        Vec::new()
    } else {
        crate::sandbox::registry::records(store)
            .iter()
            .filter(|r| crate::sandbox::state::matches(r, &want))
            .map(|r| detail(ctx, r))
            .collect()
    };
    Ok(Reply::Json(200, json!(items)))
}

fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (b[i], b.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok())) {
            (b'%', Some(x)) => {
                out.push(x);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn info(ctx: &Ctx, what: &str) -> Result<Reply, ApiError> {
    wrap(ours(ctx, what).map(|r| Reply::Json(200, detail(ctx, &r))))
}

pub fn kill(ctx: &Ctx, what: &str) -> Result<Reply, ApiError> {
    wrap((|| {
        let rec = ours(ctx, what)?;
        crate::sandbox::lifecycle::destroy(super::super::store(ctx)?, &rec.id, true)
            .map_err(|e| ApiError::of_sandbox(&e))?;
        Ok(Reply::Raw(204, "application/json", Vec::new()))
    })())
}

#[derive(Deserialize)]
struct TimeoutBody {
    timeout: u64,
}

/// The lease from now, as `husk renew --ttl` sets it.
fn renew(ctx: &Ctx, rec: &Record, ttl: Duration) -> Result<(), ApiError> {
    crate::sandbox::renew(super::super::store(ctx)?, &rec.id, Some(ttl)).map_err(|e| ApiError::of_sandbox(&e))?;
    Ok(())
}

pub fn set_timeout(ctx: &Ctx, what: &str, body: &[u8]) -> Result<Reply, ApiError> {
    wrap((|| {
        let b: TimeoutBody = serde_json::from_slice(body)
            .map_err(|e| ApiError::new(400, "request", format!("the timeout's JSON: {e}")))?;
        let rec = ours(ctx, what)?;
        renew(ctx, &rec, Duration::from_secs(b.timeout.max(1)))?;
        Ok(Reply::Raw(204, "application/json", Vec::new()))
    })())
}

#[derive(Deserialize)]
struct ConnectBody {
    timeout: Option<u64>,
}

/// `Sandbox.connect(id)`: the sandbox's record, its lease extended to the
/// timeout asked (never shortened, as E2B's connect does).
pub fn connect(ctx: &Ctx, what: &str, body: &[u8]) -> Result<Reply, ApiError> {
    wrap((|| {
        let b: ConnectBody = serde_json::from_slice(body).unwrap_or(ConnectBody { timeout: None });
        let rec = ours(ctx, what)?;
        if let Some(t) = b.timeout {
            let left = rec.expires_ms.saturating_sub(crate::sandbox::state::now_ms());
            if t * 1000 > left {
                renew(ctx, &rec, Duration::from_secs(t))?;
            }
        }
        let template = rec.labels.get(TEMPLATE_LABEL).cloned().unwrap_or_default();
        Ok(Reply::Json(200, created(ctx, &rec.id, &template)))
    })())
}
