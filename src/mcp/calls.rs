//! The tools that act on a sandbox of the session (exec, run_code with a
//! sandbox_id, pause, resume, destroy): one call of the sandbox library
//! each (`sandbox::exec`, `sandbox::pause`, `sandbox::lifecycle`), in this
//! process, answered as `husk exec --json` / `husk rm` answer.
//!
//! In-process is safe here because the server is one thread and runs one
//! call at a time (mod.rs): the exec's join and the command are forked
//! from it (`SingleThreaded` holds), and only fd 0 is shared with the
//! command, which lend.rs swaps for the call's own input.

use super::args::{ToolError, required, str_arg};
use super::lend::Lent;
use super::operator::Operator;
use super::tools::{Reply, Tools};
use crate::outcome::{Outcome, Verdict};
use crate::sandbox::SandboxError;
use crate::sandbox::exec::{ExecRequest, ExecResult};
use crate::sandbox::state::Store;
use crate::spec::ExecSpec;
use serde_json::{Value, json};

/// What an exec runs: a command with its stdin, or code for the sandbox's
/// interpreter.
enum Run<'a> {
    Command { argv: Vec<String>, stdin: Option<&'a [u8]> },
    Code { code: &'a [u8], language: Option<&'a str> },
}

impl Tools {
    pub(super) fn store(&self) -> Result<Store, SandboxError> {
        crate::sandbox::lifecycle::store_of(&self.paths)
    }

    /// One exec in sandbox `id`: its verdict as `husk exec --json` prints
    /// it (a failure to start is a verdict too, `setup_failed`).
    fn exec_verdict(&mut self, id: &str, args: &Value, run: Run) -> Result<Value, ToolError> {
        let t_start = crate::spawn::now_ns();
        let exec = ExecSpec {
            timeout: Some(self.timeout(args)?),
            capture: Some(self.config.output_limit),
            ..ExecSpec::default()
        };
        // This call's own redaction: the sandbox's secrets join it.
        let redact = crate::redact::Redaction::none();
        let mut req = ExecRequest { target: id.to_string(), wait: false, exec, ready_check: false, redact };
        let result = match run {
            Run::Command { argv, stdin } => {
                req.exec.argv = argv;
                let _lent = Lent::stdin(stdin)?;
                self.store().and_then(|s| crate::sandbox::exec::exec_to(&s, &req, t_start, None))
            }
            Run::Code { code, language } => {
                // A cold sandbox's interpreter reads the code from fd 0
                // (exec_code puts it there); the guard gives fd 0 back.
                let _lent = Lent::stdin(None)?;
                self.store().and_then(|s| crate::sandbox::exec::exec_code(&s, &req, code, language, t_start, None))
            }
        };
        verdict_value(&result, &req.redact)
    }

    pub(super) fn exec(&mut self, args: &Value) -> Result<Reply, ToolError> {
        let id = self.sandbox(args)?.to_string();
        let command = required(args, "command")?;
        let stdin = str_arg(args, "stdin")?.map(str::as_bytes);
        let argv = ["sh", "-c", command].map(String::from).to_vec();
        let v = self.exec_verdict(&id, args, Run::Command { argv, stdin })?;
        Ok(self.verdict_reply(v, Some(&id)))
    }

    /// run_code with a sandbox_id: the code goes to the sandbox's warm
    /// interpreter or session, or to a fresh interpreter there
    /// (`sandbox::exec::exec_code`, docs/warm.md).
    pub(super) fn run_code_in(&mut self, args: &Value) -> Result<Reply, ToolError> {
        let code = required(args, "code")?;
        let id = self.sandbox(args)?.to_string();
        if Operator::asks(args) {
            return Err(ToolError::BadArgs(
                "memory, cpus and pids go with a new sandbox; one from create_sandbox keeps its own".into(),
            ));
        }
        let language = match str_arg(args, "language")? {
            None => None,
            Some(l @ ("python" | "bash" | "sh")) => Some(l),
            Some(other) => return Err(ToolError::BadArgs(format!("language {other:?}: use python, bash or sh"))),
        };
        let v = self.exec_verdict(&id, args, Run::Code { code: code.as_bytes(), language })?;
        Ok(self.verdict_reply(v, Some(&id)))
    }

    pub(super) fn destroy(&mut self, args: &Value) -> Result<Reply, ToolError> {
        let id = self.sandbox(args)?.to_string();
        let done = self.destroy_one(&id);
        self.sandboxes.remove(&id);
        if let Err(e) = done {
            return Ok(Reply::failed(e.step(), format!("destroying {id}: {e}")));
        }
        Ok(Reply::ok(format!("sandbox {id} destroyed"), json!({"sandbox_id": id, "destroyed": true})))
    }

    /// `husk rm ID`: found as rm finds it, removed without --force.
    fn destroy_one(&self, id: &str) -> Result<(), SandboxError> {
        let store = self.store()?;
        let id = crate::sandbox::registry::resolve(&store, id)?;
        crate::sandbox::lifecycle::destroy(&store, &id, false)
    }

    /// pause_sandbox (`paused`) and resume_sandbox.
    pub(super) fn pause(&mut self, args: &Value, paused: bool) -> Result<Reply, ToolError> {
        let id = self.sandbox(args)?.to_string();
        let done = self.store().and_then(|s| match paused {
            true => crate::sandbox::pause::pause(&s, &id, false),
            false => crate::sandbox::pause::resume(&s, &id),
        });
        let verb = if paused { "pause" } else { "resume" };
        if let Err(e) = done {
            self.forget_if_gone(&id, &e);
            return Ok(Reply::failed(e.step(), format!("{verb} of {id}: {e}")));
        }
        let text = if paused {
            format!(
                "sandbox {id} paused: processes and memory kept, no CPU; exec calls are refused until resume_sandbox"
            )
        } else {
            format!("sandbox {id} resumed")
        };
        Ok(Reply::ok(text, json!({"sandbox_id": id, "paused": paused})))
    }

    /// list_sandboxes: this session's live sandboxes, as `husk ls --json`
    /// summarises them (a session sees only the sandboxes it made).
    pub(super) fn list_sandboxes(&mut self) -> Result<Reply, ToolError> {
        let store = match self.store() {
            Ok(s) => s,
            Err(e) => return Ok(Reply::failed(e.step(), format!("listing: {e}"))),
        };
        let recs: Vec<_> = crate::sandbox::lifecycle::list(&store, &[])
            .into_iter()
            .filter(|r| self.sandboxes.contains(&r.id))
            .collect();
        let text = match recs.len() {
            0 => "no sandboxes (create one with create_sandbox)".to_string(),
            _ => recs.iter().map(|r| format!("{} {}", r.id, r.state.name())).collect::<Vec<_>>().join("\n"),
        };
        let all: Vec<Value> = recs.iter().map(crate::sandbox::lifecycle::summary).collect();
        Ok(Reply::ok(text, json!({"sandboxes": all})))
    }

    /// inspect_sandbox: `husk inspect ID` (environment values hidden).
    pub(super) fn inspect_sandbox(&mut self, args: &Value) -> Result<Reply, ToolError> {
        let id = self.sandbox(args)?.to_string();
        match self.store().and_then(|s| crate::sandbox::lifecycle::inspect(&s, &id, false)) {
            Ok(rec) => {
                let text = serde_json::to_string_pretty(&rec).unwrap_or_default();
                Ok(Reply::ok(text, json!({"sandbox": rec})))
            }
            Err(e) => {
                self.forget_if_gone(&id, &e);
                Ok(Reply::failed(e.step(), format!("inspect of {id}: {e}")))
            }
        }
    }

    /// renew_sandbox: `husk renew ID [--ttl T]`, the ttl bounded by ten
    /// times the server's longest call.
    pub(super) fn renew_sandbox(&mut self, args: &Value) -> Result<Reply, ToolError> {
        let id = self.sandbox(args)?.to_string();
        let ttl = match super::args::str_arg(args, "ttl")? {
            None => None,
            Some(t) => {
                let d = crate::units::parse_duration(t).map_err(|e| ToolError::BadArgs(format!("ttl: {e}")))?;
                let most = self.config.max_timeout * 10;
                if d.is_zero() || d > most {
                    return Err(ToolError::BadArgs(format!("ttl must be more than 0 and at most {}s", most.as_secs())));
                }
                Some(d)
            }
        };
        match self.store().and_then(|s| crate::sandbox::lifecycle::renew(&s, &id, ttl)) {
            Ok(r) => Ok(Reply::ok(
                format!("sandbox {id}'s lease runs {} s from now", r.lease_remaining_ms / 1000),
                json!({"sandbox_id": r.id, "ttl_ms": r.ttl_ms, "expires_ms": r.expires_ms, "lease_remaining_ms": r.lease_remaining_ms}),
            )),
            Err(e) => {
                self.forget_if_gone(&id, &e);
                Ok(Reply::failed(e.step(), format!("renew of {id}: {e}")))
            }
        }
    }

    /// A sandbox husk says is gone (its lease ran out, say) is forgotten.
    pub(super) fn forget_if_gone(&mut self, id: &str, e: &SandboxError) {
        if matches!(e, SandboxError::Unknown { .. } | SandboxError::Ended { .. } | SandboxError::Gone { .. }) {
            self.sandboxes.remove(id);
        }
    }

    /// Removes every sandbox this session made (the client went away).
    pub fn destroy_all(&mut self) {
        for id in std::mem::take(&mut self.sandboxes) {
            if let Err(e) = self.destroy_one(&id) {
                crate::errln!("husk mcp: removing the session's sandbox {id}: {e}");
            }
        }
    }
}

/// An exec's result as its `--json` verdict (`cli::report` prints the
/// same `Verdict`).
fn verdict_value(r: &Result<ExecResult, SandboxError>, redact: &crate::redact::Redaction) -> Result<Value, ToolError> {
    let v = match r {
        Ok(r) => serde_json::to_value(r.verdict(true, redact)),
        Err(e) => {
            let o = Outcome::setup_failed(e.report());
            serde_json::to_value(Verdict::new("", "native", &o, None, true, redact))
        }
    };
    v.map_err(ToolError::Verdict)
}
