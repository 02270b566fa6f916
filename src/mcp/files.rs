//! The file tools (write_file, read_file, list_files): `husk cp` in a
//! child process, so a file goes through the sandbox's copier (every path
//! resolved within its root, written as its user, bounded), never through
//! a shell inside the sandbox.

use super::args::{ToolError, os, required, str_arg};
use super::tools::{Reply, Tools};
use serde_json::{Value, json};

/// The most a read_file reads (the reply shows at most the server's
/// output limit of it).
const MAX_READ: u64 = 256 << 20;

impl Tools {
    /// `husk cp ARGS`: its stdout, or the error reply naming `what` and
    /// `path` with husk's words (a sandbox husk says is gone is forgotten).
    fn cp(
        &mut self,
        id: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
        what: &str,
        path: &str,
    ) -> Result<Result<Vec<u8>, Reply>, ToolError> {
        let mut a = os(&["cp"]);
        a.extend(os(args));
        let ran = self.runner.run(&a, stdin)?;
        if ran.code == Some(0) {
            return Ok(Ok(ran.stdout));
        }
        let said: Vec<&str> = ran
            .stderr
            .lines()
            .map(|l| l.trim_start_matches("husk: ").trim_start_matches("cp: "))
            .filter(|l| !l.is_empty())
            .collect();
        let text = said.join("; ");
        if ["no sandbox", " expired at ", " was removed at "].iter().any(|w| text.contains(w)) {
            self.sandboxes.remove(id);
        }
        Ok(Err(Reply::err(format!("{what} {path} failed: {text}"))))
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
        let Some((dir, name)) = crate::copy::split_path(path) else {
            return Err(ToolError::BadArgs(format!("path {path:?}: name a file")));
        };
        // One file as a tar stream, unpacked into its directory by the copier.
        let mut tar = Vec::with_capacity(data.len() + 2048);
        crate::copy::single_file(&mut tar, name.as_bytes(), &mut &data[..], data.len() as u64, mode)
            .map_err(|e| ToolError::BadArgs(format!("path {path:?}: {e}")))?;
        let target = format!("{id}:{dir}");
        Ok(match self.cp(&id, &["-", &target], Some(&tar), "writing", path)? {
            Ok(_) => {
                Reply::ok(format!("wrote {} bytes to {path}", data.len()), json!({"path": path, "bytes": data.len()}))
            }
            Err(r) => r,
        })
    }

    pub(super) fn read_file(&mut self, args: &Value) -> Result<Reply, ToolError> {
        let id = self.sandbox(args)?.to_string();
        let path = required(args, "path")?;
        let source = format!("{id}:{path}");
        let max = format!("--max-bytes={MAX_READ}");
        let tar = match self.cp(&id, &[&source, "-", &max], None, "reading", path)? {
            Ok(t) => t,
            Err(r) => return Ok(r),
        };
        let mut data = Vec::new();
        if let Err(e) = crate::copy::file_of(&mut &tar[..], &mut data, path) {
            return Ok(Reply::err(format!("reading {path} failed: {e}")));
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
        let source = format!("{id}:{path}");
        let out = match self.cp(&id, &["--list", &source], None, "listing", path)? {
            Ok(o) => o,
            Err(r) => return Ok(r),
        };
        let listed: Vec<crate::copy::list::Entry> = serde_json::from_slice(&out)
            .map_err(|e| ToolError::BadArgs(format!("husk cp --list printed no listing: {e}")))?;
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
