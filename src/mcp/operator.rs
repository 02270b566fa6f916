//! The operator's limits and network for every sandbox `husk mcp` makes
//! (`husk mcp --memory --cpus --pids --network`).
//!
//! Checked once, at start, by the very code `husk run`/`create` use: the
//! flags are parsed as `SandboxArgs` and go through `cli::spec::limit_spec`,
//! `cli::spec::network_args` and `Limits::resolve`, so a value the CLI
//! refuses keeps the server from starting instead of failing every tool
//! call later. The same flag strings are then passed to every `husk create`
//! / `husk run` the server spawns (runner.rs), so what was checked is what
//! runs. (Issue 30 will hand the validated Spec to a library call instead.)
//!
//! A tool call may LOWER memory, cpus or pids (an agent that wants a small
//! sandbox for untrusted code) but never raise them: a value above the
//! operator's ceiling (husk's default when the operator gave none) is
//! refused, not clamped, so the model is never told it got what it did not.
//! The network is the operator's alone.

use super::args::{ToolError, str_arg};
use crate::cgroup::limits::{self, HostSize, LimitValueError, Limits};
use crate::cli::SandboxArgs;
use clap::Parser;
use serde_json::Value;
use std::ffi::OsString;

/// `husk mcp`'s sandbox flags, as `husk run` would parse them.
#[derive(Parser, Debug)]
#[command(name = "husk mcp")]
struct AsRun {
    #[command(flatten)]
    sandbox: SandboxArgs,
}

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("{0}")]
    Parse(String),
    #[error(transparent)]
    Args(#[from] crate::cli::spec::ArgsError),
    #[error(transparent)]
    Limit(#[from] crate::cgroup::CgroupError),
}

/// One limit: the operator's flag value and the ceiling it sets.
struct Limit {
    key: &'static str,
    given: Option<String>,
    /// The most a call may ask for; None: no ceiling (unlimited).
    cap: Option<u64>,
    parse: fn(&str) -> Result<u64, LimitValueError>,
}

pub struct Operator {
    limits: [Limit; 3],
    network: Vec<String>,
    /// Cgroups are off (HUSK_NO_CGROUP): no limit can be set at all.
    no_cgroup: bool,
}

impl Operator {
    /// Validates the operator's flags as `husk run` would.
    pub fn new(
        memory: Option<String>,
        cpus: Option<String>,
        pids: Option<String>,
        network: Vec<String>,
    ) -> Result<Operator, OperatorError> {
        let mut argv: Vec<String> = vec!["husk mcp".into()];
        for (flag, v) in [("--memory", &memory), ("--cpus", &cpus), ("--pids", &pids)] {
            if let Some(v) = v {
                argv.push(format!("{flag}={v}"));
            }
        }
        argv.extend(network.iter().map(|n| format!("--network={n}")));
        // `--flag=value` so a value starting with '-' stays a value.
        let parsed = AsRun::try_parse_from(&argv).map_err(|e| OperatorError::Parse(e.to_string()))?;
        let spec = crate::cli::spec::limit_spec(&parsed.sandbox)?;
        crate::cli::spec::network_args(&parsed.sandbox)?;
        let no_cgroup = spec.no_cgroup;
        let (mut mem_cap, mut cpu_cap, mut pid_cap) = (None, None, None);
        if !no_cgroup {
            let l = Limits::resolve(&spec, HostSize::probe())?;
            mem_cap = l.memory;
            cpu_cap = l.cpu.map(|c| c.millicores);
            pid_cap = l.pids;
        }
        Ok(Operator {
            limits: [
                Limit { key: "memory", given: memory, cap: mem_cap, parse: limits::parse_memory },
                Limit { key: "cpus", given: cpus, cap: cpu_cap, parse: limits::parse_cpus },
                Limit { key: "pids", given: pids, cap: pid_cap, parse: limits::parse_pids },
            ],
            network,
            no_cgroup,
        })
    }

    /// The keys a call may use to lower a limit.
    pub const KEYS: [&'static str; 3] = ["memory", "cpus", "pids"];

    /// Whether the call asks for any limit.
    pub fn asks(args: &Value) -> bool {
        Self::KEYS.iter().any(|k| args.get(*k).is_some_and(|v| !v.is_null()))
    }

    /// The flags of one sandbox: the operator's limits, each replaced by a
    /// lower one the call asks for, and the operator's network.
    pub fn flags(&self, args: &Value) -> Result<Vec<OsString>, ToolError> {
        let mut out = Vec::new();
        for l in &self.limits {
            let value = match str_arg(args, l.key)? {
                Some(asked) => {
                    if self.no_cgroup {
                        return Err(ToolError::BadArgs(format!(
                            "{}: this server runs its sandboxes without cgroups (HUSK_NO_CGROUP), so no limit can be set",
                            l.key
                        )));
                    }
                    let v = (l.parse)(asked).map_err(|e| ToolError::BadArgs(format!("{}: {e}", l.key)))?;
                    if let Some(cap) = l.cap
                        && v > cap
                    {
                        return Err(ToolError::BadArgs(format!(
                            "{} {asked:?} is above this server's limit ({}); a call may only lower it (the operator sets it with husk mcp --{})",
                            l.key,
                            show(l.key, cap),
                            l.key
                        )));
                    }
                    asked.to_string()
                }
                None => match &l.given {
                    Some(g) => g.clone(),
                    None => continue,
                },
            };
            out.push(format!("--{}={value}", l.key).into());
        }
        out.extend(self.network.iter().map(|n| OsString::from(format!("--network={n}"))));
        Ok(out)
    }
}

fn show(key: &str, v: u64) -> String {
    match key {
        "memory" => crate::units::format_size(v),
        "cpus" => format!("{}", v as f64 / 1000.0),
        _ => v.to_string(),
    }
}
