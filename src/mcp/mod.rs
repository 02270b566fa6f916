//! `husk mcp`: a Model Context Protocol server on stdio (JSON-RPC 2.0, one
//! message per line). Methods: initialize, ping, tools/list, tools/call;
//! notifications are read and not answered. One request at a time: a
//! tool call runs to its end (bounded by its timeout) before the next
//! message is read.
//!
//! Hand-written rather than the `rmcp` SDK: rmcp needs tokio, tokio-util,
//! schemars, uuid and its proc-macro crate, none of which husk has, for
//! four methods over newline-delimited JSON; and husk's process model is
//! synchronous (the forks of `run`/`exec` want a single-threaded process).
//! Every tool is a call of the sandbox library in this process, the calls
//! the CLI makes (make.rs: `husk run`'s pipeline and `sandbox::create`;
//! calls.rs: exec, pause, destroy; files.rs: the copier; ops.rs: fork and
//! commit, `build::fork`): no husk child, no argv. This process stays
//! single-threaded for the forks they make, and lends its fd 0 and signal
//! mask to each call (lend.rs).

pub mod args;
pub mod calls;
pub mod files;
pub mod lend;
pub mod make;
pub mod operator;
pub mod ops;
pub mod output;
pub mod rpc;
pub mod summary;
pub mod tools;

use rpc::Incoming;
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use tools::{ToolError, Tools};

/// Protocol revisions this server speaks, newest first.
pub const PROTOCOL_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

const INSTRUCTIONS: &str = "husk runs code in isolated Linux sandboxes (no network unless this server's operator allows some, limited memory, a timeout). \
Use run_code for one-off code. For multi-step work, create_sandbox, then exec/write_file/read_file/list_files \
with its sandbox_id (files persist between calls), pause_sandbox/resume_sandbox to park one, and destroy_sandbox when done. Output longer than the \
server's limit is cut in the middle and the reply says so.";

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("writing to stdout: {0}")]
    Write(std::io::Error),
    #[error(transparent)]
    Read(std::io::Error),
}

/// Serves until `input` ends; then removes the sandboxes this session
/// made.
pub fn serve(tools: &mut Tools, input: &mut impl BufRead, output: &mut impl Write) -> Result<(), McpError> {
    let result = serve_loop(tools, input, output);
    tools.destroy_all();
    result
}

fn serve_loop(tools: &mut Tools, input: &mut impl BufRead, output: &mut impl Write) -> Result<(), McpError> {
    loop {
        let line = match rpc::read_line(input) {
            Ok(Some(line)) => line,
            Ok(None) => return Ok(()),
            Err(rpc::ReadError::Io(e)) => return Err(McpError::Read(e)),
            Err(e @ rpc::ReadError::TooLong) => {
                send(output, &rpc::error(&Value::Null, rpc::INVALID_REQUEST, &e.to_string()))?;
                continue;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let reply = match rpc::parse(&line) {
            Incoming::Request { id, method, params } => Some(handle(tools, &id, &method, &params)),
            Incoming::Notification { .. } | Incoming::Response => None,
            Incoming::Invalid { id, code, message } => Some(rpc::error(&id, code, &message)),
        };
        if let Some(reply) = reply {
            send(output, &reply)?;
        }
    }
}

fn send(output: &mut impl Write, msg: &Value) -> Result<(), McpError> {
    // serde_json escapes newlines inside strings: one message, one line.
    writeln!(output, "{msg}").and_then(|()| output.flush()).map_err(McpError::Write)
}

fn handle(tools: &mut Tools, id: &Value, method: &str, params: &Value) -> Value {
    match method {
        "initialize" => {
            let asked = params["protocolVersion"].as_str().unwrap_or("");
            let version = PROTOCOL_VERSIONS.iter().find(|v| **v == asked).unwrap_or(&PROTOCOL_VERSIONS[0]);
            rpc::result(
                id,
                json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {"listChanged": false}},
                    "serverInfo": {"name": "husk", "version": env!("CARGO_PKG_VERSION")},
                    "instructions": INSTRUCTIONS,
                }),
            )
        }
        "ping" => rpc::result(id, json!({})),
        "tools/list" => rpc::result(id, json!({"tools": tools::list()})),
        "tools/call" => {
            let Some(name) = params["name"].as_str() else {
                return rpc::error(id, rpc::INVALID_PARAMS, "tools/call needs params.name");
            };
            if !tools::list().as_array().is_some_and(|l| l.iter().any(|t| t["name"] == name)) {
                return rpc::error(id, rpc::INVALID_PARAMS, &format!("unknown tool {name:?}"));
            }
            let args = match &params["arguments"] {
                Value::Null => json!({}),
                a @ Value::Object(_) => a.clone(),
                _ => return rpc::error(id, rpc::INVALID_PARAMS, "arguments must be an object"),
            };
            // A tool's failure is the model's to read (isError), not a
            // protocol error.
            let reply = match tools.call(name, &args) {
                Ok(r) => r,
                Err(e @ (ToolError::BadArgs(_) | ToolError::NotInSession { .. })) => {
                    tools::Reply::failed(e.step(), e.to_string())
                }
                Err(e) => tools::Reply::failed(e.step(), format!("husk failed: {e}")),
            };
            rpc::result(
                id,
                json!({
                    "content": [{"type": "text", "text": reply.text}],
                    "structuredContent": reply.structured,
                    "isError": reply.is_error,
                }),
            )
        }
        _ => rpc::error(id, rpc::METHOD_NOT_FOUND, &format!("method {method:?} not found")),
    }
}
