//! The one way a typed request becomes a `Spec`: every front door (the CLI,
//! `husk serve`, MCP) lowers its request here, so a bad value fails with the
//! same check and the same words wherever it came from (`Plan::build` then
//! validates the whole against the host).

use super::{CreateOptions, ProcessOptions, SandboxOptions};
use crate::cgroup::limits::{self, LimitValueError};
use crate::spec::{Access, BindSpec, LimitSpec, NetworkMode, OutputSpec, RootSpec, RuntimeChoice, Spec, TmpfsSpec};
use nix::errno::Errno;
use std::path::PathBuf;

/// A flag (or a combination of flags) husk refuses, before anything runs.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    #[error("--writable needs --image or --rootfs (host mode is always read-only)")]
    WritableHost,
    #[error("invalid --bind {spec:?}: mode {mode:?} must be ro or rw")]
    BindMode { spec: String, mode: String },
    #[error("invalid --bind {0:?}: expected SRC:DST[:ro|rw], e.g. ./data:/data:rw")]
    BindShape(String),
    #[error("invalid --bind {0:?}: SRC and DST must be non-empty")]
    BindEmpty(String),
    #[error("--bind source {path:?}: {source}; give an existing host path")]
    BindSource { path: String, source: std::io::Error },
    #[error("--tmpfs {spec:?}: {source}")]
    Tmpfs { spec: String, source: crate::units::UnitError },
    #[error("--tmpfs {0:?}: a tmpfs of size 0 would have no size limit at all; give a size, e.g. 64M")]
    TmpfsEmpty(String),
    #[error(transparent)]
    Plan(#[from] crate::plan::PlanError),
    #[error(transparent)]
    Secret(#[from] super::secrets::SecretError),
    #[error(transparent)]
    IdRange(#[from] crate::userns::IdMapError),
    #[error(transparent)]
    IdRangeRefused(#[from] crate::idrange::RangeRefused),
    #[error(transparent)]
    Seccomp(#[from] crate::seccomp::UnknownProfile),
    #[error("{flag}: {source}")]
    Limit { flag: &'static str, source: LimitValueError },
    #[error("{0} needs a cgroup, but --no-cgroup (or HUSK_NO_CGROUP) turns cgroups off; drop one of them")]
    LimitWithoutCgroup(&'static str),
    #[error("{0} applies to --runtime runsc or auto only; this run uses --runtime native")]
    RunscFlag(&'static str),
    #[error(transparent)]
    Egress(#[from] crate::net::EgressError),
    #[error(transparent)]
    Publish(#[from] crate::net::publish::PublishError),
    #[error(
        "--publish with --network host: the sandbox already uses the host's network, so its servers are reachable directly; use --network none (or allow=) to publish"
    )]
    PublishHost,
    #[error(transparent)]
    EnvFile(#[from] crate::userfile::UserFileError),
    #[error("--env-file {} line {line}: expected KEY=VALUE, got {text:?}", path.display())]
    EnvLine { path: PathBuf, line: usize, text: String },
    #[error(
        "-t/--tty with --json-stream: a terminal's output has no stdout/stderr streams to send as events; use -t with --json (the terminal's output is the verdict's stdout) or --json-stream without -t"
    )]
    TtyJsonStream,
    #[error(
        "invalid environment variable name {0:?} (--env or --env-file): names must be non-empty and hold no control characters"
    )]
    EnvName(String),
    #[error(transparent)]
    Platform(#[from] crate::image::pull::BadPlatform),
    #[error(transparent)]
    Mirror(#[from] crate::image::registry::mirror::MirrorError),
}

/// Refused flags, as the verdict reports them (step `arguments`).
impl From<ArgsError> for crate::outcome::ErrorReport {
    fn from(e: ArgsError) -> Self {
        crate::outcome::ErrorReport::new(crate::step::Phase::Arguments, e.to_string()).with_errno(e.errno())
    }
}

impl ArgsError {
    /// The kernel's errno, when a host path could not be read.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            ArgsError::BindSource { source, .. } => crate::step::io_errno(source),
            ArgsError::EnvFile(crate::userfile::UserFileError::Io { source, .. }) => crate::step::io_errno(source),
            _ => None,
        }
    }
}

/// Turns the sandbox-shaping flags into the spec (shared with `create`).
pub fn apply_sandbox(spec: &mut Spec, a: &SandboxOptions) -> Result<(), ArgsError> {
    spec.root = match (&a.rootfs, &a.image) {
        (Some(dir), _) => RootSpec::Rootfs(dir.clone()),
        (None, Some(r)) => RootSpec::Image(r.clone()),
        (None, None) => RootSpec::Host,
    };
    spec.pull = a.pull;
    // Checked here so a bad value fails before anything runs, even
    // without --image (then they are unused).
    if let Some(p) = &a.platform {
        crate::image::pull::parse_platform(p)?;
    }
    for m in &a.registry_mirrors {
        crate::image::registry::mirror::parse_flag(m)?;
    }
    spec.registry = crate::spec::RegistrySpec {
        platform: a.platform.clone(),
        insecure: a.insecure_registries.clone(),
        ca_files: a.registry_ca.clone(),
        mirrors: a.registry_mirrors.clone(),
    };
    if a.writable && spec.root == RootSpec::Host {
        return Err(ArgsError::WritableHost);
    }
    spec.writable = a.writable;
    spec.workdir = a.workdir.clone();
    spec.workdir_size = a.workdir_size.unwrap_or(crate::spec::DEFAULT_WORKDIR_SIZE);
    spec.tmp_size = a.tmp_size.unwrap_or(crate::spec::DEFAULT_TMP_SIZE);
    spec.binds = a.binds.iter().map(|b| parse_bind(b)).collect::<Result<_, _>>()?;
    spec.tmpfs = a.tmpfs.iter().map(|t| parse_tmpfs(t)).collect::<Result<_, _>>()?;
    (spec.network, spec.egress) = network(a)?;
    spec.publish = a.publish.iter().map(|p| crate::net::publish::PublishSpec::parse(p)).collect::<Result<_, _>>()?;
    if !spec.publish.is_empty() && spec.network == NetworkMode::Host {
        return Err(ArgsError::PublishHost);
    }
    spec.hostname = a.hostname.clone().unwrap_or_else(|| crate::spec::DEFAULT_HOSTNAME.to_string());
    spec.cap_add = a.cap_add.clone();
    spec.rlimits = a.rlimits.iter().map(|r| crate::plan::parse_rlimit(r)).collect::<Result<_, _>>()?;
    spec.id_range = a.id_range.as_deref().map(crate::userns::parse_range).transpose()?;
    if let Some(r) = spec.id_range {
        crate::idrange::check_unless_forced(r, a.id_range_force)?;
    }
    spec.seccomp = crate::seccomp::parse_arg(a.seccomp.as_deref().unwrap_or("default"))?;
    spec.seccomp_report = a.seccomp_report;
    spec.runtime = a.runtime;
    spec.limits = limits(a)?;
    if spec.runtime == RuntimeChoice::Native {
        let runsc_flag = [("--runsc-platform", a.runsc_platform.is_some()), ("--runsc-path", a.runsc_path.is_some())];
        if let Some((flag, _)) = runsc_flag.iter().find(|(_, given)| *given) {
            return Err(ArgsError::RunscFlag(flag));
        }
    }
    spec.runsc = crate::spec::RunscSpec { path: a.runsc_path.clone(), platform: a.runsc_platform.clone() };
    Ok(())
}

/// `--network`, `--allow-host`, `--add-host`, `--egress-bytes`: the
/// namespace mode and, for an allowlist, the proxy's spec (rules checked
/// here, so a typo fails before anything is made).
pub fn network(a: &SandboxOptions) -> Result<(NetworkMode, Option<crate::net::EgressSpec>), ArgsError> {
    use crate::net::EgressError;
    let mut mode: Option<&str> = None;
    let mut rules: Vec<String> = Vec::new();
    for n in &a.network {
        match n.as_str() {
            "none" | "host" => {
                if mode.is_some_and(|m| m != n) {
                    return Err(EgressError::Mode(a.network.join(" --network ")).into());
                }
                mode = Some(n);
            }
            other => match other.strip_prefix("allow=") {
                Some(list) => {
                    rules.extend(list.split(',').filter(|r| !r.trim().is_empty()).map(|r| r.trim().to_string()))
                }
                None => return Err(EgressError::Mode(other.to_string()).into()),
            },
        }
    }
    rules.extend(a.allow_hosts.iter().cloned());
    let allow = !rules.is_empty() || a.network.iter().any(|n| n.starts_with("allow="));
    if !allow {
        if !a.add_hosts.is_empty() || a.egress_bytes.is_some() {
            return Err(EgressError::NeedsAllow.into());
        }
        return Ok((if mode == Some("host") { NetworkMode::Host } else { NetworkMode::None }, None));
    }
    if let Some(m) = mode {
        return Err(EgressError::Mixed(m.to_string()).into());
    }
    if rules.is_empty() {
        return Err(EgressError::Mode("allow=".into()).into());
    }
    let add_hosts = a.add_hosts.iter().map(|h| crate::net::parse_add_host(h)).collect::<Result<Vec<_>, _>>()?;
    let spec = crate::net::EgressSpec { rules, add_hosts, egress_bytes: a.egress_bytes };
    spec.validate().map_err(crate::net::EgressError::from)?;
    Ok((NetworkMode::None, Some(spec)))
}

/// Largest `--env-file` husk reads: far above what execve takes (128 KiB
/// per variable, a few MiB in all), so only a wrong file hits it.
pub const ENV_FILE_LIMIT: u64 = 1 << 20;

/// The per-command options (`run`, `exec`; `create`'s exec defaults):
/// the secrets join the environment (after the sandbox's, before `env`)
/// and, before any output is captured, the values to hide (`redact`). The
/// spec holds them in memory only: run and exec write no spec down
/// (create keeps its secrets out of its spec, which state.json holds).
pub fn apply_process(spec: &mut Spec, p: &ProcessOptions, redact: &crate::redact::Redaction) -> Result<(), ArgsError> {
    spec.timeout = p.timeout;
    spec.kill_grace = p.kill_grace;
    spec.output = match p.capture {
        Some(limit) => OutputSpec::Capture { limit },
        None => OutputSpec::Passthrough,
    };
    spec.user = p.user.clone();
    if p.tty && p.stream {
        return Err(ArgsError::TtyJsonStream);
    }
    spec.tty = p.tty;
    let secrets = super::secrets::check(p.secrets.clone())?;
    spec.env.extend(crate::redact::env_pairs(&secrets));
    redact.add(secrets);
    spec.env.extend(env_of(p)?);
    Ok(())
}

/// The environment `env_files` and `env` give (in that order).
pub fn env_of(p: &ProcessOptions) -> Result<Vec<(String, String)>, ArgsError> {
    let mut env = Vec::new();
    for f in &p.env_files {
        let text = crate::userfile::read_text("--env-file", f, ENV_FILE_LIMIT)?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line.split_once('=').ok_or_else(|| ArgsError::EnvLine {
                path: f.clone(),
                line: n + 1,
                text: line.to_string(),
            })?;
            env.push((k.trim().to_string(), v.to_string()));
        }
    }
    for e in &p.env {
        match e.split_once('=') {
            Some((k, v)) => env.push((k.to_string(), v.to_string())),
            // Docker's rule: `--env NAME` copies NAME when husk has it and
            // leaves it unset (not empty) when husk does not.
            None => {
                if let Ok(v) = std::env::var(e) {
                    env.push((e.clone(), v));
                }
            }
        }
    }
    // A control character in a name (a tab from a sloppy env file, an escape
    // sequence) is never what was meant, and some shells and tools in the
    // sandbox would skip or mangle the variable.
    if let Some((k, _)) = env.iter().find(|(k, _)| k.is_empty() || k.chars().any(char::is_control)) {
        return Err(ArgsError::EnvName(k.clone()));
    }
    Ok(env)
}

/// `husk run`'s spec: the sandbox and the command.
pub fn run_spec(
    command: Vec<String>,
    sandbox: &SandboxOptions,
    process: &ProcessOptions,
    redact: &crate::redact::Redaction,
) -> Result<Spec, ArgsError> {
    let mut spec = Spec::new(command);
    apply_sandbox(&mut spec, sandbox)?;
    apply_process(&mut spec, process, redact)?;
    Ok(spec)
}

/// Why a `create` request is refused before anything is made.
#[derive(Debug, thiserror::Error)]
pub enum CreateRefused {
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// The lease, name, labels or warm/session combination (the text names
    /// the option and the fix).
    #[error("{0}")]
    Usage(String),
}

/// `husk create`'s spec, and its secrets (kept out of the spec, which
/// state.json holds; the supervisor keeps them in memory).
pub fn create_spec(o: &CreateOptions) -> Result<(Spec, Vec<crate::redact::Secret>), CreateRefused> {
    let usage = CreateRefused::Usage;
    if o.ttl.is_zero() {
        return Err(usage("--ttl must be longer than 0 (e.g. 30s, 10m, 2h)".into()));
    }
    if o.max_lifetime.is_some_and(|d| d.is_zero()) {
        return Err(usage("a maximum lifetime of 0 would remove the sandbox at once; give e.g. 1h".into()));
    }
    if o.ready_cmd.is_some() && o.ready_timeout.is_zero() {
        return Err(usage("a timeout of 0 would kill every run at once; leave --timeout out for no limit".into()));
    }
    let mut spec = Spec::new(Vec::new());
    apply_sandbox(&mut spec, &o.sandbox)?;
    spec.warm = match (&o.warm, &o.session) {
        (Some(_), Some(_)) => return Err(usage("--warm and --session do not go together: pick one".into())),
        (Some(w), None) => Some(crate::spec::WarmSpec::parse_warm(w).map_err(|e| usage(e.to_string()))?),
        (None, Some(s)) => Some(crate::spec::WarmSpec::parse_session(s).map_err(|e| usage(e.to_string()))?),
        (None, None) => None,
    };
    // A session in a --concurrent sandbox: its calls take turns
    // (sandbox::exec's session lock), other execs run beside them.
    // The execs' defaults only: their timeout and capture are per exec.
    let defaults = ProcessOptions {
        env: o.process.env.clone(),
        env_files: o.process.env_files.clone(),
        user: o.process.user.clone(),
        ..ProcessOptions::default()
    };
    // The defaults hold no secrets: the sandbox's go to its supervisor.
    apply_process(&mut spec, &defaults, &crate::redact::Redaction::none())?;
    let secrets = super::secrets::check(o.process.secrets.clone()).map_err(ArgsError::from)?;
    Ok((spec, secrets))
}

pub fn parse_bind(s: &str) -> Result<BindSpec, ArgsError> {
    let parts: Vec<&str> = s.split(':').collect();
    let (src, dst, access) = match parts.as_slice() {
        [src, dst] => (*src, *dst, Access::ReadOnly),
        [src, dst, "ro"] => (*src, *dst, Access::ReadOnly),
        [src, dst, "rw"] => (*src, *dst, Access::ReadWrite),
        [_, _, mode] => {
            return Err(ArgsError::BindMode { spec: s.into(), mode: mode.to_string() });
        }
        _ => {
            return Err(ArgsError::BindShape(s.into()));
        }
    };
    if src.is_empty() || dst.is_empty() {
        return Err(ArgsError::BindEmpty(s.into()));
    }
    let source = std::fs::canonicalize(src).map_err(|source| ArgsError::BindSource { path: src.into(), source })?;
    Ok(BindSpec { source, target: dst.to_string(), access })
}

pub fn parse_tmpfs(s: &str) -> Result<TmpfsSpec, ArgsError> {
    let (dst, size) = match s.split_once(':') {
        Some((d, z)) => {
            match crate::units::parse_size(z).map_err(|source| ArgsError::Tmpfs { spec: s.into(), source })? {
                0 => return Err(ArgsError::TmpfsEmpty(s.into())),
                n => (d, n),
            }
        }
        None => (s, crate::spec::DEFAULT_TMP_SIZE),
    };
    Ok(TmpfsSpec { target: dst.to_string(), size })
}

/// The `--memory`, `--memory-swap`, `--cpus`, `--pids`, `--no-cgroup` and
/// `--cgroup-parent` flags as a `LimitSpec` (defaults are applied later,
/// by `Limits::resolve`).
pub fn limits(a: &SandboxOptions) -> Result<LimitSpec, ArgsError> {
    let opt = |v: &Option<String>, flag: &'static str, f: fn(&str) -> Result<u64, LimitValueError>| {
        v.as_deref().map(|s| f(s).map_err(|source| ArgsError::Limit { flag, source })).transpose()
    };
    if a.no_cgroup {
        let given = [
            ("--memory", a.memory.is_some()),
            ("--memory-swap", a.memory_swap.is_some()),
            ("--cpus", a.cpus.is_some()),
            ("--pids", a.pids.is_some()),
            ("--cgroup-parent", a.cgroup_parent.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, set)| *set) {
            return Err(ArgsError::LimitWithoutCgroup(flag));
        }
    }
    Ok(LimitSpec {
        memory: opt(&a.memory, "--memory", limits::parse_memory)?,
        memory_swap: opt(&a.memory_swap, "--memory-swap", limits::parse_memory)?,
        cpus_milli: opt(&a.cpus, "--cpus", limits::parse_cpus)?,
        pids: opt(&a.pids, "--pids", limits::parse_pids)?,
        no_cgroup: a.no_cgroup,
        cgroup_parent: a.cgroup_parent.clone(),
    })
}
