//! The code interpreter's routes: `POST /execute` streams a cell's output
//! as NDJSON (`{"type": "stdout"|"stderr"|"error", ...}`), `/contexts`
//! makes, lists and drops contexts.
//!
//! Python runs in the sandbox's python session (`create --session python`,
//! which `api::create` asks for when the template has python): state is
//! kept between calls, as in a notebook, and every python context shares
//! that one session. Bash runs cold, `bash -s` per call, in the context's
//! cwd. A context id says its language (`python-…`, `bash-…`), so serve
//! keeps no state for them.

use super::super::{ApiError, Conn, Ctx, Reply};
use crate::serve::http::{self, Head};
use serde::Deserialize;
use serde_json::{Value, json};
use std::os::fd::{AsFd, AsRawFd};

/// Output kept in the verdict besides the stream: the error's traceback
/// is read from its end.
const KEEP: u64 = 256 << 10;

#[derive(Deserialize)]
struct ExecuteBody {
    code: String,
    context_id: Option<String>,
    language: Option<String>,
    #[serde(default)]
    env_vars: Option<std::collections::BTreeMap<String, String>>,
}

fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn line(v: &Value) -> Vec<u8> {
    let mut b = serde_json::to_vec(v).unwrap_or_default();
    b.push(b'\n');
    b
}

fn output_event(which: &str, bytes: &[u8]) -> Vec<u8> {
    line(&json!({"type": which, "text": String::from_utf8_lossy(bytes), "timestamp": now_ns()}))
}

/// What a context id or `language` names.
#[derive(Clone, Copy, PartialEq)]
enum Lang {
    Python,
    Bash,
}

fn lang_of(name: &str) -> Option<Lang> {
    match name {
        "python" | "python3" => Some(Lang::Python),
        "bash" | "sh" => Some(Lang::Bash),
        _ => None,
    }
}

/// `LANG-RANDOM-HEX(cwd)`: the language, and the cwd the context was made
/// with (hex: the id goes into URL paths).
fn parse_context(id: &str) -> Option<(Lang, Option<String>)> {
    let mut parts = id.split('-');
    let lang = lang_of(parts.next()?)?;
    let _random = parts.next()?;
    let cwd = parts.next().and_then(|h| hex::decode(h).ok()).and_then(|b| String::from_utf8(b).ok());
    Some((lang, cwd.filter(|c| !c.is_empty())))
}

fn not_found(m: String) -> Reply {
    Reply::Raw(404, "text/plain", m.into_bytes())
}

pub fn execute(ctx: &Ctx, head: &Head, body: &[u8], conn: &mut Conn, t: u64) -> Result<Reply, ApiError> {
    let id = match super::sandbox_of(ctx, head) {
        Ok(id) => id,
        Err(e) => return Ok(not_found(e.message)),
    };
    let req: ExecuteBody = serde_json::from_slice(body)
        .map_err(|e| ApiError::new(400, "request", format!("the execute request's JSON: {e}")))?;
    let (lang, cwd) = match (&req.context_id, &req.language) {
        (Some(c), _) => match parse_context(c) {
            Some(x) => x,
            None => return Ok(not_found(format!("context {c} not found"))),
        },
        (None, Some(l)) => match lang_of(l) {
            Some(x) => (x, None),
            None => {
                return Ok(Reply::Raw(
                    400,
                    "text/plain",
                    format!("language {l:?}: husk runs python and bash (docs/e2b.md)").into_bytes(),
                ));
            }
        },
        (None, None) => (Lang::Python, None),
    };
    let store = super::super::store(ctx)?;
    let rec = crate::sandbox::registry::live_record(store, &id).map_err(|e| ApiError::of_sandbox(&e))?;
    let session = rec.spec.warm.is_some();
    let mut req_x = super::run::request(&id, Vec::new());
    req_x.exec.capture = Some(KEEP);
    req_x.exec.env = req.env_vars.clone().unwrap_or_default().into_iter().collect();
    req_x.exec.workdir = cwd;

    http::write_stream_head(conn, 200, "application/x-ndjson")
        .map_err(|e| ApiError::new(500, "serve", format!("writing the stream's head: {e}")))?;
    let watcher = super::super::cancel::Watcher::start(conn);
    let out = conn.fd().try_clone_to_owned();
    let redact = req_x.redact.clone();
    let ran = super::run::tapped(out, output_event, &redact, |tap| {
        if lang == Lang::Python && session {
            super::run::stdin_null().map_err(|e| crate::sandbox::SandboxError::State(e.message))?;
            crate::sandbox::exec::exec_code(store, &req_x, req.code.as_bytes(), Some("python"), t, Some(tap))
        } else {
            cold(store, &mut req_x, lang, &req.code, t, tap)
        }
    });
    drop(watcher);
    let ran = ran.map_err(|e| crate::sandbox::SandboxError::State(e.to_string())).and_then(|r| r);
    use std::io::Write;
    let tail = match ran {
        Ok(r) => {
            // The call's notebook results (docs/warm.md, Results), as the
            // code interpreter's `result` messages.
            for res in r.extra.get("results").and_then(|v| v.as_array()).into_iter().flatten() {
                let _ = conn.write_all(&line(&result_message(res)));
            }
            match r.extra.get("exception").filter(|e| e.is_object()) {
                Some(e) => {
                    Some(json!({"type": "error", "name": e["name"], "value": e["value"], "traceback": e["traceback"]}))
                }
                None => error_of(&r.outcome, lang),
            }
        }
        Err(e) => {
            let e = ApiError::of_sandbox(&e);
            Some(json!({"type": "error", "name": "SandboxError", "value": e.message, "traceback": ""}))
        }
    };
    if let Some(e) = tail {
        let _ = conn.write_all(&line(&e));
    }
    let _ = conn.write_all(&line(&json!({"type": "end_of_execution"})));
    let _ = conn.flush();
    conn.finish();
    Ok(Reply::Streamed)
}

/// One husk result (`{type, is_main_result, data: MIME bundle}`) as the
/// code interpreter's `result` message: its formats under the names the
/// SDK's `Result` takes (text, html, png, ...), the rest under `extra`.
fn result_message(r: &Value) -> Value {
    const NAMES: [(&str, &str); 10] = [
        ("text/plain", "text"),
        ("text/html", "html"),
        ("text/markdown", "markdown"),
        ("image/svg+xml", "svg"),
        ("image/png", "png"),
        ("image/jpeg", "jpeg"),
        ("application/pdf", "pdf"),
        ("text/latex", "latex"),
        ("application/json", "json"),
        ("application/javascript", "javascript"),
    ];
    let mut out = json!({"type": "result", "is_main_result": r["is_main_result"] == true});
    let mut extra = serde_json::Map::new();
    for (mime, v) in r["data"].as_object().into_iter().flatten() {
        match NAMES.iter().find(|(m, _)| m == mime) {
            Some((_, name)) => out[*name] = v.clone(),
            None => {
                extra.insert(mime.clone(), v.clone());
            }
        }
    }
    if !extra.is_empty() {
        out["extra"] = Value::Object(extra);
    }
    out
}

/// The code as the interpreter's stdin, run as `python3 -` or `bash -s`.
fn cold(
    store: &crate::sandbox::state::Store,
    req: &mut crate::sandbox::exec::ExecRequest,
    lang: Lang,
    code: &str,
    t: u64,
    tap: &crate::stream::Tap,
) -> Result<crate::sandbox::exec::ExecResult, crate::sandbox::SandboxError> {
    use std::io::{Seek, Write};
    let st = |e: std::io::Error| crate::sandbox::SandboxError::State(format!("holding the code: {e}"));
    let mut f = nix::sys::memfd::memfd_create(c"husk-e2b-code", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
        .map(std::fs::File::from)
        .map_err(|e| st(e.into()))?;
    f.write_all(code.as_bytes()).and_then(|_| f.rewind()).map_err(st)?;
    crate::sys::fd::dup_onto(f.as_fd().as_raw_fd(), 0).map_err(|e| st(e.into()))?;
    req.exec.argv = match lang {
        Lang::Python => vec!["python3".into(), "-".into()],
        Lang::Bash => vec!["bash".into(), "-s".into()],
    };
    crate::sandbox::exec::exec_to(store, req, t, Some(tap))
}

/// A failed cell as the interpreter's error: for python, the exception's
/// name and value from the traceback's last line.
fn error_of(o: &crate::outcome::Outcome, lang: Lang) -> Option<Value> {
    use crate::outcome::Termination;
    let stderr = o.stderr.as_ref().map(|c| c.text.clone()).unwrap_or_default();
    match (o.termination, o.status) {
        (Termination::Exited, Some(0)) => None,
        (Termination::Exited, Some(code)) => {
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
            let (name, value) = match (lang, last.split_once(": ")) {
                (Lang::Python, Some((n, v))) if !n.contains(' ') => (n.to_string(), v.to_string()),
                (Lang::Python, None) if !last.is_empty() && !last.contains(' ') => (last.to_string(), String::new()),
                _ => ("Error".to_string(), format!("exit status {code}")),
            };
            Some(json!({"type": "error", "name": name, "value": value, "traceback": stderr}))
        }
        (Termination::WallTimeout, _) => {
            Some(json!({"type": "error", "name": "TimeoutError", "value": "the cell timed out", "traceback": ""}))
        }
        (Termination::SetupFailed, _) => {
            let m = o.error.as_ref().map(|e| e.message.clone()).unwrap_or_default();
            Some(json!({"type": "error", "name": "SandboxError", "value": m, "traceback": ""}))
        }
        _ => Some(json!({"type": "error", "name": "KilledError", "value": "the cell was killed", "traceback": stderr})),
    }
}

#[derive(Deserialize, Default)]
struct ContextBody {
    language: Option<String>,
    cwd: Option<String>,
}

pub fn contexts(ctx: &Ctx, head: &Head, rest: &[&str], body: &[u8]) -> Result<Reply, ApiError> {
    if let Err(e) = super::sandbox_of(ctx, head) {
        return Ok(not_found(e.message));
    }
    match (head.method.as_str(), rest) {
        ("POST", []) => {
            let b: ContextBody = serde_json::from_slice(body).unwrap_or_default();
            let name = b.language.clone().unwrap_or_else(|| "python".into());
            let Some(lang) = lang_of(&name) else {
                return Ok(Reply::Raw(
                    400,
                    "text/plain",
                    format!("language {name:?}: husk runs python and bash (docs/e2b.md)").into_bytes(),
                ));
            };
            let tag = match lang {
                Lang::Python => "python",
                Lang::Bash => "bash",
            };
            let mut rnd = [0u8; 6];
            let _ = getrandom(&mut rnd);
            let cwd = b.cwd.clone().unwrap_or_default();
            let id = format!("{tag}-{}-{}", hex::encode(rnd), hex::encode(cwd.as_bytes()));
            Ok(Reply::Json(
                200,
                json!({"id": id, "language": tag, "cwd": if cwd.is_empty() { "/".into() } else { cwd }}),
            ))
        }
        ("GET", []) => Ok(Reply::Json(200, json!([]))),
        ("DELETE", [_]) => Ok(Reply::Raw(204, "text/plain", Vec::new())),
        _ => Ok(Reply::Raw(
            501,
            "text/plain",
            b"restarting or changing a context is not supported by husk's E2B routes (docs/e2b.md)".to_vec(),
        )),
    }
}

fn getrandom(buf: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}
