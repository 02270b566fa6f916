//! E2B compatibility: the routes the unmodified `e2b` and
//! `e2b-code-interpreter` SDKs call, answered by husk's sandboxes
//! (docs/e2b.md).
//!
//! The SDKs talk to three services, which one `husk serve` address answers
//! when the SDK is pointed at it (`E2B_API_URL` and `E2B_SANDBOX_URL`):
//!
//! - the control plane (`api`): `POST /v2/sandboxes`, `GET /v2/sandboxes`,
//!   `GET|DELETE /sandboxes/{id}`, `POST /sandboxes/{id}/timeout`,
//!   `POST /v2/sandboxes/{id}/connect`;
//! - envd, the in-sandbox daemon (port 49983 in E2B's cloud): Connect-RPC
//!   `process.Process/*` (`process`) and `filesystem.Filesystem/*` plus
//!   `GET|POST /files` (`fs`);
//! - the code interpreter (port 49999): `POST /execute`, `/contexts` (`code`).
//!
//! With `E2B_SANDBOX_URL` set, every sandbox's envd and interpreter
//! requests go to that one URL; the SDK names the sandbox in the
//! `E2b-Sandbox-Id` header, which is how a request finds its sandbox here.
//! Nothing runs inside the sandbox to answer them: each is done by the
//! library (`sandbox::exec`, `sandbox::files`) from this connection's
//! process, as `husk exec` and `husk cp` would.
//!
//! The API key: over TCP, serve's bearer token (`--token-file`); the SDK
//! sends it as `X-API-KEY`, and this module hands it back as the sandbox's
//! `envdAccessToken` and `trafficAccessToken`, so the SDK's envd and
//! interpreter requests carry it too (`serve::check_token` accepts all
//! three headers).

use super::{ApiError, Conn, Ctx, Reply};
use crate::serve::http::Head;

mod api;
mod code;
mod connect;
mod fs;
mod process;
mod run;

/// The label every sandbox made through these routes carries: `list`
/// shows only these (an E2B client should not see, or kill, the CLI's).
pub const E2B_LABEL: &str = "husk-e2b";
/// The label prefix that holds E2B metadata (`metadata={"k": "v"}` is the
/// label `e2b.k=v`).
pub const META_PREFIX: &str = "e2b.";
/// The envd version husk's answers match: what the SDK decides features by
/// (0.5.7: octet-stream uploads, stdin for commands, close_stdin).
pub const ENVD_VERSION: &str = "0.5.7";

/// Answers the request when it is one of the E2B routes; `None` leaves it
/// to husk's own API.
pub fn route(head: &Head, body: &[u8], ctx: &Ctx, conn: &mut Conn, t_start: u64) -> Option<Result<Reply, ApiError>> {
    let path = head.path.trim_end_matches('/');
    let segs: Vec<&str> = path.split('/').skip(1).collect();
    let m = head.method.as_str();
    let r = match (m, segs.as_slice()) {
        ("POST", ["v2", "sandboxes"]) => api::create(ctx, body),
        ("GET", ["v2", "sandboxes"]) => api::list(ctx, head),
        ("GET", ["sandboxes", id]) => api::info(ctx, id),
        ("DELETE", ["sandboxes", id]) => api::kill(ctx, id),
        ("POST", ["sandboxes", id, "timeout"]) => api::set_timeout(ctx, id, body),
        ("POST", ["v2", "sandboxes", id, "connect"]) => api::connect(ctx, id, body),
        (_, ["sandboxes", _, what, ..] | ["v2", "sandboxes", _, what, ..]) => Ok(api::refuse(what)),
        (_, ["health"]) => Ok(Reply::Raw(204, "text/plain", Vec::new())),
        ("GET" | "POST", ["files"]) => fs::files(ctx, head, body),
        ("POST", [svc, method]) if svc.starts_with("process.") => process::rpc(ctx, head, method, body, conn, t_start),
        ("POST", [svc, method]) if svc.starts_with("filesystem.") => fs::rpc(ctx, head, method, body, conn),
        ("POST", ["execute"]) => code::execute(ctx, head, body, conn, t_start),
        (_, ["contexts", ..]) => code::contexts(ctx, head, &segs[1..], body),
        _ => return None,
    };
    Some(r)
}

/// The sandbox an envd or interpreter request is for (`E2b-Sandbox-Id`).
fn sandbox_of(ctx: &Ctx, head: &Head) -> Result<String, ApiError> {
    let Some(id) = head.header("e2b-sandbox-id") else {
        return Err(ApiError::new(400, "request", "no E2b-Sandbox-Id header: which sandbox is this for?")
            .hint("point the SDK at husk serve with E2B_SANDBOX_URL (docs/e2b.md)"));
    };
    super::lookup(ctx, id)
}

/// The E2B user a request names (`username=`, `user=`) as husk's: "root"
/// is root; "user", E2B's default account, is the sandbox's own user.
fn user_of(name: Option<&str>) -> Option<String> {
    match name {
        Some("root") => Some("0:0".into()),
        Some("") | Some("user") | None => None,
        Some(other) => Some(other.to_string()),
    }
}

/// A refusal (a wrong or missing token) in E2B's error shape, `{code,
/// message}`, for a request from an E2B SDK (it names a sandbox or carries
/// E2B's key header), which reads only that shape.
pub fn refusal(head: &Head, e: &ApiError) -> Option<Vec<u8>> {
    let from_e2b = ["x-api-key", "e2b-sandbox-id", "x-access-token"].iter().any(|h| head.header(h).is_some());
    from_e2b.then(|| {
        let hint = e.hint.as_ref().map(|h| format!(" ({h})")).unwrap_or_default();
        let mut b =
            serde_json::to_vec(&serde_json::json!({"code": e.status, "message": format!("{}{hint}", e.message)}))
                .unwrap_or_default();
        b.push(b'\n');
        b
    })
}
