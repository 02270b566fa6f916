//! envd's files: `GET|POST /files` (a file's bytes out and in, through
//! `sandbox::files`, the code `husk cp` runs) and the `filesystem.Filesystem`
//! RPCs. Stat, MakeDir, Move and Remove run `stat`, `mkdir`, `mv` and `rm`
//! in the sandbox as its user (`sh -c SCRIPT sh PATH`: the path is an
//! argument, never part of the script); ListDir lists through the copier.

use super::super::{ApiError, Conn, Ctx, Reply};
use super::connect::{self, Code, RpcError};
use super::run::{self, Ran};
use crate::copy::CopyError;
use crate::sandbox::files::{self, Files, FilesError};
use crate::serve::http::Head;
use serde_json::{Value, json};

/// A read answers from memory: at most this much.
const MAX_READ: u64 = 256 << 20;

/// `st PATH`: one line `TYPE|SIZE|MODE|PERMS|OWNER|GROUP|MTIME`, then the
/// link's target for a symlink; exit 2 when nothing is there.
const STAT: &str = r#"st() { [ -e "$1" ] || [ -L "$1" ] || exit 2; stat -c '%F|%s|%a|%A|%U|%G|%Y' -- "$1" || exit 1; if [ -L "$1" ]; then readlink -- "$1"; fi; }
"#;

fn files_for(id: &str, user: Option<String>) -> Files {
    Files {
        target: id.to_string(),
        user,
        wait: true,
        limits: crate::copy::Limits { max_bytes: MAX_READ, ..Default::default() },
    }
}

/// A copy's failure as envd's HTTP error (`{code, message}`).
fn copy_error(e: &FilesError) -> (u16, String) {
    let status = match e {
        FilesError::Sandbox(s) => ApiError::of_sandbox(s).status,
        FilesError::Inside { error, .. } | FilesError::Host(error) => match error {
            CopyError::NotFound { .. } | CopyError::Fs { errno: crate::sys::Errno::ENOENT, .. } => 404,
            CopyError::Fs { errno: crate::sys::Errno::EROFS | crate::sys::Errno::EACCES, .. } => 403,
            CopyError::NotDir { .. } => 400,
            CopyError::TooBig { .. } => 413,
            _ => 500,
        },
        _ => 500,
    };
    (status, e.to_string())
}

fn http_error(status: u16, message: String) -> Reply {
    Reply::Json(status, json!({"code": status, "message": message}))
}

pub fn files(ctx: &Ctx, head: &Head, body: &[u8]) -> Result<Reply, ApiError> {
    let id = match super::sandbox_of(ctx, head) {
        Ok(id) => id,
        Err(e) => return Ok(http_error(e.status, e.message)),
    };
    let store = super::super::store(ctx)?;
    let user = super::user_of(head.query("username")).or_else(|| super::process::user_from(head));
    let f = files_for(&id, user.clone());
    if head.method == "GET" {
        let Some(path) = head.query("path") else { return Ok(http_error(400, "no ?path=".into())) };
        let mut out = Vec::new();
        return Ok(match files::get_file(store, &f, path, &mut out) {
            Ok(_) => Reply::Raw(200, "application/octet-stream", out),
            Err(e) => {
                let (s, m) = copy_error(&e);
                http_error(s, m)
            }
        });
    }
    let ctype = head.header("content-type").unwrap_or("");
    let uploads: Vec<(String, &[u8])> = if let Some(b) = ctype.split("boundary=").nth(1) {
        let b = b.split(';').next().unwrap_or("").trim().trim_matches('"');
        let parts = multipart(body, b);
        let single = head.query("path").filter(|_| parts.len() == 1);
        parts.into_iter().map(|(name, data)| (single.map(str::to_string).unwrap_or(name), data)).collect()
    } else {
        match head.query("path") {
            Some(p) => vec![(p.to_string(), body)],
            None => return Ok(http_error(400, "no ?path=".into())),
        }
    };
    if head.header("content-encoding").is_some_and(|e| e != "identity") {
        return Ok(http_error(501, "compressed uploads are not supported by husk's E2B routes".into()));
    }
    let mut written = Vec::new();
    for (path, data) in uploads {
        if path.is_empty() {
            return Ok(http_error(400, "an upload without a path".into()));
        }
        let put = || files::put_file(store, &f, &path, &mut &data[..], data.len() as u64, 0o644);
        let r = match put() {
            // E2B writes create the parent directories.
            Err(e) if copy_error(&e).0 == 404 => {
                let parent = path.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
                if !parent.is_empty() {
                    run::sh(ctx, &id, user.clone(), r#"mkdir -p -- "$1""#, &[parent])?;
                }
                put()
            }
            r => r,
        };
        if let Err(e) = r {
            let (s, m) = copy_error(&e);
            return Ok(http_error(s, m));
        }
        let name = path.rsplit('/').next().unwrap_or(&path).to_string();
        written.push(json!({"name": name, "type": "file", "path": path}));
    }
    Ok(Reply::Json(200, json!(written)))
}

/// The parts of a `multipart/form-data` body: (filename, bytes) each.
fn multipart<'a>(body: &'a [u8], boundary: &str) -> Vec<(String, &'a [u8])> {
    let delim = format!("--{boundary}");
    let d = delim.as_bytes();
    let mut out = Vec::new();
    let mut starts = Vec::new();
    let mut i = 0;
    while let Some(p) = find(&body[i..], d) {
        starts.push(i + p);
        i += p + d.len();
    }
    for w in starts.windows(2) {
        let part = &body[w[0] + d.len()..w[1]];
        let part = part.strip_prefix(b"\r\n").unwrap_or(part);
        let part = part.strip_suffix(b"\r\n").unwrap_or(part);
        let Some(h) = find(part, b"\r\n\r\n") else { continue };
        let headers = String::from_utf8_lossy(&part[..h]);
        let name = headers
            .split("filename=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .or_else(|| headers.split("name=\"").nth(1).and_then(|r| r.split('"').next()))
            .unwrap_or("")
            .to_string();
        out.push((name, &part[h + 4..]));
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

pub fn rpc(ctx: &Ctx, head: &Head, method: &str, body: &[u8], conn: &mut Conn) -> Result<Reply, ApiError> {
    let r = (|| {
        let req = connect::request(head, body)?;
        let id = super::sandbox_of(ctx, head)?;
        let user = super::process::user_from(head);
        let path = req["path"].as_str().unwrap_or("").to_string();
        match method {
            "Stat" => stat(ctx, &id, user, &path).map(|e| json!({"entry": e})),
            "ListDir" => list(ctx, &id, user, &path),
            "MakeDir" => {
                let script = format!(r#"{STAT} [ -e "$1" ] && exit 3; mkdir -p -- "$1" || exit 1; st "$1""#);
                entry_of(ran(run::sh(ctx, &id, user, &script, &[&path])?)?, &path).map(|e| json!({"entry": e}))
            }
            "Move" => {
                let (src, dst) = (req["source"].as_str().unwrap_or(""), req["destination"].as_str().unwrap_or(""));
                let script =
                    format!(r#"{STAT} [ -e "$1" ] || [ -L "$1" ] || exit 2; mv -- "$1" "$2" || exit 1; st "$2""#);
                entry_of(ran(run::sh(ctx, &id, user, &script, &[src, dst])?)?, dst).map(|e| json!({"entry": e}))
            }
            "Remove" => {
                let script = r#"[ -e "$1" ] || [ -L "$1" ] || exit 2; rm -rf -- "$1""#;
                ran(run::sh(ctx, &id, user, script, &[&path])?).map(|_| json!({}))
            }
            _ => Err(RpcError::new(
                Code::Unimplemented,
                format!("filesystem.Filesystem/{method} is not supported by husk's E2B routes (docs/e2b.md)"),
            )),
        }
    })();
    match r {
        Ok(v) => Ok(Reply::Json(200, v)),
        Err(e) if method == "WatchDir" => connect::failed_stream(conn, e),
        Err(e) => Ok(e.unary()),
    }
}

/// A helper script's status as envd's codes.
fn ran(r: Ran) -> Result<Ran, RpcError> {
    match r.status {
        Some(0) => Ok(r),
        Some(2) => Err(RpcError::new(Code::NotFound, "no such file or directory")),
        Some(3) => Err(RpcError::new(Code::AlreadyExists, "it exists already")),
        _ => Err(RpcError::new(Code::Internal, r.stderr.trim().to_string())),
    }
}

fn stat(ctx: &Ctx, id: &str, user: Option<String>, path: &str) -> Result<Value, RpcError> {
    let script = format!(r#"{STAT} st "$1""#);
    entry_of(ran(run::sh(ctx, id, user, &script, &[path])?)?, path)
}

/// envd's `EntryInfo` from `st`'s output.
fn entry_of(r: Ran, path: &str) -> Result<Value, RpcError> {
    let mut lines = r.stdout.lines();
    let line = lines.next().unwrap_or("");
    let f: Vec<&str> = line.splitn(7, '|').collect();
    let [kind, size, mode, perms, owner, group, mtime] = f.as_slice() else {
        return Err(RpcError::new(Code::Internal, format!("stat said {line:?}")));
    };
    let (ty, link) = match *kind {
        "directory" => ("FILE_TYPE_DIRECTORY", None),
        "symbolic link" => ("FILE_TYPE_SYMLINK", lines.next()),
        _ => ("FILE_TYPE_FILE", None),
    };
    let secs: i64 = mtime.parse().unwrap_or(0);
    let mut e = json!({
        "name": path.trim_end_matches('/').rsplit('/').next().unwrap_or(path),
        "type": ty,
        "path": path,
        "size": size.parse::<u64>().unwrap_or(0),
        "mode": u32::from_str_radix(mode, 8).unwrap_or(0),
        "permissions": perms,
        "owner": owner,
        "group": group,
        "modifiedTime": crate::oci::log::rfc3339(secs, 0),
    });
    if let Some(l) = link {
        e["symlinkTarget"] = json!(l);
    }
    Ok(e)
}

fn list(ctx: &Ctx, id: &str, user: Option<String>, path: &str) -> Result<Value, RpcError> {
    let store = super::super::store(ctx)?;
    let entries = files::list(store, &files_for(id, user), path).map_err(|e| {
        let (s, m) = copy_error(&e);
        RpcError::new(if s == 404 { Code::NotFound } else { Code::Internal }, m)
    })?;
    let base = path.trim_end_matches('/');
    let out: Vec<Value> = entries
        .into_iter()
        .map(|e| {
            let ty = match e.kind.as_str() {
                "dir" => "FILE_TYPE_DIRECTORY",
                "symlink" => "FILE_TYPE_SYMLINK",
                _ => "FILE_TYPE_FILE",
            };
            json!({
                "name": e.name,
                "type": ty,
                "path": format!("{base}/{}", e.name),
                "size": e.size,
                "mode": e.mode,
                "permissions": "",
                "owner": "",
                "group": "",
            })
        })
        .collect();
    Ok(json!({"entries": out}))
}
