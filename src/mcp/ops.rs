//! The tools that act on a sandbox's filesystem as a whole: fork_sandbox
//! (new sandboxes from its current files) and commit_sandbox (its files
//! as an image). Each calls the library (`build::fork`) in this process,
//! as the CLI and `husk serve` do, so the three answer alike; a failure's
//! text is the library's message, with its step in structuredContent.
//!
//! Copies of host paths (`husk cp HOST ID:PATH`) have no tool: the host's
//! files are the operator's, not the model's; write_file, read_file and
//! list_files move a sandbox's files through the conversation instead.

use super::args::{ToolError, required};
use super::tools::{Reply, Tools};
use crate::build::fork::{CommitRequest, ForkRequest, commit, commit_report, fork};
use crate::outcome::ErrorReport;
use serde_json::{Value, json};

/// Images the model commits are named under this prefix: a commit must not
/// replace an image the operator runs (`husk mcp --image`).
pub const COMMIT_PREFIX: &str = "mcp/";

/// A library failure: its message as the text, its step beside it.
fn failed(r: &ErrorReport) -> Reply {
    let v = serde_json::to_value(r).unwrap_or_default();
    let message = v["message"].as_str().unwrap_or_default().to_string();
    Reply { structured: json!({"error": message, "step": v["step"]}), text: message, is_error: true }
}

impl Tools {
    pub(super) fn fork_sandbox(&mut self, args: &Value) -> Result<Reply, ToolError> {
        let id = self.sandbox(args)?.to_string();
        let count = match &args["count"] {
            Value::Null => 1,
            v => v
                .as_u64()
                .filter(|n| *n >= 1)
                .ok_or_else(|| ToolError::BadArgs("count must be an integer of at least 1".into()))?,
        };
        let room = self.config.max_sandboxes.saturating_sub(self.sandboxes.len()) as u64;
        if count > room {
            return Ok(Reply::err(format!(
                "this server keeps at most {} sandboxes alive and {} live; {count} more do not fit: destroy some first",
                self.config.max_sandboxes,
                self.sandboxes.len()
            )));
        }
        let req =
            ForkRequest { source: id.clone(), count: count as u32, labels: Vec::new(), ttl: Some(self.config.ttl) };
        let forked = match fork(&self.paths, &req) {
            Ok(f) => f,
            Err(e) => {
                let r = e.report();
                if r.step == crate::step::Phase::Sandbox {
                    self.sandboxes.remove(&id);
                }
                return Ok(failed(&r));
            }
        };
        let ids: Vec<String> = forked.sandboxes.iter().map(|r| r.id.clone()).collect();
        // The session owns them from here: destroy_sandbox, or its end,
        // removes them; so the handover holds once they are recorded.
        self.sandboxes.extend(ids.iter().cloned());
        forked.handover.confirm();
        let snapshot = forked.snapshot.name.clone();
        Ok(Reply::ok(
            format!(
                "forked {id} into {} (snapshot {snapshot}, {} bytes changed)",
                ids.join(", "),
                forked.snapshot.changes.bytes
            ),
            json!({"sandbox_ids": ids, "snapshot": snapshot}),
        ))
    }

    pub(super) fn commit_sandbox(&mut self, args: &Value) -> Result<Reply, ToolError> {
        let id = self.sandbox(args)?.to_string();
        let tag = required(args, "tag")?;
        let name = if tag.starts_with(COMMIT_PREFIX) { tag.to_string() } else { format!("{COMMIT_PREFIX}{tag}") };
        match commit(&self.paths, &CommitRequest { sandbox: id.clone(), name }) {
            Ok(c) => Ok(Reply::ok(
                format!("sandbox {id} committed as {} ({}, {} bytes changed)", c.name, c.id, c.changes.bytes),
                json!({"image": c.name, "id": c.id, "bytes": c.changes.bytes}),
            )),
            Err(e) => Ok(failed(&commit_report(&e))),
        }
    }
}
