//! The tools: their schemas (tools/list) and what each call does, by
//! running husk's own subcommands (runner.rs).

pub use super::args::ToolError;
use super::args::{os, required, str_arg};
use super::operator::Operator;
use super::output;
use super::runner::Runner;
use super::summary;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// What the operator chose for every sandbox (`husk mcp`'s flags).
pub struct Config {
    pub image: Option<String>,
    pub rootfs: Option<PathBuf>,
    /// Limits and network of every sandbox (operator.rs).
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
    ])
}

/// The server's state: its config, how it runs husk, and the sandboxes it
/// made (the only ones its tools act on).
pub struct Tools {
    pub config: Config,
    pub runner: Runner,
    pub sandboxes: BTreeSet<String>,
}

impl Tools {
    pub fn call(&mut self, name: &str, args: &Value) -> Result<Reply, ToolError> {
        match name {
            "run_code" => self.run_code(args),
            "create_sandbox" => self.create(args),
            "exec" => self.exec(args),
            "write_file" => self.write_file(args),
            "read_file" => self.read_file(args),
            "list_files" => self.list_files(args),
            "destroy_sandbox" => self.destroy(args),
            "pause_sandbox" => self.pause(args, "pause"),
            "resume_sandbox" => self.pause(args, "resume"),
            _ => Err(ToolError::BadArgs(format!("no tool {name:?}"))),
        }
    }

    fn timeout(&self, args: &Value) -> Result<String, ToolError> {
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
        Ok(format!("{}ms", t.as_millis()))
    }

    /// Root, limits and network of a new sandbox: the operator's, limits
    /// lowered where the call asks (operator.rs).
    fn root_args(&self, args: &Value, out: &mut Vec<OsString>) -> Result<(), ToolError> {
        if let Some(i) = &self.config.image {
            out.extend([OsString::from("--image"), i.into()]);
        }
        if let Some(r) = &self.config.rootfs {
            out.extend([OsString::from("--rootfs"), r.into()]);
        }
        out.extend(self.config.operator.flags(args)?);
        Ok(())
    }

    pub(super) fn sandbox<'a>(&self, args: &'a Value) -> Result<&'a str, ToolError> {
        let id = required(args, "sandbox_id")?;
        if !self.sandboxes.contains(id) {
            let known: Vec<&str> = self.sandboxes.iter().map(String::as_str).collect();
            return Err(ToolError::BadArgs(format!(
                "no sandbox {id:?} of this session (live: {}); create one with create_sandbox",
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            )));
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

    fn exec_in(
        &mut self,
        id: &str,
        timeout: &str,
        limit: u64,
        argv: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<Value, ToolError> {
        let mut a = os(&["exec", "--json", "--timeout", timeout, "--output-limit"]);
        a.push(limit.to_string().into());
        a.extend(os(&[id, "--"]));
        a.extend(os(argv));
        Ok(self.runner.run(&a, stdin)?.json("exec")?)
    }

    fn run_code(&mut self, args: &Value) -> Result<Reply, ToolError> {
        let code = required(args, "code")?;
        if args.get("sandbox_id").is_some_and(|v| !v.is_null()) {
            return self.run_code_in(args, code);
        }
        let argv: &[&str] = match str_arg(args, "language")?.unwrap_or("python") {
            "python" => &["python3", "-"],
            "bash" => &["bash", "-s"],
            "sh" => &["sh", "-s"],
            other => return Err(ToolError::BadArgs(format!("language {other:?}: use python, bash or sh"))),
        };
        let timeout = self.timeout(args)?;
        let mut a = os(&["run", "--json", "--timeout", &timeout, "--output-limit"]);
        a.push(self.config.output_limit.to_string().into());
        self.root_args(args, &mut a)?;
        a.push("--".into());
        a.extend(os(argv));
        // Code on stdin: argv is bounded and shown by ps.
        let verdict = self.runner.run(&a, Some(code.as_bytes()))?.json("run")?;
        Ok(self.verdict_reply(verdict, None))
    }

    /// run_code with a sandbox_id: `husk exec --code -`, which hands the
    /// code to the sandbox's warm interpreter or session, or runs it in a
    /// fresh interpreter there (docs/warm.md).
    fn run_code_in(&mut self, args: &Value, code: &str) -> Result<Reply, ToolError> {
        let id = self.sandbox(args)?.to_string();
        if Operator::asks(args) {
            return Err(ToolError::BadArgs(
                "memory, cpus and pids go with a new sandbox; one from create_sandbox keeps its own".into(),
            ));
        }
        let timeout = self.timeout(args)?;
        let mut a = os(&["exec", "--json", "--code=-", "--timeout", &timeout, "--output-limit"]);
        a.push(self.config.output_limit.to_string().into());
        match str_arg(args, "language")? {
            None => {}
            Some(l @ ("python" | "bash" | "sh")) => a.push(format!("--language={l}").into()),
            Some(other) => return Err(ToolError::BadArgs(format!("language {other:?}: use python, bash or sh"))),
        }
        a.push(id.clone().into());
        let verdict = self.runner.run(&a, Some(code.as_bytes()))?.json("exec")?;
        Ok(self.verdict_reply(verdict, Some(&id)))
    }

    fn create(&mut self, args: &Value) -> Result<Reply, ToolError> {
        if self.sandboxes.len() >= self.config.max_sandboxes {
            return Ok(Reply::err(format!(
                "this server keeps at most {} sandboxes alive; destroy one first (live: {})",
                self.config.max_sandboxes,
                self.sandboxes.iter().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        let mut a = os(&["create", "--json", "--ttl"]);
        a.push(format!("{}ms", self.config.ttl.as_millis()).into());
        match str_arg(args, "pool")? {
            // The pool's spec is the sandbox's (husk create --pool asks the
            // husk serve of this state dir).
            Some(pool) => {
                if !self.config.pools.iter().any(|p| p == pool) {
                    let offered =
                        if self.config.pools.is_empty() { "none".into() } else { self.config.pools.join(", ") };
                    return Err(ToolError::BadArgs(format!(
                        "pool {pool:?} is not offered by this server (offered: {offered}; the operator lists them with husk mcp --pool)"
                    )));
                }
                if Operator::asks(args) {
                    return Err(ToolError::BadArgs(
                        "memory, cpus and pids do not go with pool: a pooled sandbox has its pool's limits".into(),
                    ));
                }
                a.extend([OsString::from("--pool"), pool.into()]);
            }
            None => self.root_args(args, &mut a)?,
        }
        for key in ["warm", "session"] {
            if let Some(v) = str_arg(args, key)? {
                if args.get("pool").is_some_and(|p| !p.is_null()) {
                    return Err(ToolError::BadArgs(format!(
                        "{key} does not go with pool: a pooled sandbox has its pool's spec (a pool may be warm)"
                    )));
                }
                a.push(format!("--{key}={v}").into());
            }
        }
        let ran = self.runner.run(&a, None)?;
        let stderr = ran.stderr.clone();
        let rec = ran.json("create")?;
        let Some(id) = rec["id"].as_str().filter(|id| !id.is_empty()) else {
            let msg = rec["error"]["message"].as_str().or(rec["error"].as_str()).unwrap_or(&stderr);
            return Ok(Reply::err(format!("husk could not create a sandbox: {msg}")));
        };
        self.sandboxes.insert(id.to_string());
        let workdir = rec["workdir"].as_str().unwrap_or("/");
        Ok(Reply::ok(
            format!(
                "sandbox_id: {id}\nworking directory: {workdir}\nlease: {}s, renewed by every exec",
                self.config.ttl.as_secs()
            ),
            json!({"sandbox_id": id, "workdir": workdir}),
        ))
    }

    fn exec(&mut self, args: &Value) -> Result<Reply, ToolError> {
        let id = self.sandbox(args)?.to_string();
        let command = required(args, "command")?;
        let stdin = str_arg(args, "stdin")?.map(str::as_bytes);
        let timeout = self.timeout(args)?;
        let v = self.exec_in(&id, &timeout, self.config.output_limit, &["sh", "-c", command], stdin)?;
        Ok(self.verdict_reply(v, Some(&id)))
    }

    fn destroy(&mut self, args: &Value) -> Result<Reply, ToolError> {
        let id = self.sandbox(args)?.to_string();
        let ran = self.runner.run(&os(&["rm", &id]), None)?;
        self.sandboxes.remove(&id);
        if ran.code != Some(0) {
            return Ok(Reply::err(format!("destroying {id}: {}", ran.stderr)));
        }
        Ok(Reply::ok(format!("sandbox {id} destroyed"), json!({"sandbox_id": id, "destroyed": true})))
    }

    /// `husk pause|resume ID` (`verb`).
    fn pause(&mut self, args: &Value, verb: &str) -> Result<Reply, ToolError> {
        let id = self.sandbox(args)?.to_string();
        let ran = self.runner.run(&os(&[verb, &id]), None)?;
        if ran.code != Some(0) {
            return Ok(Reply::err(format!("{verb} of {id}: {}", ran.stderr.trim())));
        }
        let paused = verb == "pause";
        let text = if paused {
            format!(
                "sandbox {id} paused: processes and memory kept, no CPU; exec calls are refused until resume_sandbox"
            )
        } else {
            format!("sandbox {id} resumed")
        };
        Ok(Reply::ok(text, json!({"sandbox_id": id, "paused": paused})))
    }

    /// Removes every sandbox this session made (the client went away).
    pub fn destroy_all(&mut self) {
        if self.sandboxes.is_empty() {
            return;
        }
        let mut a = os(&["rm"]);
        a.extend(self.sandboxes.iter().map(OsString::from));
        if let Err(e) = self.runner.run(&a, None) {
            crate::errln!("husk mcp: removing the session's sandboxes: {e}");
        }
        self.sandboxes.clear();
    }
}
