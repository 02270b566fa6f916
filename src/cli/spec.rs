//! The command line as a `Spec`: the flags `run`, `create` and `exec` share,
//! checked and turned into what the library takes (`Plan::build` then
//! validates the whole against the host).

use super::{NetworkArg, ProcessArgs, RuntimeArg, SandboxArgs};
use crate::cgroup::limits;
use crate::spec::{Access, BindSpec, LimitSpec, NetworkMode, OutputSpec, RootSpec, RuntimeChoice, Spec, TmpfsSpec};

/// Turns the sandbox-shaping flags into the spec (shared with `create`).
pub fn apply_sandbox_args(spec: &mut Spec, a: &SandboxArgs) -> Result<(), String> {
    spec.root = match (&a.rootfs, &a.image) {
        (Some(dir), _) => RootSpec::Rootfs(dir.clone()),
        (None, Some(r)) => RootSpec::Image(r.clone()),
        (None, None) => RootSpec::Host,
    };
    spec.pull = a.pull.into();
    if a.writable && spec.root == RootSpec::Host {
        return Err("--writable needs --image or --rootfs (host mode is always read-only)".into());
    }
    spec.writable = a.writable;
    spec.workdir = a.workdir.clone();
    spec.workdir_size = a.workdir_size;
    spec.tmp_size = a.tmp_size;
    spec.binds = a.bind.iter().map(|b| parse_bind(b)).collect::<Result<_, _>>()?;
    spec.tmpfs = a.tmpfs.iter().map(|t| parse_tmpfs(t)).collect::<Result<_, _>>()?;
    spec.network = match a.network {
        NetworkArg::None => NetworkMode::None,
        NetworkArg::Host => NetworkMode::Host,
    };
    spec.hostname = a.hostname.clone();
    spec.cap_add = a.cap_add.clone();
    spec.rlimits =
        a.rlimit.iter().map(|r| crate::plan::parse_rlimit(r).map_err(|e| e.to_string())).collect::<Result<_, _>>()?;
    spec.id_range = a.id_range.as_deref().map(crate::userns::parse_range).transpose().map_err(|e| e.to_string())?;
    spec.seccomp = crate::seccomp::parse_arg(&a.seccomp)?;
    spec.seccomp_report = a.seccomp_report;
    spec.runtime = match a.runtime {
        RuntimeArg::Native => RuntimeChoice::Native,
        RuntimeArg::Runsc => RuntimeChoice::Runsc,
        RuntimeArg::Auto => RuntimeChoice::Auto,
    };
    spec.limits = limit_spec(a)?;
    if spec.runtime == RuntimeChoice::Native {
        let runsc_flag = [("--runsc-platform", a.runsc_platform.is_some()), ("--runsc-path", a.runsc_path.is_some())];
        if let Some((flag, _)) = runsc_flag.iter().find(|(_, given)| *given) {
            return Err(format!("{flag} applies to --runtime runsc or auto only; this run uses --runtime native"));
        }
    }
    spec.runsc = crate::spec::RunscSpec { path: a.runsc_path.clone(), platform: a.runsc_platform.clone() };
    Ok(())
}

/// Largest `--env-file` husk reads: far above what execve takes (128 KiB
/// per variable, a few MiB in all), so only a wrong file hits it.
pub const ENV_FILE_LIMIT: u64 = 1 << 20;

/// Applies per-command flags (shared with `exec`).
pub fn apply_process_args(spec: &mut Spec, p: &ProcessArgs) -> Result<(), String> {
    spec.timeout = p.timeout;
    spec.kill_grace = p.kill_grace;
    spec.output = if p.json { OutputSpec::Capture { limit: p.output_limit } } else { OutputSpec::Passthrough };
    spec.user = p.user.clone();
    for f in &p.env_file {
        let text = crate::userfile::read_text("--env-file", f, ENV_FILE_LIMIT).map_err(|e| e.to_string())?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line.split_once('=').ok_or_else(|| {
                format!("--env-file {} line {}: expected KEY=VALUE, got {line:?}", f.display(), n + 1)
            })?;
            spec.env.push((k.trim().to_string(), v.to_string()));
        }
    }
    for e in &p.env {
        match e.split_once('=') {
            Some((k, v)) => spec.env.push((k.to_string(), v.to_string())),
            // Docker's rule: `--env NAME` copies NAME when husk has it and
            // leaves it unset (not empty) when husk does not.
            None => {
                if let Ok(v) = std::env::var(e) {
                    spec.env.push((e.clone(), v));
                }
            }
        }
    }
    // A control character in a name (a tab from a sloppy env file, an escape
    // sequence) is never what was meant, and some shells and tools in the
    // sandbox would skip or mangle the variable.
    if let Some((k, _)) = spec.env.iter().find(|(k, _)| k.is_empty() || k.chars().any(char::is_control)) {
        return Err(format!(
            "invalid environment variable name {k:?} (--env or --env-file): names must be non-empty and hold no control characters"
        ));
    }
    Ok(())
}

pub fn parse_bind(s: &str) -> Result<BindSpec, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let (src, dst, access) = match parts.as_slice() {
        [src, dst] => (*src, *dst, Access::ReadOnly),
        [src, dst, "ro"] => (*src, *dst, Access::ReadOnly),
        [src, dst, "rw"] => (*src, *dst, Access::ReadWrite),
        [_, _, mode] => {
            return Err(format!("invalid --bind {s:?}: mode {mode:?} must be ro or rw"));
        }
        _ => {
            return Err(format!("invalid --bind {s:?}: expected SRC:DST[:ro|rw], e.g. ./data:/data:rw"));
        }
    };
    if src.is_empty() || dst.is_empty() {
        return Err(format!("invalid --bind {s:?}: SRC and DST must be non-empty"));
    }
    let source =
        std::fs::canonicalize(src).map_err(|e| format!("--bind source {src:?}: {e}; give an existing host path"))?;
    Ok(BindSpec { source, target: dst.to_string(), access })
}

pub fn parse_tmpfs(s: &str) -> Result<TmpfsSpec, String> {
    let (dst, size) = match s.split_once(':') {
        Some((d, z)) => (d, super::tmpfs_size(z).map_err(|e| format!("--tmpfs {s:?}: {e}"))?),
        None => (s, crate::spec::DEFAULT_TMP_SIZE),
    };
    Ok(TmpfsSpec { target: dst.to_string(), size })
}

/// The `--memory`, `--memory-swap`, `--cpus`, `--pids`, `--no-cgroup` and
/// `--cgroup-parent` flags as a `LimitSpec` (defaults are applied later,
/// by `Limits::resolve`).
pub fn limit_spec(a: &SandboxArgs) -> Result<LimitSpec, String> {
    let opt = |v: &Option<String>, flag: &str, f: fn(&str) -> Result<u64, String>| {
        v.as_deref().map(|s| f(s).map_err(|e| format!("{flag}: {e}"))).transpose()
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
            return Err(format!(
                "{flag} needs a cgroup, but --no-cgroup (or HUSK_NO_CGROUP) turns cgroups off; drop one of them"
            ));
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
