//! The file tools (write_file, read_file, list_files): the sandbox
//! library's copier (`sandbox::files`, as `husk cp` and serve's files
//! endpoints use it), so a file goes through the sandbox's copier (every
//! path resolved within its root, written as its user, bounded), never
//! through a shell inside the sandbox.

use super::args::{ToolError, required, str_arg};
use super::tools::{Reply, Tools};
use crate::sandbox::files::{Files, FilesError};
use serde_json::{Value, json};

/// The most a read_file reads (the reply shows at most the server's
/// output limit of it).
const MAX_READ: u64 = 256 << 20;

impl Tools {
    /// One copy in sandbox `id` (`files` with the copy's bounds), or the
    /// error reply naming `what` and `path` with husk's words (a sandbox
    /// husk says is gone is forgotten).
    fn copy<T>(
        &mut self,
        id: &str,
        max_bytes: Option<u64>,
        what: &str,
        path: &str,
        call: impl FnOnce(&crate::sandbox::state::Store, &Files) -> Result<T, FilesError>,
    ) -> Result<T, Reply> {
        let mut f = Files { target: id.to_string(), ..Files::default() };
        if let Some(m) = max_bytes {
            f.limits.max_bytes = m;
        }
        let done = self.store().map_err(FilesError::Sandbox).and_then(|s| call(&s, &f));
        done.map_err(|e| {
            if let FilesError::Sandbox(s) = &e {
                self.forget_if_gone(id, s);
            }
            let hint = e.hint().map(|h| format!("; hint: {h}")).unwrap_or_default();
            Reply::failed(e.report().step, format!("{what} {path} failed: {e}{hint}"))
        })
    }

    pub(super) fn write_file(&mut self, args: &Value) -> Result<Reply, ToolError> {
        let id = self.sandbox(args)?.to_string();
        let path = required(args, "path")?;
        let content = required(args, "content")?;
        let data = match str_arg(args, "encoding")?.unwrap_or("utf-8") {
            "utf-8" => content.as_bytes().to_vec(),
            "base64" => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD
                    .decode(content)
                    .map_err(|e| ToolError::BadArgs(format!("content is not base64: {e}")))?
            }
            other => return Err(ToolError::BadArgs(format!("encoding {other:?}: use utf-8 or base64"))),
        };
        let mode = match str_arg(args, "mode")? {
            None | Some("") => 0o644,
            Some(m) => u32::from_str_radix(m, 8)
                .ok()
                .filter(|v| m.len() <= 4 && *v <= 0o7777)
                .ok_or_else(|| ToolError::BadArgs(format!("mode {m:?}: give octal permissions like 644 or 755")))?,
        };
        if crate::copy::split_path(path).is_none() {
            return Err(ToolError::BadArgs(format!("path {path:?}: name a file")));
        }
        let size = data.len() as u64;
        let put = |s: &_, f: &_| crate::sandbox::files::put_file(s, f, path, &mut &data[..], size, mode);
        Ok(match self.copy(&id, None, "writing", path, put) {
            Ok(_) => {
                Reply::ok(format!("wrote {} bytes to {path}", data.len()), json!({"path": path, "bytes": data.len()}))
            }
            Err(r) => r,
        })
    }

    pub(super) fn read_file(&mut self, args: &Value) -> Result<Reply, ToolError> {
        let id = self.sandbox(args)?.to_string();
        let path = required(args, "path")?;
        let mut data = Vec::new();
        let get = |s: &_, f: &_| crate::sandbox::files::get_file(s, f, path, &mut data);
        if let Err(r) = self.copy(&id, Some(MAX_READ), "reading", path, get) {
            return Ok(r);
        }
        let mut cap = crate::capture::Capture::new(self.config.output_limit, &crate::redact::Redaction::none());
        cap.push(&data);
        let out = cap.finish();
        let binary = out.base64.is_some();
        let mut text = String::new();
        if out.truncated {
            text.push_str(&format!(
                "[TRUNCATED: {path} is {} bytes; only its beginning and end are shown, the cut is marked [husk: N bytes truncated]]\n",
                out.bytes
            ));
        }
        if binary {
            text.push_str(&format!("[{path} is not valid UTF-8; undecodable bytes are shown as \u{fffd}]\n"));
        }
        text.push_str(&out.text);
        Ok(Reply::ok(text, json!({"path": path, "bytes": out.bytes, "truncated": out.truncated, "binary": binary})))
    }

    pub(super) fn list_files(&mut self, args: &Value) -> Result<Reply, ToolError> {
        let id = self.sandbox(args)?.to_string();
        let path = str_arg(args, "path")?.unwrap_or(".");
        let listed = match self.copy(&id, None, "listing", path, |s, f| crate::sandbox::files::list(s, f, path)) {
            Ok(l) => l,
            Err(r) => return Ok(r),
        };
        let mut text = String::new();
        let entries: Vec<Value> = listed
            .iter()
            .map(|e| {
                let perm = permissions(&e.kind, e.mode);
                text.push_str(&format!("{perm} {} {}\n", e.size, e.name));
                json!({"name": e.name, "type": e.kind, "size": e.size, "mode": e.mode, "permissions": perm})
            })
            .collect();
        if text.is_empty() {
            text = format!("{path} is empty");
        }
        Ok(Reply::ok(text, json!({"path": path, "entries": entries})))
    }
}

/// `ls -l`'s permission column: `-rwxr-xr-x`, `drwx------`, `lrwxrwxrwx`.
fn permissions(kind: &str, mode: u32) -> String {
    let t = match kind {
        "dir" => 'd',
        "symlink" => 'l',
        "file" => '-',
        _ => '?',
    };
    let mut s = String::from(t);
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn permissions_read_like_ls() {
        assert_eq!(super::permissions("file", 0o755), "-rwxr-xr-x");
        assert_eq!(super::permissions("dir", 0o700), "drwx------");
        assert_eq!(super::permissions("symlink", 0o777), "lrwxrwxrwx");
    }
}
