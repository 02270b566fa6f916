//! `husk serve`: the sandbox API of docs/api.md over HTTP/1.1 + JSON.
//!
//! Routing and JSON around the sandbox library: a request body becomes the
//! same typed request the CLI builds from its flags (`sandbox::CreateOptions`,
//! `sandbox::ExecOptions`; body.rs), one library call serves it
//! (sandboxes.rs), and the answer is the serialization of its typed result:
//! the verdict of `husk exec --json` is the same `Verdict` serialized the
//! same way. Each connection has a process of its own (`serve::server`);
//! create forks once more (isolated.rs), because the sandbox's supervisor
//! it forks keeps every fd it inherits and must not keep the client's
//! connection.
//!
//! serve holds no state: sandboxes live in the state dir with their own
//! supervisors, so a restarted serve finds them and a stopped one leaves
//! them running (unless `--destroy-on-exit`).

use crate::cli::ServeArgs;
use crate::outcome::EXIT_HUSK_FAILED;
use crate::paths::{Paths, PathsError};
use crate::sandbox::SandboxError;
use crate::sandbox::state::Store;
use crate::serve::http::{self, Head, HttpError, Limits};
use crate::serve::listen::{self, Address};
use crate::serve::server::{self, Conn, Ended};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod body;
mod cancel;
mod claim;
mod e2b;
mod files;
mod isolated;
mod ops;
mod pause;
mod pool;
mod sandboxes;
mod spec;

/// One read or write on a connection waits at most this long.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// The request head must have arrived this long after the connection
/// was accepted; until then it holds no request slot.
const HEAD_DEADLINE: Duration = Duration::from_secs(10);
/// Connections whose head is still arriving, held by the accept loop (an fd
/// and a buffer each); beyond it the oldest is dropped.
const MAX_PENDING: usize = 256;
/// The whole request (head and body) must have arrived by then.
const REQUEST_DEADLINE: Duration = Duration::from_secs(60);
/// The label `husk serve` puts on the sandboxes it creates: the address it
/// listens on, which `--destroy-on-exit` removes by.
pub const SERVE_LABEL: &str = "husk-serve";

/// What every connection's process needs, fixed at start.
struct Ctx {
    root: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    store: Result<Store, crate::sandbox::SandboxError>,
    token: Option<Vec<u8>>,
    limits: Limits,
    address: String,
    /// `--code-timeout`.
    code_timeout: Duration,
    /// The pools, as the loop held them when this connection was accepted.
    pools: pool::Pools,
}

/// A failure answered with a verdict-shaped error object.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub step: String,
    pub errno: Value,
    pub message: String,
    pub hint: Option<String>,
    /// Keys of the command's own failure object kept in the answer (a
    /// failed readiness check's `ready_check` verdict, `sandbox_id`).
    pub extra: Option<Box<serde_json::Map<String, Value>>>,
}

impl ApiError {
    fn new(status: u16, step: &str, message: impl Into<String>) -> ApiError {
        ApiError { status, step: step.into(), errno: Value::Null, message: message.into(), hint: None, extra: None }
    }

    fn hint(mut self, h: impl Into<String>) -> ApiError {
        self.hint = Some(h.into());
        self
    }

    fn json(&self) -> Value {
        let mut v = json!({
            "termination": "setup_failed",
            "exit_code": EXIT_HUSK_FAILED,
            "error": {"step": self.step, "errno": self.errno, "message": self.message, "hint": self.hint},
        });
        for (k, x) in self.extra.iter().flat_map(|m| m.iter()) {
            v[k] = x.clone();
        }
        v
    }

    /// A sandbox lookup that failed: 404 (step "lookup"), or 409 for a
    /// name already taken.
    fn of_sandbox(e: &SandboxError) -> ApiError {
        let status = match e {
            SandboxError::NameTaken { .. } | SandboxError::Busy { .. } | SandboxError::Paused { .. } => 409,
            SandboxError::Usage(_) => 400,
            SandboxError::Unknown { .. } | SandboxError::Ended { .. } | SandboxError::Gone { .. } => 404,
            _ => 500,
        };
        let step = if status == 404 { "lookup".to_string() } else { e.step().to_string() };
        ApiError {
            status,
            step,
            errno: Value::Null,
            message: e.to_string(),
            hint: e.hint().map(str::to_string),
            extra: None,
        }
    }
}

/// A response to write.
enum Reply {
    Json(u16, Value),
    /// Bytes already serialized (a verdict).
    Raw(u16, &'static str, Vec<u8>),
    /// Already written to the connection.
    Streamed,
}

pub fn serve(
    args: ServeArgs,
    root: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    paths: &Result<Paths, PathsError>,
) -> i32 {
    match serve_inner(args, root, state_dir, paths) {
        Ok(code) => code,
        Err(e) => {
            crate::errln!("husk serve: {e}");
            EXIT_HUSK_FAILED
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    Listen(#[from] listen::ListenError),
    #[error("{0}")]
    Paths(String),
    #[error(transparent)]
    Serve(#[from] server::ServeError),
    #[error("--token-file is for TCP; a unix socket is guarded by its mode (0600) and owner")]
    TokenOnUnix,
    #[error(transparent)]
    Pools(#[from] pool::PoolsError),
    #[error(transparent)]
    PoolSpec(#[from] spec::SpecError),
}

fn serve_inner(
    args: ServeArgs,
    root: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    paths: &Result<Paths, PathsError>,
) -> Result<i32, StartError> {
    let address = match &args.listen {
        Some(l) => listen::parse(l)?,
        None => Address::Unix(paths.as_ref().map_err(|e| StartError::Paths(e.to_string()))?.state.join("api.sock")),
    };
    let token = match (&address, &args.token_file) {
        (Address::Tcp(a), None) => return Err(listen::ListenError::NoToken(*a).into()),
        (Address::Tcp(_), Some(f)) => Some(listen::read_token(f)?),
        (Address::Unix(_), Some(_)) => return Err(StartError::TokenOnUnix),
        (Address::Unix(_), None) => None,
    };
    let (listener, socket, shown) = match &address {
        Address::Unix(p) => {
            let l = listen::bind_unix(p)?;
            let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::symlink_metadata(p).map_err(|e| {
                listen::ListenError::Io { what: "checking the bound socket", path: p.clone(), source: e }
            })?);
            (server::Listener::Unix(l), Some((p.clone(), ino)), format!("unix:{}", p.display()))
        }
        Address::Tcp(a) => {
            let l = std::net::TcpListener::bind(a).map_err(|e| listen::ListenError::Io {
                what: "binding",
                path: PathBuf::from(a.to_string()),
                source: e,
            })?;
            let bound = l.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| a.to_string());
            (server::Listener::Tcp(l), None, bound)
        }
    };
    let store = crate::sandbox::lifecycle::store_of(paths);
    let mut specs = Vec::new();
    if let Some(f) = &args.pool_file {
        specs.extend(spec::parse_file(f)?);
    }
    for p in &args.pool {
        specs.push(spec::parse_arg(p)?);
    }
    let pool_store = paths.as_ref().ok().and_then(|p| Store::open(&p.state).ok());
    let mut ctx = Ctx {
        root,
        state_dir,
        store,
        token,
        limits: Limits { max_body: args.max_body, ..Limits::default() },
        address: shown.clone(),
        code_timeout: args.code_timeout,
        pools: pool::Pools::new(specs, pool_store, (None, None), shown.clone(), args.pool_memory_budget)?,
    };
    ctx.pools.set_dirs((ctx.root.clone(), ctx.state_dir.clone()));
    ctx.pools.adopt();
    // The one line a supervisor of serve (or a test) waits for.
    crate::outln!("husk serve: listening on {shown}");
    let settings = server::Settings {
        max_concurrent: args.max_concurrent as usize,
        // A quarter of the fds at most: the rest are for the connections'
        // processes, the pools and the sandboxes they reach.
        max_pending: nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(MAX_PENDING, |(soft, _)| MAX_PENDING.min((soft / 4).max(8) as usize)),
        head_deadline: HEAD_DEADLINE,
        max_head: ctx.limits.max_head,
        late: too_late,
        busy: too_many,
    };
    let gate_ctx = Gated { token: ctx.token.clone(), limits: ctx.limits };
    let ended = server::run(listener, settings, &|c, b| gate_ctx.check(c, b), &mut ctx.pools);
    let ended = match ended {
        Ok(e) => e,
        Err(e) => {
            ctx.pools.shutdown();
            return Err(e.into());
        }
    };
    match ended {
        Ended::Connection(conn, prefix, _one) => {
            ctx.pools.forked();
            serve_connection(conn, prefix, &ctx);
            crate::sys::process::exit_now(0)
        }
        Ended::Stopped(sig) => {
            if let Some((p, ino)) = &socket {
                listen::remove_unix(p, *ino);
            }
            crate::errln!("husk serve: {sig} received; stopped listening on {shown}");
            let done = ctx.pools.shutdown();
            if done.removed > 0 {
                crate::errln!("husk serve: removed {} unclaimed pool member(s)", done.removed);
            }
            if done.claimed > 0 {
                crate::errln!(
                    "husk serve: left {} pool member(s) claimed while stopping to their callers",
                    done.claimed
                );
            }
            if args.destroy_on_exit {
                destroy_ours(&ctx);
            }
            Ok(0)
        }
    }
}

fn too_late() -> (u16, Vec<u8>) {
    let e = ApiError::new(408, "request", format!("the request head did not arrive within {HEAD_DEADLINE:?}"));
    (408, e.json().to_string().into_bytes())
}

/// What the accept loop checks of a whole head before the connection gets
/// a process: the caller's uid (unix) or bearer token (TCP). Refused
/// callers are answered by the loop and never hold a request slot.
struct Gated {
    token: Option<Vec<u8>>,
    limits: Limits,
}

impl Gated {
    fn check(&self, conn: &Conn, buf: &[u8]) -> Result<(), (u16, Vec<u8>)> {
        let refuse = |e: ApiError| Err((e.status, json_bytes(&e.json())));
        if let Err(e) = check_peer(conn) {
            return refuse(e);
        }
        let Some(token) = &self.token else { return Ok(()) };
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4);
        let head = match end {
            Some(end) => http::parse_head(&buf[..end], &self.limits),
            None => Err(HttpError::HeadTooLarge(self.limits.max_head)),
        };
        match head {
            Ok(head) => check_token(token, &head).or_else(|e| match e2b::refusal(&head, &e) {
                Some(body) => Err((e.status, body)),
                None => refuse(e),
            }),
            Err(e) => refuse(ApiError::new(e.status().unwrap_or(400), "request", e.to_string())),
        }
    }
}

/// Over a unix socket: the caller is serve's own uid or root.
fn check_peer(conn: &Conn) -> Result<(), ApiError> {
    if let Some(uid) = conn.peer_uid() {
        let me = nix::unistd::geteuid().as_raw();
        if uid != me && uid != 0 {
            return Err(ApiError::new(403, "auth", format!("uid {uid} may not use the husk serve of uid {me}")));
        }
    }
    Ok(())
}

fn check_token(token: &[u8], head: &Head) -> Result<(), ApiError> {
    let presented = head.header("authorization").and_then(|v| v.strip_prefix("Bearer ")).unwrap_or("");
    // The E2B SDKs send the token as their API key and access tokens
    // (docs/e2b.md).
    let e2b = ["x-api-key", "x-access-token", "e2b-traffic-access-token"]
        .iter()
        .filter_map(|h| head.header(h))
        .any(|v| listen::token_matches(token, v.trim().as_bytes()));
    if !e2b && !listen::token_matches(token, presented.trim().as_bytes()) {
        return Err(ApiError::new(401, "auth", "missing or wrong bearer token")
            .hint("send Authorization: Bearer <the token in husk serve's --token-file>"));
    }
    Ok(())
}

fn too_many() -> (u16, Vec<u8>) {
    let e = ApiError::new(429, "busy", "husk serve is serving --max-concurrent requests already")
        .hint("retry shortly, or start husk serve with a larger --max-concurrent");
    (429, e.json().to_string().into_bytes())
}

/// `--destroy-on-exit`: the sandboxes created through this address.
fn destroy_ours(ctx: &Ctx) {
    let Ok(store) = &ctx.store else { return };
    let want = vec![(SERVE_LABEL.to_string(), ctx.address.clone())];
    for rec in crate::sandbox::registry::records(store) {
        if crate::sandbox::state::matches(&rec, &want) {
            match crate::sandbox::lifecycle::destroy(store, &rec.id, true) {
                Ok(()) => crate::errln!("husk serve: removed sandbox {}", rec.id),
                Err(e) => crate::errln!("husk serve: removing sandbox {}: {e}", rec.id),
            }
        }
    }
}

/// Reads one request, answers it, and closes.
/// `prefix`: what the accept loop read already (the head, at least).
fn serve_connection(mut conn: Conn, prefix: Vec<u8>, ctx: &Ctx) {
    let t_start = crate::spawn::now_ns();
    conn.set_timeouts(IO_TIMEOUT);
    let deadline = Some(Instant::now() + REQUEST_DEADLINE);
    let reply = match read_request(&mut conn, prefix, ctx, deadline) {
        Ok((head, body)) => {
            route(&head, body, ctx, &mut conn, t_start).unwrap_or_else(|e| Reply::Json(e.status, e.json()))
        }
        Err(Some(e)) => {
            // Refused before its end was read: closing a socket with unread
            // input resets it, and the client would lose the answer.
            let _ = http::write_response(&mut conn, e.status, "application/json", &json_bytes(&e.json()));
            conn.finish();
            drain(&mut conn);
            return;
        }
        Err(None) => return,
    };
    let written = match reply {
        Reply::Json(status, v) => http::write_response(&mut conn, status, "application/json", &json_bytes(&v)),
        Reply::Raw(status, ctype, bytes) => http::write_response(&mut conn, status, ctype, &bytes),
        Reply::Streamed => Ok(()),
    };
    if written.is_ok() {
        conn.finish();
    }
}

/// Reads and drops what the client still sends, for at most a second and
/// 16 MiB (it has the answer already; this only keeps its socket from
/// being reset under it).
fn drain(conn: &mut Conn) {
    use std::io::Read;
    conn.set_timeouts(Duration::from_millis(250));
    let end = Instant::now() + Duration::from_secs(1);
    let mut sink = vec![0u8; 64 * 1024];
    let mut total = 0usize;
    while Instant::now() < end && total < 16 << 20 {
        match conn.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
}

fn json_bytes(v: &Value) -> Vec<u8> {
    let mut b = serde_json::to_vec(v).unwrap_or_default();
    b.push(b'\n');
    b
}

/// The head, the caller's right to ask, then the body. `Err(None)`: the
/// client is gone, nobody to answer.
fn read_request(
    conn: &mut Conn,
    prefix: Vec<u8>,
    ctx: &Ctx,
    deadline: Option<Instant>,
) -> Result<(Head, Vec<u8>), Option<ApiError>> {
    use std::io::Read;
    let http_err = |e: HttpError| e.status().map(|s| ApiError::new(s, "request", e.to_string()));
    check_peer(conn).map_err(Some)?;
    // The loop hands a connection on once its head ended or grew too long.
    let (head, start) = match prefix.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4) {
        Some(end) if end > ctx.limits.max_head => return Err(http_err(HttpError::HeadTooLarge(ctx.limits.max_head))),
        Some(end) => (http::parse_head(&prefix[..end], &ctx.limits).map_err(http_err)?, prefix[end..].to_vec()),
        None => http::read_head(&mut std::io::Cursor::new(prefix).chain(&mut *conn), &ctx.limits, deadline)
            .map_err(http_err)?,
    };
    // Before the body: an unauthenticated client gets nothing read for it
    // (the accept loop checked already; this keeps the rule where the body
    // is read).
    if let Some(token) = &ctx.token {
        check_token(token, &head).map_err(Some)?;
    }
    if let http::Framing::Length(n) = head.framing
        && n > ctx.limits.max_body
    {
        return Err(http_err(HttpError::BodyTooLarge(ctx.limits.max_body)));
    }
    if head.expects_continue() && head.framing != http::Framing::None {
        http::write_continue(conn).map_err(|_| None)?;
    }
    let body = http::read_body(conn, &head, start, &ctx.limits, deadline).map_err(http_err)?;
    Ok((head, body))
}

fn route(head: &Head, body: Vec<u8>, ctx: &Ctx, conn: &mut Conn, t_start: u64) -> Result<Reply, ApiError> {
    let path = head.path.trim_end_matches('/');
    let segs: Vec<&str> = path.split('/').skip(1).collect();
    let m = head.method.as_str();
    if let Some(r) = e2b::route(head, &body, ctx, conn, t_start) {
        return r;
    }
    match (m, segs.as_slice()) {
        ("GET", ["v1", "health"]) => Ok(Reply::Json(200, json!({"version": env!("CARGO_PKG_VERSION"), "api": 1}))),
        ("POST", ["v1", "sandboxes"]) => {
            let req: body::CreateBody = body::parse(&body)?;
            match req.claim()? {
                Some(c) => claim::claim(ctx, c),
                None => sandboxes::create(ctx, &req),
            }
        }
        ("GET", ["v1", "pools"]) => claim::get(ctx, None),
        ("GET", ["v1", "pools", name]) => claim::get(ctx, Some(name)),
        ("POST", ["v1", "pools"]) => claim::add(ctx, &body),
        ("DELETE", ["v1", "pools", name]) => claim::delete(ctx, name),
        ("GET", ["v1", "sandboxes"]) => sandboxes::list(ctx, head),
        ("GET", ["v1", "sandboxes", id]) => sandboxes::get(ctx, id),
        ("DELETE", ["v1", "sandboxes", id]) => sandboxes::destroy(ctx, id),
        ("POST", ["v1", "sandboxes", id, "exec"]) => sandboxes::exec(ctx, head, id, &body, conn, t_start),
        ("POST", ["v1", "sandboxes", id, "renew"]) => sandboxes::renew(ctx, id, &body),
        ("POST", ["v1", "sandboxes", id, "pause"]) => pause::pause(ctx, id, &body),
        ("POST", ["v1", "sandboxes", id, "resume"]) => pause::resume(ctx, id),
        ("GET" | "PUT", ["v1", "sandboxes", id, "files"]) => files_route(ctx, head, id, &body),
        ("POST", ["v1", "sandboxes", id, "fork"]) => ops::fork_route(ctx, id, &body, conn),
        ("POST", ["v1", "sandboxes", id, "commit"]) => ops::commit_route(ctx, id, &body),
        (
            _,
            ["v1", "health"]
            | ["v1", "sandboxes"]
            | ["v1", "sandboxes", _]
            | ["v1", "sandboxes", _, _]
            | ["v1", "pools"]
            | ["v1", "pools", _],
        ) => Err(ApiError::new(405, "route", format!("{m} is not allowed on {path}")).hint("see docs/api.md")),
        _ => Err(ApiError::new(404, "route", format!("no endpoint {m} {}", head.path))
            .hint("see docs/api.md (paths start with /v1/)")),
    }
}

fn files_route(ctx: &Ctx, head: &Head, what: &str, body: &[u8]) -> Result<Reply, ApiError> {
    let id = lookup(ctx, what)?;
    let store = store(ctx)?;
    let answer = match head.method.as_str() {
        "PUT" => files::put(store, head, &id, body)?,
        _ => files::get(store, head, &id)?,
    };
    Ok(match answer {
        files::Answer::Json(status, v) => Reply::Json(status, v),
        files::Answer::Bytes(ctype, bytes) => Reply::Raw(200, ctype, bytes),
    })
}

fn store(ctx: &Ctx) -> Result<&Store, ApiError> {
    ctx.store.as_ref().map_err(|e| ApiError::new(500, "state", e.to_string()))
}

/// The id of a live sandbox named by `what` (id, name, or id prefix).
fn lookup(ctx: &Ctx, what: &str) -> Result<String, ApiError> {
    if what.is_empty()
        || what.starts_with('-')
        || !what.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        return Err(ApiError::new(404, "lookup", format!("{what:?} is not a sandbox id or name")));
    }
    crate::sandbox::registry::resolve(store(ctx)?, what).map_err(|e| ApiError::of_sandbox(&e))
}

/// A library failure as the API answers it: `error` is an `ErrorReport`'s
/// JSON (step, errno, message, hint), `extra` the keys beyond it (a failed
/// readiness check's `ready_check` verdict, `sandbox_id`); the status is
/// its step's.
fn failure(error: &Value, extra: serde_json::Map<String, Value>) -> ApiError {
    let message = error["message"].as_str().unwrap_or("husk failed without a message").to_string();
    let step = error["step"].as_str().unwrap_or("husk").to_string();
    let status = status_of_step(&step, &message);
    let step = if status == 404 { "lookup".to_string() } else { step };
    ApiError {
        status,
        step,
        errno: error["errno"].clone(),
        message,
        hint: error["hint"].as_str().map(str::to_string),
        extra: (!extra.is_empty()).then(|| Box::new(extra)),
    }
}

fn status_of_step(step: &str, message: &str) -> u16 {
    match step {
        "arguments" | "request" => 400,
        "busy" => 409,
        // The sandbox started, and its own check said it is not usable.
        "ready_check" => 422,
        "sandbox" | "lookup" if message.contains("is taken by sandbox") => 409,
        "sandbox" | "lookup" => 404,
        _ => 500,
    }
}

/// The API's state names: the CLI's, upper-cased (CREATING, READY,
/// EXECUTING, DESTROYED, FAILED).
fn with_api_state(mut v: Value) -> Value {
    if let Some(s) = v.get("state").and_then(Value::as_str) {
        v["state"] = json!(s.to_ascii_uppercase());
    }
    v
}
