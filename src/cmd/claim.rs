//! `husk create --pool NAME`: a READY sandbox claimed from a pool of the
//! running `husk serve` (docs/warm.md). The pools live in serve's process,
//! so this asks serve (POST /v1/sandboxes {"pool": NAME}) over its unix
//! socket: --server unix:PATH, else HUSK_SERVER, else the state dir's
//! api.sock (where serve listens by default). With --pool-fallback, no
//! serve or no such pool means a cold create from this command's own
//! flags (said on stderr); without it, a clear error (125).

use crate::cli::CreateArgs;
use crate::outcome::ErrorReport;
use crate::paths::{Paths, PathsError};
use crate::sandbox::SandboxError;
use crate::serve::client::{self, ClientError};
use crate::step::Phase;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

/// A claim never waits for a refill; this bounds a serve that hangs.
const PATIENCE: Duration = Duration::from_secs(120);

fn pool_err(message: String, hint: &str) -> SandboxError {
    SandboxError::Setup(ErrorReport::new(Phase::Pool, message).with_hint(hint.to_string()))
}

/// Where serve listens, as `--server` / HUSK_SERVER / the default say.
fn socket(args: &CreateArgs, paths: &Result<Paths, PathsError>) -> Result<PathBuf, SandboxError> {
    match args.server.as_deref() {
        Some(s) => match s.strip_prefix("unix:") {
            Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
            _ => Err(SandboxError::Usage(format!(
                "--server {s:?}: give unix:PATH, the socket husk serve listens on (TCP is not supported here)"
            ))),
        },
        None => Ok(paths.as_ref().map_err(|e| SandboxError::State(e.to_string()))?.state.join("api.sock")),
    }
}

/// The sandbox flags only a cold create reads: refused with --pool alone,
/// where the pool's spec is the sandbox's and they would silently not apply.
fn own_flags_given(args: &CreateArgs) -> bool {
    let Ok(d) = crate::cli::spec::create_defaults() else { return false };
    format!(
        "{:?}{:?}{:?}{:?}{:?}{:?}",
        args.sandbox,
        args.env,
        args.env_file,
        args.user,
        args.max_lifetime,
        (args.concurrent, &args.warm, &args.session)
    ) != format!(
        "{:?}{:?}{:?}{:?}{:?}{:?}",
        d.sandbox,
        d.env,
        d.env_file,
        d.user,
        d.max_lifetime,
        (d.concurrent, &d.warm, &d.session)
    )
}

/// `create --pool`: the claimed sandbox printed as a cold create prints
/// its own; `None` when there is no serve or no such pool and
/// `--pool-fallback` asks for a cold create (said on stderr; the caller,
/// cmd/mod.rs, makes it).
pub fn create_from_pool(args: &CreateArgs, paths: &Result<Paths, PathsError>) -> Option<i32> {
    match claim(args, paths) {
        Ok(v) => {
            if args.json {
                crate::outln!("{v}");
            } else {
                crate::outln!("{}", v["id"].as_str().unwrap_or(""));
            }
            // As a cold create: a sandbox whose id reached nobody goes.
            if !crate::print::stdout_ok()
                && let Some(id) = v["id"].as_str()
            {
                use crate::sandbox::lifecycle::{destroy, store_of};
                let _ = store_of(paths).and_then(|s| destroy(&s, id, true));
            }
            Some(0)
        }
        Err(Failed::NoPool(e)) if args.pool_fallback => {
            crate::errln!("husk: {e}; creating the sandbox cold (--pool-fallback)");
            None
        }
        Err(Failed::NoPool(e) | Failed::Error(e)) => Some(fail(&e, args.json)),
    }
}

/// Prints an error (and, with --json, its verdict-shaped form); 125.
fn fail(e: &SandboxError, json: bool) -> i32 {
    if json {
        crate::cli::report::json_failure(e.report(), std::collections::BTreeMap::new(), false);
    }
    crate::errln!("husk: {e}");
    if let Some(h) = e.hint() {
        crate::errln!("husk: hint: {h}");
    }
    crate::outcome::EXIT_HUSK_FAILED
}

/// How a claim ended when it did not: a reason to fall back or an error.
enum Failed {
    /// No serve, or no such pool: --pool-fallback creates cold.
    NoPool(SandboxError),
    Error(SandboxError),
}

/// The claimed sandbox's record, as the CLI prints it (states in lower
/// case, as `husk create` prints them).
fn claim(args: &CreateArgs, paths: &Result<Paths, PathsError>) -> Result<Value, Failed> {
    let pool = args.pool.as_deref().unwrap_or_default();
    if !args.pool_fallback && own_flags_given(args) {
        return Err(Failed::Error(SandboxError::Usage(format!(
            "--pool {pool}: the sandbox is made with the pool's spec, so only --name, --label, --ttl and --json go with --pool (add --pool-fallback to use the others for a cold create when the pool is not there)"
        ))));
    }
    let sock = socket(args, paths).map_err(Failed::Error)?;
    let mut labels = serde_json::Map::new();
    for l in &args.label {
        let (k, v) = crate::sandbox::state::parse_label(l).map_err(Failed::Error)?;
        labels.insert(k, json!(v));
    }
    let body = json!({"pool": pool, "name": args.name, "labels": labels, "ttl": format!("{}ms", args.ttl.as_millis())});
    let body = serde_json::to_vec(&body).unwrap_or_default();
    let (status, resp) = client::request(&sock, "POST", "/v1/sandboxes", &body, PATIENCE).map_err(|e| match e {
        ClientError::Unreachable { .. } => Failed::NoPool(pool_err(
            e.to_string(),
            "start `husk serve --pool NAME=IMAGE:SIZE`, point --server (or HUSK_SERVER) at its socket, or add --pool-fallback to create cold",
        )),
        e => Failed::Error(pool_err(e.to_string(), "see husk serve's stderr")),
    })?;
    let v: Value = serde_json::from_slice(&resp).unwrap_or(Value::Null);
    if status == 201 && v["id"].is_string() {
        let mut v = v;
        if let Some(s) = v["state"].as_str() {
            v["state"] = json!(s.to_ascii_lowercase());
        }
        return Ok(v);
    }
    let e = &v["error"];
    let message = e["message"].as_str().map(str::to_string).unwrap_or_else(|| format!("husk serve answered {status}"));
    let hint = e["hint"].as_str().unwrap_or("see husk serve's stderr");
    let step = e["step"].as_str().and_then(Phase::from_name).unwrap_or(Phase::Pool);
    let err = SandboxError::Setup(ErrorReport::new(step, message).with_hint(hint.to_string()));
    match (status, step) {
        (404, Phase::Pool) => Err(Failed::NoPool(err)),
        (400, _) => Err(Failed::Error(SandboxError::Usage(err.to_string()))),
        _ => Err(Failed::Error(err)),
    }
}
