//! `husk serve`: the sandbox API of docs/api.md over HTTP/1.1 + JSON.
//!
//! Every request is a husk command line run the way the CLI runs it, so
//! the API and the CLI cannot drift apart: a request body becomes the
//! arguments of `husk create|exec|ls|inspect|renew|rm` (always as
//! `--flag=value`, so no value is ever read as a flag), parsed by the same
//! clap tree and run by the same code, and the response is what that
//! command printed: the verdict of `husk exec --json` byte for byte. In a
//! connection's own process (`serve::server`), exec, ls, inspect, renew and
//! rm run in-process with stdio pointed at memory files; create runs as a
//! child `husk create --json`, because the sandbox's supervisor it forks
//! keeps every fd it inherits and must not keep the client's connection.
//!
//! serve holds no state: sandboxes live in the state dir with their own
//! supervisors, so a restarted serve finds them and a stopped one leaves
//! them running (unless `--destroy-on-exit`).

use crate::cli::{Cli, ServeArgs};
use crate::outcome::EXIT_HUSK_FAILED;
use crate::paths::{Paths, PathsError};
use crate::sandbox::SandboxError;
use crate::sandbox::state::Store;
use crate::serve::http::{self, Head, HttpError, Limits};
use crate::serve::listen::{self, Address};
use crate::serve::server::{self, Conn, Ended};
use serde_json::{Value, json};
use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod body;
mod cancel;
mod claim;
mod e2b;
mod files;
mod pause;
mod pool;
mod spec;

use body::{CreateBody, ExecBody, RenewBody};

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
    store: Result<Store, String>,
    token: Option<Vec<u8>>,
    limits: Limits,
    address: String,
    /// `--code-timeout`.
    code_timeout: Duration,
    /// The pools, as the loop held them when this connection was accepted.
    pools: pool::Pools,
}

impl Ctx {
    /// `husk --root R --state-dir S <args>`, as serve itself was given them.
    fn argv(&self, args: &[&str]) -> Vec<OsString> {
        let mut v: Vec<OsString> = vec!["husk".into()];
        if let Some(r) = &self.root {
            v.push(format!("--root={}", r.display()).into());
        }
        if let Some(s) = &self.state_dir {
            v.push(format!("--state-dir={}", s.display()).into());
        }
        v.extend(args.iter().map(OsString::from));
        v
    }
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
    /// Bytes as a command printed them (a verdict, not re-encoded).
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
    let store =
        paths.as_ref().map_err(|e| e.to_string()).and_then(|p| Store::open(&p.state).map_err(|e| e.to_string()));
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
        pools: pool::Pools::new(specs, pool_store, Vec::new(), shown.clone(), args.pool_memory_budget)?,
    };
    ctx.pools.set_base(ctx.argv(&[]));
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
        ("POST", ["v1", "sandboxes"]) => create(ctx, &body),
        ("GET", ["v1", "pools"]) => claim::get(ctx, None),
        ("GET", ["v1", "pools", name]) => claim::get(ctx, Some(name)),
        ("POST", ["v1", "pools"]) => claim::add(ctx, &body),
        ("DELETE", ["v1", "pools", name]) => claim::delete(ctx, name),
        ("GET", ["v1", "sandboxes"]) => list(ctx, head),
        ("GET", ["v1", "sandboxes", id]) => get(ctx, id),
        ("DELETE", ["v1", "sandboxes", id]) => destroy(ctx, id),
        ("POST", ["v1", "sandboxes", id, "exec"]) => exec(ctx, head, id, &body, conn, t_start),
        ("POST", ["v1", "sandboxes", id, "renew"]) => renew(ctx, id, &body),
        ("POST", ["v1", "sandboxes", id, "pause"]) => pause::pause(ctx, id, &body),
        ("POST", ["v1", "sandboxes", id, "resume"]) => pause::resume(ctx, id),
        ("GET" | "PUT", ["v1", "sandboxes", id, "files"]) => files_route(ctx, head, id, &body),
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
    ctx.store.as_ref().map_err(|e| ApiError::new(500, "state", e.clone()))
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

/// The status of a command's failure object (verdict-shaped, or the older
/// `{"error": text, "step": ...}` of create/ls/rm --json, made
/// verdict-shaped here).
fn failure(v: Value, stderr: &[u8]) -> ApiError {
    let (step, message, hint, errno) = if v.get("termination").is_some() {
        let e = &v["error"];
        (e["step"].as_str(), e["message"].as_str(), e["hint"].as_str(), e["errno"].clone())
    } else {
        (v["step"].as_str(), v["error"].as_str(), v["hint"].as_str(), v["errno"].clone())
    };
    let stderr = String::from_utf8_lossy(stderr);
    let message = message.map(str::to_string).unwrap_or_else(|| stderr.trim().trim_start_matches("husk: ").to_string());
    let step = step.unwrap_or("husk").to_string();
    let status = status_of_step(&step, &message);
    let step = if status == 404 { "lookup".to_string() } else { step };
    let mut extra = serde_json::Map::new();
    for k in ["ready_check", "sandbox_id"] {
        if let Some(x) = v.get(k) {
            extra.insert(k.into(), x.clone());
        }
    }
    ApiError {
        status,
        step,
        errno: if errno.is_null() { Value::Null } else { errno },
        message,
        hint: hint.map(str::to_string),
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

fn create(ctx: &Ctx, body: &[u8]) -> Result<Reply, ApiError> {
    let req: CreateBody = body::parse(body)?;
    if let Some(c) = req.claim()? {
        return claim::claim(ctx, c);
    }
    let (args, secrets) = req.to_args(&ctx.address)?;
    let mut argv = ctx.argv(&["create", "--json"]);
    argv.extend(args.into_iter().map(OsString::from));
    let (_held, files) = secret_files(&secrets)?;
    argv.extend(files);
    Ok(Reply::Json(201, create_child(argv)?))
}

/// Each secret in a memfd of its own, inherited by the command (no
/// CLOEXEC), and the `--secret-file NAME=/proc/self/fd/N` arguments that
/// name them: the values never appear in argv (`ps`), and never in the
/// environment of husk itself (a secret named `HUSK_NO_CGROUP` or
/// `LD_PRELOAD` would change what husk does). Keep the files until the
/// command has read them.
fn secret_files(secrets: &body::Secrets) -> Result<(Vec<std::fs::File>, Vec<OsString>), ApiError> {
    use std::io::Write;
    let mut held = Vec::new();
    let mut args = Vec::new();
    for (name, value) in secrets {
        let mut f = nix::sys::memfd::memfd_create(c"husk-secret", nix::sys::memfd::MFdFlags::empty())
            .map(std::fs::File::from)
            .map_err(|e| ApiError::new(500, "serve", format!("memfd_create: {e}")))?;
        f.write_all(value.as_bytes()).map_err(|e| ApiError::new(500, "serve", format!("holding a secret: {e}")))?;
        args.push(OsString::from(format!("--secret-file={name}=/proc/self/fd/{}", f.as_raw_fd())));
        held.push(f);
    }
    Ok((held, args))
}

/// `husk create --json` as a program of its own; its record.
fn create_child(argv: Vec<OsString>) -> Result<Value, ApiError> {
    // Refused here, with clap's own words, before a program starts.
    parse_cli(argv.clone())?;
    // A program of its own (see the module text): the supervisor it forks
    // must not inherit this connection.
    let mut cmd = std::process::Command::new("/proc/self/exe");
    std::os::unix::process::CommandExt::arg0(&mut cmd, "husk");
    cmd.args(&argv[1..]).stdin(std::process::Stdio::null());
    let out = cmd.output().map_err(|e| ApiError::new(500, "create", format!("starting husk create: {e}")))?;
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    if out.status.success() && v.get("id").is_some() {
        return Ok(with_api_state(v));
    }
    Err(failure(v, &out.stderr))
}

/// What a command run in-process printed.
struct Printed {
    code: i32,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

fn parse_cli(argv: Vec<OsString>) -> Result<Cli, ApiError> {
    Cli::parse_from_args(argv).map_err(|e| {
        let text = e.to_string();
        let first = text.lines().next().unwrap_or("").trim_start_matches("error: ").to_string();
        ApiError::new(400, "arguments", first)
    })
}

/// Runs a husk command line in this process with stdin from `stdin`, stdout
/// into memory (or onto `stream_to`) and stderr into memory.
fn run_here(argv: Vec<OsString>, stdin: &[u8], stream_to: Option<&Conn>, t_start: u64) -> Result<Printed, ApiError> {
    let cli = parse_cli(argv)?;
    let io = |what: &str, e: std::io::Error| ApiError::new(500, "serve", format!("{what}: {e}"));
    let memfd = |name: &str| -> Result<std::fs::File, ApiError> {
        nix::sys::memfd::memfd_create(name, nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
            .map(std::fs::File::from)
            .map_err(|e| ApiError::new(500, "serve", format!("memfd_create: {e}")))
    };
    let mut input = memfd("husk-serve-stdin")?;
    use std::io::{Read, Seek, Write};
    input.write_all(stdin).and_then(|_| input.rewind()).map_err(|e| io("buffering stdin", e))?;
    let mut out = memfd("husk-serve-stdout")?;
    let mut err = memfd("husk-serve-stderr")?;
    let dup = |from: i32, to: i32| {
        crate::sys::fd::dup_onto(from, to).map_err(|e| ApiError::new(500, "serve", format!("dup2: {e}")))
    };
    dup(input.as_raw_fd(), 0)?;
    dup(stream_to.map(Conn::raw_fd).unwrap_or(out.as_raw_fd()), 1)?;
    dup(err.as_raw_fd(), 2)?;
    let code = crate::print::finish(super::dispatch(cli, t_start), EXIT_HUSK_FAILED);
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    out.rewind().and_then(|_| out.read_to_end(&mut stdout)).map_err(|e| io("reading stdout", e))?;
    err.rewind().and_then(|_| err.read_to_end(&mut stderr)).map_err(|e| io("reading stderr", e))?;
    Ok(Printed { code, stdout, stderr })
}

/// Runs `husk <args> --json`-style commands whose stdout is one JSON value.
fn run_json(ctx: &Ctx, args: &[&str]) -> Result<Value, ApiError> {
    let p = run_here(ctx.argv(args), b"", None, crate::spawn::now_ns())?;
    let v: Value = serde_json::from_slice(&p.stdout).unwrap_or(Value::Null);
    if p.code == 0 && !v.is_null() {
        return Ok(v);
    }
    Err(failure(v, &p.stderr))
}

/// The API's state names: the CLI's, upper-cased (CREATING, READY,
/// EXECUTING, DESTROYED, FAILED).
fn with_api_state(mut v: Value) -> Value {
    if let Some(s) = v.get("state").and_then(Value::as_str) {
        v["state"] = json!(s.to_ascii_uppercase());
    }
    v
}

fn list(ctx: &Ctx, head: &Head) -> Result<Reply, ApiError> {
    let mut args = vec!["ls".to_string(), "--json".to_string()];
    for l in head.query_all("label") {
        args.push(format!("--label={l}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let v = run_json(ctx, &args)?;
    let items: Vec<Value> = v.as_array().cloned().unwrap_or_default().into_iter().map(with_api_state).collect();
    Ok(Reply::Json(200, json!({"sandboxes": items})))
}

fn get(ctx: &Ctx, what: &str) -> Result<Reply, ApiError> {
    let id = match lookup(ctx, what) {
        Ok(id) => id,
        Err(e) => {
            // A sandbox that ended recently is DESTROYED, with how and when.
            if let Ok(store) = store(ctx)
                && let Some(t) = crate::sandbox::tombstone::find(store, what)
            {
                let mut v = serde_json::to_value(&t).unwrap_or(json!({}));
                v["state"] = json!("DESTROYED");
                v["lease_remaining_ms"] = json!(0);
                v["message"] = json!(t.error().to_string());
                return Ok(Reply::Json(200, v));
            }
            return Err(e);
        }
    };
    Ok(Reply::Json(200, with_api_state(run_json(ctx, &["inspect", &id])?)))
}

fn destroy(ctx: &Ctx, what: &str) -> Result<Reply, ApiError> {
    let id = lookup(ctx, what)?;
    let v = run_json(ctx, &["rm", "--json", &id])?;
    let removed = v["removed"].as_array().is_some_and(|r| r.iter().any(|x| x == id.as_str()));
    if !removed {
        let why = v["errors"].get(0).and_then(Value::as_str).unwrap_or("the sandbox was not removed");
        return Err(ApiError::new(500, "destroy", why));
    }
    Ok(Reply::Json(200, json!({"id": id, "destroyed": true})))
}

fn renew(ctx: &Ctx, what: &str, body: &[u8]) -> Result<Reply, ApiError> {
    let id = lookup(ctx, what)?;
    let req: RenewBody =
        if body.iter().all(u8::is_ascii_whitespace) { RenewBody::default() } else { body::parse(body)? };
    let mut args = vec!["renew".to_string(), "--json".to_string()];
    if let Some(t) = req.ttl {
        args.push(format!("--ttl={}", body::scalar("ttl", &t)?));
    }
    args.push(id.clone());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_json(ctx, &args)?;
    Ok(Reply::Json(200, with_api_state(run_json(ctx, &["inspect", &id])?)))
}

fn wants_stream(head: &Head) -> bool {
    head.query("stream").is_some_and(|v| v == "1" || v == "true")
        || head.header("accept").is_some_and(|a| a.contains("application/x-ndjson"))
}

fn exec(ctx: &Ctx, head: &Head, what: &str, body: &[u8], conn: &mut Conn, t_start: u64) -> Result<Reply, ApiError> {
    let id = lookup(ctx, what)?;
    let req: ExecBody = body::parse(body)?;
    let stream = wants_stream(head);
    let (args, stdin) = req.to_args(stream, ctx.code_timeout)?;
    let mut argv = ctx.argv(&["exec"]);
    argv.extend(args.opts.into_iter().map(OsString::from));
    let (_held, files) = secret_files(&args.secrets)?;
    argv.extend(files);
    argv.push(id.into());
    if !args.command.is_empty() {
        argv.push("--".into());
        argv.extend(args.command.into_iter().map(OsString::from));
    }
    if stream {
        // Parsed before the head goes out: a bad request still gets a 400.
        parse_cli(argv.clone())?;
        http::write_stream_head(conn, 200, "application/x-ndjson")
            .map_err(|e| ApiError::new(500, "serve", e.to_string()))?;
        let watcher = cancel::Watcher::start(conn);
        run_here(argv, &stdin, Some(conn), t_start)?;
        drop(watcher);
        conn.finish();
        return Ok(Reply::Streamed);
    }
    // A client that goes away cancels its exec (nobody would read the verdict).
    let watcher = cancel::Watcher::start(conn);
    let p = run_here(argv, &stdin, None, t_start)?;
    drop(watcher);
    let v: Value = serde_json::from_slice(&p.stdout).unwrap_or(Value::Null);
    if v.get("termination").is_none() {
        return Err(failure(v, &p.stderr));
    }
    // The verdict whatever the command did; only a failure to reach the
    // sandbox at all (gone, busy) changes the status.
    let status = match (v["termination"].as_str(), v["error"]["step"].as_str()) {
        (Some("setup_failed"), Some(step @ ("busy" | "sandbox" | "arguments"))) => status_of_step(step, ""),
        _ => 200,
    };
    Ok(Reply::Raw(status, "application/json", p.stdout))
}
