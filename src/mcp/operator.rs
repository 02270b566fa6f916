//! The operator's limits and network for every sandbox `husk mcp` makes
//! (`husk mcp --memory --cpus --pids --network`).
//!
//! Held as the library's typed request (`request::SandboxOptions`) and
//! checked once, at start, by the very code every door's create uses
//! (`request::lower::limits` and `network`, then `Limits::resolve`), so a
//! value the CLI refuses keeps the server from starting instead of failing
//! every tool call later; every sandbox the server makes starts from these
//! options, so what was checked is what runs.
//!
//! A tool call may LOWER memory, cpus or pids (an agent that wants a small
//! sandbox for untrusted code) but never raise them: a value above the
//! operator's ceiling (husk's default when the operator gave none) is
//! refused, not clamped, so the model is never told it got what it did not.
//! The network is the operator's alone.

use super::args::{ToolError, str_arg};
use crate::cgroup::limits::{self, HostSize, LimitValueError, Limits};
use crate::request::SandboxOptions;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error(transparent)]
    Args(#[from] crate::request::ArgsError),
    #[error(transparent)]
    Limit(#[from] crate::cgroup::CgroupError),
}

/// One limit a call may lower, and the ceiling the operator's value sets.
struct Limit {
    key: &'static str,
    /// The most a call may ask for; None: no ceiling (unlimited).
    cap: Option<u64>,
    parse: fn(&str) -> Result<u64, LimitValueError>,
}

pub struct Operator {
    limits: [Limit; 3],
    /// What every sandbox starts from: root, the operator's limits and network.
    base: SandboxOptions,
    /// Cgroups are off (HUSK_NO_CGROUP): no limit can be set at all.
    no_cgroup: bool,
}

impl Operator {
    /// Validates the operator's options as `husk run` would.
    pub fn new(base: SandboxOptions) -> Result<Operator, OperatorError> {
        let spec = crate::request::lower::limits(&base)?;
        crate::request::lower::network(&base)?;
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
                Limit { key: "memory", cap: mem_cap, parse: limits::parse_memory },
                Limit { key: "cpus", cap: cpu_cap, parse: limits::parse_cpus },
                Limit { key: "pids", cap: pid_cap, parse: limits::parse_pids },
            ],
            base,
            no_cgroup,
        })
    }

    /// The keys a call may use to lower a limit.
    pub const KEYS: [&'static str; 3] = ["memory", "cpus", "pids"];

    /// Whether the call asks for any limit.
    pub fn asks(args: &Value) -> bool {
        Self::KEYS.iter().any(|k| args.get(*k).is_some_and(|v| !v.is_null()))
    }

    /// The options of one sandbox: the operator's, each limit replaced by
    /// a lower one the call asks for.
    pub fn options(&self, args: &Value) -> Result<SandboxOptions, ToolError> {
        let mut o = self.base.clone();
        for l in &self.limits {
            let Some(asked) = str_arg(args, l.key)? else { continue };
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
            let slot = match l.key {
                "memory" => &mut o.memory,
                "cpus" => &mut o.cpus,
                _ => &mut o.pids,
            };
            *slot = Some(asked.to_string());
        }
        Ok(o)
    }
}

fn show(key: &str, v: u64) -> String {
    match key {
        "memory" => crate::units::format_size(v),
        "cpus" => format!("{}", v as f64 / 1000.0),
        _ => v.to_string(),
    }
}
