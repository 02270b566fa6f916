//! The limits a run asks for, resolved against husk's defaults at plan
//! time (pure: no host access), and the parsers for their CLI values.

use super::CgroupError;
use super::probe::Controller;
use crate::spec::LimitSpec;
use serde::{Deserialize, Serialize};

/// `LimitSpec` value meaning "explicitly unlimited" (`--memory unlimited`).
pub const UNLIMITED: u64 = u64::MAX;

/// Default `--pids`: room for a parallel build, far below a fork bomb's
/// reach or the host's pid_max. Counts every task, the sandbox init too.
pub const DEFAULT_PIDS: u64 = 1024;

/// Default `--memory` is the smaller of this and half the host's RAM: an
/// agent's code gets enough for compilers and test suites, and a runaway
/// allocation meets the sandbox's OOM killer long before the host's (which
/// would pick its victim anywhere on the machine).
pub const DEFAULT_MEMORY_CAP: u64 = 2 << 30;

/// Below this the sandbox's own setup cannot run (Docker uses the same floor).
pub const MIN_MEMORY: u64 = 6 << 20;

/// CFS period for `--cpus` (the kernel's default; quota = cpus x period).
pub const CPU_PERIOD_US: u64 = 100_000;

/// The kernel refuses quotas below 1 ms.
const MIN_CPU_QUOTA_US: u64 = 1_000;

/// Whether a limit came from a flag or from husk's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Flag,
    Default,
}

/// Swap policy for a memory-limited sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Swap {
    /// No swap at all (default): memory beyond the limit means the OOM killer.
    Off,
    /// Memory + swap may total this many bytes (`--memory-swap`, Docker's meaning).
    Total(u64),
    Unlimited,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuQuota {
    pub millicores: u64,
    pub quota_us: u64,
    pub period_us: u64,
}

/// Resolved limits; `None` means unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub memory: Option<u64>,
    pub memory_source: Source,
    pub swap: Swap,
    pub cpu: Option<CpuQuota>,
    pub pids: Option<u64>,
    pub pids_source: Source,
}

/// What the host has, for limits that cannot exceed it (0: unknown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostSize {
    /// RAM in bytes.
    pub mem_total: u64,
    /// Online cpus.
    pub cpus: u64,
}

impl HostSize {
    pub fn probe() -> HostSize {
        let mem_total = nix::sys::sysinfo::sysinfo().map(|s| s.ram_total()).unwrap_or(0);
        let cpus = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN)
            .ok()
            .flatten()
            .map_or(0, |n| n.max(0) as u64);
        HostSize { mem_total, cpus }
    }
}

impl Limits {
    /// Applies defaults and validates. A limit beyond what the host has is
    /// refused rather than clamped: it would read as a bound it is not
    /// (`--cpus 1000` on 2 cpus bounds nothing), and husk never changes a
    /// value the user gave.
    pub fn resolve(spec: &LimitSpec, host: HostSize) -> Result<Limits, CgroupError> {
        let bad = |flag: &'static str, value: String, why: &str| CgroupError::BadLimit { flag, value, why: why.into() };
        let (memory, memory_source) = match spec.memory {
            None => (Some(default_memory(host.mem_total)), Source::Default),
            Some(UNLIMITED) => (None, Source::Flag),
            Some(m) if m < MIN_MEMORY => {
                return Err(bad("--memory", crate::units::format_size(m), "the minimum is 6M"));
            }
            Some(m) if host.mem_total != 0 && m > host.mem_total => {
                let why = format!(
                    "this host has {:.1}GiB of RAM, so it would bound nothing; give at most that, or 'unlimited'",
                    host.mem_total as f64 / (1u64 << 30) as f64
                );
                return Err(bad("--memory", crate::units::format_size(m), &why));
            }
            Some(m) => (Some(m), Source::Flag),
        };
        let swap = match (memory, spec.memory_swap) {
            (None, None) => Swap::Unlimited,
            (None, Some(_)) => {
                return Err(bad("--memory-swap", "given".into(), "it needs a memory limit (--memory SIZE)"));
            }
            (Some(_), None) => Swap::Off,
            (Some(_), Some(UNLIMITED)) => Swap::Unlimited,
            (Some(m), Some(t)) if t < m => {
                return Err(bad(
                    "--memory-swap",
                    crate::units::format_size(t),
                    "it is memory + swap together and must be at least --memory",
                ));
            }
            (Some(m), Some(t)) if t == m => Swap::Off,
            (Some(_), Some(t)) => Swap::Total(t),
        };
        let cpu = match spec.cpus_milli {
            None => None,
            Some(milli) => {
                let quota_us = milli.saturating_mul(CPU_PERIOD_US) / 1000;
                if quota_us < MIN_CPU_QUOTA_US {
                    return Err(bad("--cpus", format!("{}", milli as f64 / 1000.0), "the minimum is 0.01"));
                }
                if host.cpus != 0 && milli > host.cpus * 1000 {
                    let why = format!("this host has {} cpus; give at most {}", host.cpus, host.cpus);
                    return Err(bad("--cpus", format!("{}", milli as f64 / 1000.0), &why));
                }
                Some(CpuQuota { millicores: milli, quota_us, period_us: CPU_PERIOD_US })
            }
        };
        let (pids, pids_source) = match spec.pids {
            None => (Some(DEFAULT_PIDS), Source::Default),
            Some(UNLIMITED) => (None, Source::Flag),
            Some(n) if n < 2 => {
                return Err(bad("--pids", n.to_string(), "the sandbox needs at least 2 (its init and the command)"));
            }
            Some(n) => (Some(n), Source::Flag),
        };
        Ok(Limits { memory, memory_source, swap, cpu, pids, pids_source })
    }

    /// Controllers without which a requested limit cannot be applied.
    pub fn required(&self) -> Vec<Controller> {
        let mut out = Vec::new();
        if self.memory.is_some() {
            out.push(Controller::Memory);
        }
        if self.cpu.is_some() {
            out.push(Controller::Cpu);
        }
        if self.pids.is_some() {
            out.push(Controller::Pids);
        }
        out
    }
}

pub fn default_memory(mem_total: u64) -> u64 {
    match mem_total {
        0 => DEFAULT_MEMORY_CAP,
        t => DEFAULT_MEMORY_CAP.min((t / 2) & !((1 << 20) - 1)).max(MIN_MEMORY),
    }
}

fn is_unlimited(s: &str) -> bool {
    matches!(s.trim(), "unlimited" | "max" | "-1")
}

/// A limit flag's value that is not one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitValueError {
    #[error("invalid value {0:?}: a size cannot be negative; give e.g. 256M, or 'unlimited'")]
    NegativeSize(String),
    #[error(transparent)]
    Size(#[from] crate::units::UnitError),
    #[error("invalid value {0:?}: a cpu quota cannot be negative; give a positive number, e.g. 0.5")]
    NegativeCpus(String),
    #[error("invalid value {0:?}: expected a positive number of cpus, e.g. 0.5, 1, 2.5")]
    Cpus(String),
    #[error("invalid value {0:?}: at most three decimals (millicores)")]
    CpuDecimals(String),
    #[error("invalid value {0:?}: a task count cannot be negative; give a number or 'unlimited'")]
    NegativePids(String),
    #[error("invalid value {0:?}: expected a number of tasks or 'unlimited'")]
    Pids(String),
}

/// `--memory SIZE` / `--memory-swap SIZE`: a size, or `unlimited`.
pub fn parse_memory(s: &str) -> Result<u64, LimitValueError> {
    if is_unlimited(s) {
        return Ok(UNLIMITED);
    }
    if s.trim().starts_with('-') {
        return Err(LimitValueError::NegativeSize(s.into()));
    }
    Ok(crate::units::parse_size(s)?)
}

/// `--cpus N`: fractional cpus (`0.5`, `2`, `1.25`) -> millicores.
pub fn parse_cpus(s: &str) -> Result<u64, LimitValueError> {
    let err = || LimitValueError::Cpus(s.into());
    let t = s.trim();
    if t.starts_with('-') {
        return Err(LimitValueError::NegativeCpus(s.into()));
    }
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    if (int.is_empty() && frac.is_empty()) || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return Err(err());
    }
    if frac.len() > 3 {
        return Err(LimitValueError::CpuDecimals(s.into()));
    }
    let int: u64 = if int.is_empty() { 0 } else { int.parse().map_err(|_| err())? };
    let frac: u64 = if frac.is_empty() { 0 } else { format!("{frac:0<3}").parse().map_err(|_| err())? };
    let milli = int.checked_mul(1000).and_then(|m| m.checked_add(frac)).ok_or_else(err)?;
    if milli == 0 {
        return Err(err());
    }
    Ok(milli)
}

/// `--pids N`: a count, or `unlimited`.
pub fn parse_pids(s: &str) -> Result<u64, LimitValueError> {
    if is_unlimited(s) {
        return Ok(UNLIMITED);
    }
    if s.trim().starts_with('-') {
        return Err(LimitValueError::NegativePids(s.into()));
    }
    s.trim().parse::<u64>().map_err(|_| LimitValueError::Pids(s.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> LimitSpec {
        LimitSpec::default()
    }

    fn ram(mem_total: u64) -> HostSize {
        HostSize { mem_total, cpus: 0 }
    }

    #[test]
    fn limits_beyond_the_host_are_refused_not_silently_meaningless() {
        let host = HostSize { mem_total: 23 << 30, cpus: 2 };
        let e = Limits::resolve(&LimitSpec { cpus_milli: Some(1_000_000), ..spec() }, host).unwrap_err().to_string();
        assert!(e.contains("--cpus") && e.contains("this host has 2 cpus"), "{e}");
        let e = Limits::resolve(&LimitSpec { memory: Some(500 << 30), ..spec() }, host).unwrap_err().to_string();
        assert!(e.contains("--memory") && e.contains("RAM"), "{e}");
        // All of the host is still a bound one may ask for.
        assert!(Limits::resolve(&LimitSpec { cpus_milli: Some(2000), memory: Some(23 << 30), ..spec() }, host).is_ok());
    }

    #[test]
    fn negative_limits_are_refused_with_the_real_reason() {
        assert!(parse_cpus("-1").unwrap_err().to_string().contains("cannot be negative"));
        assert!(parse_pids("-5").unwrap_err().to_string().contains("cannot be negative"));
        assert!(parse_memory("-5M").unwrap_err().to_string().contains("cannot be negative"));
        // Docker's spelling of unlimited stays.
        assert_eq!(parse_memory("-1").unwrap(), UNLIMITED);
    }

    #[test]
    fn defaults_bound_memory_and_pids_with_swap_off() {
        let l = Limits::resolve(&spec(), ram(24 << 30)).unwrap();
        assert_eq!(l.memory, Some(2 << 30));
        assert_eq!(l.memory_source, Source::Default);
        assert_eq!(l.swap, Swap::Off);
        assert_eq!(l.pids, Some(DEFAULT_PIDS));
        assert_eq!(l.cpu, None);
        assert_eq!(l.required(), vec![Controller::Memory, Controller::Pids]);
        // A small host gets half its RAM.
        assert_eq!(Limits::resolve(&spec(), ram(1 << 30)).unwrap().memory, Some(512 << 20));
        assert_eq!(default_memory(0), 2 << 30);
    }

    #[test]
    fn flags_override_and_validate() {
        let s = LimitSpec { memory: Some(256 << 20), cpus_milli: Some(500), pids: Some(64), ..spec() };
        let l = Limits::resolve(&s, HostSize::default()).unwrap();
        assert_eq!(l.memory, Some(256 << 20));
        assert_eq!(l.cpu, Some(CpuQuota { millicores: 500, quota_us: 50_000, period_us: 100_000 }));
        assert_eq!(l.pids, Some(64));
        assert_eq!(l.pids_source, Source::Flag);

        let unl = LimitSpec { memory: Some(UNLIMITED), pids: Some(UNLIMITED), ..spec() };
        let l = Limits::resolve(&unl, HostSize::default()).unwrap();
        assert_eq!((l.memory, l.pids, l.swap), (None, None, Swap::Unlimited));
        assert!(l.required().is_empty());

        assert!(Limits::resolve(&LimitSpec { memory: Some(1 << 20), ..spec() }, HostSize::default()).is_err());
        assert!(Limits::resolve(&LimitSpec { pids: Some(1), ..spec() }, HostSize::default()).is_err());
        assert!(Limits::resolve(&LimitSpec { cpus_milli: Some(5), ..spec() }, HostSize::default()).is_err());
    }

    #[test]
    fn memory_swap_is_memory_plus_swap() {
        let with = |m: u64, t: u64| {
            Limits::resolve(&LimitSpec { memory: Some(m), memory_swap: Some(t), ..spec() }, HostSize::default())
        };
        assert_eq!(with(256 << 20, 512 << 20).unwrap().swap, Swap::Total(512 << 20));
        assert_eq!(with(256 << 20, 256 << 20).unwrap().swap, Swap::Off);
        assert_eq!(with(256 << 20, UNLIMITED).unwrap().swap, Swap::Unlimited);
        assert!(with(256 << 20, 128 << 20).is_err());
        let no_mem = LimitSpec { memory: Some(UNLIMITED), memory_swap: Some(1 << 30), ..spec() };
        assert!(Limits::resolve(&no_mem, HostSize::default()).is_err());
    }

    #[test]
    fn cli_values_parse() {
        assert_eq!(parse_cpus("0.5").unwrap(), 500);
        assert_eq!(parse_cpus("2").unwrap(), 2000);
        assert_eq!(parse_cpus("1.25").unwrap(), 1250);
        assert_eq!(parse_cpus(".1").unwrap(), 100);
        assert!(parse_cpus("0").is_err());
        assert!(parse_cpus("-1").is_err());
        assert!(parse_cpus("0.0001").is_err());
        assert!(parse_cpus("1e3").is_err());
        assert!(parse_cpus(".").is_err());
        assert_eq!(parse_memory("256M").unwrap(), 256 << 20);
        assert_eq!(parse_memory("unlimited").unwrap(), UNLIMITED);
        assert!(parse_memory("lots").is_err());
        assert_eq!(parse_pids("100").unwrap(), 100);
        assert_eq!(parse_pids("max").unwrap(), UNLIMITED);
        assert!(parse_pids("-5").is_err());
    }
}
