//! The tools: their schemas (tools/list), the server's state and the
//! dispatch of a call (what each does: make.rs, calls.rs, files.rs).

pub use super::args::ToolError;
use super::args::{required, str_arg};
use super::operator::Operator;
use super::output;
use super::summary;
use crate::paths::{Paths, PathsError};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

/// What the operator chose for every sandbox (`husk mcp`'s flags).
pub struct Config {
    /// Root, limits and network of every sandbox (operator.rs).
    pub operator: Operator,
    pub timeout: Duration,
    pub max_timeout: Duration,
    pub ttl: Duration,
    pub output_limit: u64,
    pub max_sandboxes: usize,
    /// Pools create_sandbox may claim from (`husk mcp --pool`).
    pub pools: Vec<String>,
}

/// A tool call's outcome as MCP returns it: text for the model, the same
/// facts as JSON, and whether the tool failed.
pub struct Reply {
    pub text: String,
    pub structured: Value,
    pub is_error: bool,
}

impl Reply {
    pub(super) fn ok(text: String, structured: Value) -> Reply {
        Reply { text, structured, is_error: false }
    }
    pub(super) fn err(text: String) -> Reply {
        Reply { structured: json!({"error": text}), text, is_error: true }
    }
    /// A failure of the library: its step beside the text.
    pub(super) fn failed(step: crate::step::Phase, text: String) -> Reply {
        Reply { structured: json!({"error": text, "step": step.name()}), text, is_error: true }
    }
}

pub fn list() -> Value {
    let id = json!({"type": "string", "description": "The id create_sandbox returned"});
    let timeout = json!({"type": "string", "description": "Wall-clock limit, e.g. 30s, 2m (default: the server's)"});
    let memory = json!({"type": "string", "description": "Memory limit of the new sandbox, e.g. 256M; only lower than the server's (default: the server's)"});
    let cpus = json!({"type": "string", "description": "CPU limit of the new sandbox, e.g. 0.5; only lower than the server's"});
    let pids = json!({"type": "string", "description": "Task limit of the new sandbox, e.g. 64; only lower than the server's"});
    let ran = output::ran();
    json!([
        {
            "name": "run_code",
            "description": "Run code. Without sandbox_id: once in a fresh, isolated sandbox (no network unless the operator allows some) that is removed afterwards. With sandbox_id: in that sandbox, by its warm interpreter (a fresh process per call, modules preloaded) or its session (state kept between calls) when create_sandbox made one, else by a fresh interpreter. Returns how it ended and its output.",
            "inputSchema": {"type": "object", "properties": {
                "code": {"type": "string", "description": "The source code"},
                "language": {"type": "string", "enum": ["python", "bash", "sh"], "description": "Default: python, or the sandbox's warm interpreter's or session's language"},
                "sandbox_id": {"type": "string", "description": "Run in this sandbox from create_sandbox (optional)"},
                "timeout": timeout,
                "memory": memory, "cpus": cpus, "pids": pids,
            }, "required": ["code"]},
            "outputSchema": ran,
        },
        {
            "name": "create_sandbox",
            "description": "Create a sandbox that lives across calls (files persist between exec calls). Returns its sandbox_id. Destroy it with destroy_sandbox when done.",
            "inputSchema": {"type": "object", "properties": {
                "pool": {"type": "string", "description": "Claim a ready sandbox from this pool of husk serve instead of making one (faster; its spec is the pool's)"},
                "warm": {"type": "string", "description": "python or python:MOD1,MOD2: a warm interpreter with MODULES imported; each run_code with this sandbox_id gets a fresh process of it (clean state, imports already done)"},
                "session": {"type": "string", "enum": ["python", "bash"], "description": "One interpreter whose state (variables and imports; cwd and exports) carries from one run_code with this sandbox_id to the next"},
                "memory": memory, "cpus": cpus, "pids": pids,
            }},
            "outputSchema": output::created(),
        },
        {
            "name": "exec",
            "description": "Run a shell command (sh -c) in a sandbox from create_sandbox. Returns how it ended and its output.",
            "inputSchema": {"type": "object", "properties": {
                "sandbox_id": id,
                "command": {"type": "string", "description": "Shell command line"},
                "stdin": {"type": "string", "description": "Text given to the command on stdin"},
                "timeout": timeout,
            }, "required": ["sandbox_id", "command"]},
            "outputSchema": ran,
        },
        {
            "name": "write_file",
            "description": "Write a file in a sandbox (absolute path, or relative to its working directory).",
            "inputSchema": {"type": "object", "properties": {
                "sandbox_id": id,
                "path": {"type": "string"},
                "content": {"type": "string"},
                "encoding": {"type": "string", "enum": ["utf-8", "base64"], "default": "utf-8"},
                "mode": {"type": "string", "description": "Octal permissions, e.g. 755"},
            }, "required": ["sandbox_id", "path", "content"]},
            "outputSchema": output::written(),
        },
        {
            "name": "read_file",
            "description": "Read a file from a sandbox.",
            "inputSchema": {"type": "object", "properties": {
                "sandbox_id": id, "path": {"type": "string"},
            }, "required": ["sandbox_id", "path"]},
            "outputSchema": output::read(),
        },
        {
            "name": "list_files",
            "description": "List a directory in a sandbox: type, permissions, size, name.",
            "inputSchema": {"type": "object", "properties": {
                "sandbox_id": id, "path": {"type": "string", "default": "."},
            }, "required": ["sandbox_id"]},
            "outputSchema": output::listed(),
        },
        {
            "name": "pause_sandbox",
            "description": "Pause a sandbox: its processes and memory are kept and it uses no CPU until resume_sandbox; exec and file calls are refused meanwhile.",
            "inputSchema": {"type": "object", "properties": {"sandbox_id": id}, "required": ["sandbox_id"]},
            "outputSchema": output::paused(),
        },
        {
            "name": "resume_sandbox",
            "description": "Resume a paused sandbox: everything goes on where it was.",
            "inputSchema": {"type": "object", "properties": {"sandbox_id": id}, "required": ["sandbox_id"]},
            "outputSchema": output::paused(),
        },
        {
            "name": "destroy_sandbox",
            "description": "Destroy a sandbox and everything in it.",
            "inputSchema": {"type": "object", "properties": {"sandbox_id": id}, "required": ["sandbox_id"]},
            "outputSchema": output::destroyed(),
        },
        {
            "name": "fork_sandbox",
            "description": "Start new sandboxes from a sandbox's current files (not its processes): each fork has the source's limits, network, user, env and working directory, and its own copy of the files. Returns their sandbox_ids; destroy each with destroy_sandbox when done.",
            "inputSchema": {"type": "object", "properties": {
                "sandbox_id": id,
                "count": {"type": "integer", "minimum": 1, "default": 1, "description": "How many forks (within the server's sandbox limit)"},
            }, "required": ["sandbox_id"]},
            "outputSchema": output::forked(),
        },
        {
            "name": "commit_sandbox",
            "description": "Store a sandbox's current files as an image named mcp/NAME[:TAG] (the sandbox keeps running).",
            "inputSchema": {"type": "object", "properties": {
                "sandbox_id": id,
                "tag": {"type": "string", "description": "NAME[:TAG] of the image, stored as mcp/NAME[:TAG]"},
            }, "required": ["sandbox_id", "tag"]},
            "outputSchema": output::committed(),
        },
        {
            "name": "list_sandboxes",
            "description": "List the sandboxes this session made that still live: id, state, lease left, exec count.",
            "inputSchema": {"type": "object", "properties": {}},
            "outputSchema": output::sandboxes(),
        },
        {
            "name": "inspect_sandbox",
            "description": "A sandbox's record: its state, limits, root, workdir, lease (environment values hidden).",
            "inputSchema": {"type": "object", "properties": {"sandbox_id": id}, "required": ["sandbox_id"]},
            "outputSchema": output::inspected(),
        },
        {
            "name": "renew_sandbox",
            "description": "Restart a sandbox's lease from now (every exec renews it too), optionally with a new length.",
            "inputSchema": {"type": "object", "properties": {
                "sandbox_id": id,
                "ttl": {"type": "string", "description": "The lease's new length, e.g. 10m (at most the server's --max-timeout x 10; default: the sandbox's own)"},
            }, "required": ["sandbox_id"]},
            "outputSchema": output::renewed(),
        },
    ])
}

/// The server's state: its config, where its sandboxes live, and the
/// sandboxes it made (the only ones its tools act on).
pub struct Tools {
    pub config: Config,
    /// `--root` / `--state-dir` as `husk mcp` was given them, resolved.
    pub paths: Result<Paths, PathsError>,
    /// `--state-dir` as given (runsc's state: `backend::runsc::config`).
    pub state_dir: Option<PathBuf>,
    pub sandboxes: BTreeSet<String>,
}

impl Tools {
    pub fn call(&mut self, name: &str, args: &Value) -> Result<Reply, ToolError> {
        match name {
            "run_code" => match args.get("sandbox_id").filter(|v| !v.is_null()) {
                Some(_) => self.run_code_in(args),
                None => self.run_once(args),
            },
            "create_sandbox" => self.create(args),
            "exec" => self.exec(args),
            "write_file" => self.write_file(args),
            "read_file" => self.read_file(args),
            "list_files" => self.list_files(args),
            "destroy_sandbox" => self.destroy(args),
            "pause_sandbox" => self.pause(args, true),
            "resume_sandbox" => self.pause(args, false),
            "fork_sandbox" => self.fork_sandbox(args),
            "commit_sandbox" => self.commit_sandbox(args),
            "list_sandboxes" => self.list_sandboxes(),
            "inspect_sandbox" => self.inspect_sandbox(args),
            "renew_sandbox" => self.renew_sandbox(args),
            _ => Err(ToolError::BadArgs(format!("no tool {name:?}"))),
        }
    }

    pub(super) fn timeout(&self, args: &Value) -> Result<Duration, ToolError> {
        let t = match str_arg(args, "timeout")? {
            None => self.config.timeout,
            Some(s) => crate::units::parse_duration(s).map_err(|e| ToolError::BadArgs(format!("timeout: {e}")))?,
        };
        if t.is_zero() || t > self.config.max_timeout {
            return Err(ToolError::BadArgs(format!(
                "timeout must be more than 0 and at most {}s",
                self.config.max_timeout.as_secs()
            )));
        }
        Ok(t)
    }

    pub(super) fn sandbox<'a>(&self, args: &'a Value) -> Result<&'a str, ToolError> {
        let id = required(args, "sandbox_id")?;
        if !self.sandboxes.contains(id) {
            return Err(ToolError::NotInSession { id: id.to_string(), live: self.sandboxes.iter().cloned().collect() });
        }
        Ok(id)
    }

    /// A verdict as the tool's reply; a sandbox husk reports gone is
    /// forgotten (its lease ran out, say).
    pub(super) fn verdict_reply(&mut self, verdict: Value, sandbox: Option<&str>) -> Reply {
        let failed = verdict["termination"] == "setup_failed";
        if failed
            && let Some(id) = sandbox
            && verdict["error"]["step"] == "sandbox"
        {
            self.sandboxes.remove(id);
        }
        let structured = json!({
            "termination": verdict["termination"],
            "exit_code": verdict["exit_code"],
            "stdout_truncated": verdict["stdout"]["truncated"],
            "stderr_truncated": verdict["stderr"]["truncated"],
            "stdout_bytes": verdict["stdout"]["bytes"],
            "stderr_bytes": verdict["stderr"]["bytes"],
            "duration_ms": verdict["duration_ms"],
            "warm": verdict["warm"],
            "results": verdict["results"],
            "exception": verdict["exception"],
        });
        Reply { text: summary::summarize(&verdict), structured, is_error: failed }
    }
}
