//! The tools that make sandboxes: run_code without a sandbox_id (one
//! command in a fresh sandbox, `husk run`'s pipeline) and create_sandbox
//! (`sandbox::create`, or a claim from a pool of the husk serve of this
//! state dir). Both start from the operator's typed options (operator.rs),
//! limits lowered where the call asks.
//!
//! Both fork from this process: the run's sandbox, and the created
//! sandbox's supervisor. That is safe here: the server is one thread
//! (`SingleThreaded` holds), and between calls the only fds it has open
//! are its stdio, which the supervisor puts on /dev/null (it would
//! otherwise keep the client's pipes open) and the run's command gets as
//! lend.rs lends them.

use super::args::{ToolError, required, str_arg};
use super::lend::Lent;
use super::operator::Operator;
use super::tools::{Reply, Tools};
use crate::outcome::{Outcome, Verdict};
use crate::request::{CreateOptions, ProcessOptions};
use crate::step::Phase;
use serde_json::{Value, json};
use std::time::Duration;

/// A pool claim never waits for a refill; this bounds a serve that hangs.
const CLAIM_PATIENCE: Duration = Duration::from_secs(120);

impl Tools {
    /// run_code without a sandbox_id: the code on the stdin of
    /// `python3 -` / `bash -s` / `sh -s` (argv is bounded and shown by
    /// ps) in a fresh sandbox, as `husk run --json` runs it: the same two
    /// library calls as cmd/run.rs (`sandbox::prepare`, `Backend::run`).
    pub(super) fn run_once(&mut self, args: &Value) -> Result<Reply, ToolError> {
        let code = required(args, "code")?;
        let argv: &[&str] = match str_arg(args, "language")?.unwrap_or("python") {
            "python" => &["python3", "-"],
            "bash" => &["bash", "-s"],
            "sh" => &["sh", "-s"],
            other => return Err(ToolError::BadArgs(format!("language {other:?}: use python, bash or sh"))),
        };
        let sandbox = self.config.operator.options(args)?;
        let process = ProcessOptions {
            timeout: Some(self.timeout(args)?),
            capture: Some(self.config.output_limit),
            ..ProcessOptions::default()
        };
        let t_start = crate::spawn::now_ns();
        let command = argv.iter().map(|a| a.to_string()).collect();
        // This call's own: a run names no secrets, but no other call's
        // reach its output either.
        let redact = process.redaction();
        let verdict = match crate::request::lower::run_spec(command, &sandbox, &process, &redact) {
            Err(e) => failed(e.into(), "none")?,
            Ok(spec) => {
                let _lent = Lent::stdin(Some(code.as_bytes()))?;
                self.run_spec(spec, t_start, &redact)?
            }
        };
        Ok(self.verdict_reply(verdict, None))
    }

    fn run_spec(
        &self,
        spec: crate::spec::Spec,
        t_start: u64,
        redact: &crate::redact::Redaction,
    ) -> Result<Value, ToolError> {
        use crate::sandbox::prepare::{Prepared, host_for, prepare};
        let capture = match spec.output {
            crate::spec::OutputSpec::Capture { limit } => Some(limit),
            crate::spec::OutputSpec::Passthrough => None,
        };
        let host = host_for(&self.paths);
        let state = || crate::backend::runsc::config::state_dir(self.state_dir.as_deref());
        let Prepared { backend, note, plan, lease: _lease, .. } =
            match prepare(spec, &host, &self.paths, state, crate::plan::InitRole::Run) {
                Ok(p) => p,
                Err(e) => return failed(e.report, e.runtime),
            };
        let id = plan.id.clone();
        let mut isolation = backend.isolation(&plan);
        isolation.runtime_choice = note;
        let outcome = backend.run(plan, crate::backend::RunIo { capture, tap: None, redact, t_start });
        serde_json::to_value(Verdict::new(&id, backend.name(), &outcome, Some(&isolation), true, redact))
            .map_err(ToolError::Verdict)
    }

    pub(super) fn create(&mut self, args: &Value) -> Result<Reply, ToolError> {
        if self.sandboxes.len() >= self.config.max_sandboxes {
            return Ok(Reply::err(format!(
                "this server keeps at most {} sandboxes alive; destroy one first (live: {})",
                self.config.max_sandboxes,
                self.sandboxes.iter().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        let (warm, session) = (str_arg(args, "warm")?, str_arg(args, "session")?);
        let made = match str_arg(args, "pool")? {
            Some(pool) => {
                if let Some(key) = [("warm", warm), ("session", session)].iter().find(|(_, v)| v.is_some()) {
                    return Err(ToolError::BadArgs(format!(
                        "{} does not go with pool: a pooled sandbox has its pool's spec (a pool may be warm)",
                        key.0
                    )));
                }
                self.claim(pool, args)?
            }
            None => {
                let o = CreateOptions {
                    sandbox: self.config.operator.options(args)?,
                    ttl: self.config.ttl,
                    warm: warm.map(str::to_string),
                    session: session.map(str::to_string),
                    ..CreateOptions::default()
                };
                // Not lent: create reads no fd 0 (no ready_cmd here), and a
                // lent fd would be one more the supervisor inherits (the
                // client's stream, kept aside).
                match crate::sandbox::lifecycle::create(&o, &self.paths) {
                    Ok(c) => {
                        let made = (c.record.id.clone(), c.record.workdir.clone());
                        // Handed over: the session holds the id (below) and
                        // removes it when the client goes.
                        c.confirm();
                        Ok(made)
                    }
                    Err(e) => Err(not_made(e.report().step, e.report().message)),
                }
            }
        };
        let (id, workdir) = match made {
            Ok(m) => m,
            Err(reply) => return Ok(reply),
        };
        self.sandboxes.insert(id.clone());
        Ok(Reply::ok(
            format!(
                "sandbox_id: {id}\nworking directory: {workdir}\nlease: {}s, renewed by every exec",
                self.config.ttl.as_secs()
            ),
            json!({"sandbox_id": id, "workdir": workdir}),
        ))
    }

    /// A READY sandbox claimed from a pool of the husk serve of this state
    /// dir (its socket: HUSK_SERVER, else the state dir's api.sock, as
    /// `husk create --pool` finds it): (id, workdir), or the reply saying
    /// why not.
    fn claim(&self, pool: &str, args: &Value) -> Result<Result<(String, String), Reply>, ToolError> {
        if !self.config.pools.iter().any(|p| p == pool) {
            let offered = if self.config.pools.is_empty() { "none".into() } else { self.config.pools.join(", ") };
            return Err(ToolError::BadArgs(format!(
                "pool {pool:?} is not offered by this server (offered: {offered}; the operator lists them with husk mcp --pool)"
            )));
        }
        if Operator::asks(args) {
            return Err(ToolError::BadArgs(
                "memory, cpus and pids do not go with pool: a pooled sandbox has its pool's limits".into(),
            ));
        }
        let socket = match std::env::var_os("HUSK_SERVER") {
            Some(s) => match s.to_str().and_then(|s| s.strip_prefix("unix:")) {
                Some(p) if !p.is_empty() => std::path::PathBuf::from(p),
                _ => {
                    return Ok(Err(not_made(
                        Phase::Pool,
                        format!("HUSK_SERVER={s:?}: give unix:PATH, the socket husk serve listens on"),
                    )));
                }
            },
            None => match &self.paths {
                Ok(p) => p.state.join("api.sock"),
                Err(e) => return Ok(Err(not_made(Phase::State, e))),
            },
        };
        let body = json!({"pool": pool, "ttl": format!("{}ms", self.config.ttl.as_millis())}).to_string();
        let (status, resp) =
            match crate::serve::client::request(&socket, "POST", "/v1/sandboxes", body.as_bytes(), CLAIM_PATIENCE) {
                Ok(r) => r,
                Err(e) => return Ok(Err(not_made(Phase::Pool, e))),
            };
        let v: Value = serde_json::from_slice(&resp).unwrap_or(Value::Null);
        match v["id"].as_str() {
            Some(id) if status == 201 => Ok(Ok((id.to_string(), v["workdir"].as_str().unwrap_or("/").to_string()))),
            _ => Ok(Err(not_made(
                v["error"]["step"].as_str().and_then(Phase::from_name).unwrap_or(Phase::Pool),
                v["error"]["message"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("husk serve answered {status}")),
            ))),
        }
    }
}

fn not_made(step: Phase, why: impl std::fmt::Display) -> Reply {
    Reply::failed(step, format!("husk could not create a sandbox: {why}"))
}

/// A run that failed before its sandbox started, as its verdict.
fn failed(e: crate::outcome::ErrorReport, backend: &str) -> Result<Value, ToolError> {
    let none = crate::redact::Redaction::none();
    serde_json::to_value(Verdict::new("", backend, &Outcome::setup_failed(e), None, true, &none))
        .map_err(ToolError::Verdict)
}
