//! `husk run`: one command in a fresh sandbox.

use crate::backend::{self, RunIo};
use crate::cli::{NetworkArg, ProcessArgs, RunArgs, RuntimeArg, SandboxArgs};
use crate::host::HostFacts;
use crate::outcome::{ErrorReport, Outcome, Termination, Verdict};
use crate::paths::{Paths, PathsError};
use crate::plan::Plan;
use crate::spec::{Access, BindSpec, NetworkMode, OutputSpec, RootSpec, RuntimeChoice, Spec, TmpfsSpec};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Turns the sandbox-shaping flags into the spec (shared with `create`).
pub fn apply_sandbox_args(spec: &mut Spec, a: &SandboxArgs) -> Result<(), String> {
    spec.root = match (&a.rootfs, &a.image) {
        (Some(dir), _) => RootSpec::Rootfs(dir.clone()),
        (None, Some(r)) => RootSpec::Image(r.clone()),
        (None, None) => RootSpec::Host,
    };
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
    spec.limits = crate::cgroup::limits::spec_from_args(a)?;
    spec.runsc = crate::spec::RunscSpec { path: a.runsc_path.clone(), platform: a.runsc_platform.clone() };
    Ok(())
}

/// Applies per-command flags (shared with `exec`).
pub fn apply_process_args(spec: &mut Spec, p: &ProcessArgs) -> Result<(), String> {
    spec.timeout = p.timeout;
    spec.kill_grace = p.kill_grace;
    spec.output = if p.json { OutputSpec::Capture { limit: p.output_limit } } else { OutputSpec::Passthrough };
    spec.user = p.user.clone();
    for f in &p.env_file {
        let text = std::fs::read_to_string(f).map_err(|e| format!("--env-file {}: {e}", f.display()))?;
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
            None => {
                if let Ok(v) = std::env::var(e) {
                    spec.env.push((e.clone(), v));
                }
            }
        }
    }
    if let Some((k, _)) = spec.env.iter().find(|(k, _)| k.is_empty() || k.contains('\0')) {
        return Err(format!("invalid --env name {k:?}: names must be non-empty"));
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
        Some((d, z)) => (d, crate::units::parse_size(z).map_err(|e| format!("--tmpfs {s:?}: {e}"))?),
        None => (s, crate::spec::DEFAULT_TMP_SIZE),
    };
    Ok(TmpfsSpec { target: dst.to_string(), size })
}

/// A failure before the sandbox exists, as a verdict (for --json callers)
/// and a message on stderr.
pub fn early_failure(step: &str, message: String, hint: Option<String>) -> Outcome {
    Outcome::setup_failed(ErrorReport { step: step.into(), errno: None, message, hint })
}

/// Prints the verdict / writes the verdict file / explains a failure.
pub fn report(outcome: &Outcome, id: &str, backend: &str, isolation: &serde_json::Value, p: &ProcessArgs) -> i32 {
    report_with(outcome, id, backend, isolation, p, &Default::default())
}

/// `report`, with verdict keys beyond `run`'s (`husk exec`: the sandbox).
pub fn report_with(
    outcome: &Outcome,
    id: &str,
    backend: &str,
    isolation: &serde_json::Value,
    p: &ProcessArgs,
    extra: &std::collections::BTreeMap<&'static str, serde_json::Value>,
) -> i32 {
    let code = outcome.exit_code();
    if let Some(path) = &p.verdict_file {
        let mut v = Verdict::new(id, backend, outcome, isolation, false);
        v.extra = extra.clone();
        if let Err(e) = write_atomic(path, &serde_json::to_vec_pretty(&v).unwrap_or_default()) {
            eprintln!("husk: writing --verdict-file {}: {e}", path.display());
        }
    }
    if p.json {
        let mut v = Verdict::new(id, backend, outcome, isolation, true);
        v.extra = extra.clone();
        let mut out = std::io::stdout().lock();
        let _ = serde_json::to_writer(&mut out, &v);
        let _ = out.write_all(b"\n");
    }
    if let Some(line) = crate::cgroup::explain(outcome) {
        eprintln!("husk: {line}");
    }
    if outcome.termination == Termination::SetupFailed
        && let Some(e) = &outcome.error
    {
        eprintln!("husk: {}", e.message);
        if let Some(h) = &e.hint {
            eprintln!("husk: hint: {h}");
        }
    }
    code
}

/// Writes `data` to a temp file beside `path`, then renames it into place.
/// Anything but a regular file (a device, FIFO, `/dev/stderr`, `/dev/fd/N`)
/// is written in place instead: renaming over it would replace, say, the
/// host's /dev/null with a regular file when husk runs as root.
pub fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    if std::fs::symlink_metadata(path).is_ok_and(|m| !m.is_file()) {
        return std::fs::OpenOptions::new().write(true).truncate(true).open(path)?.write_all(data);
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp: PathBuf = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("verdict"),
        std::process::id()
    ));
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

pub fn run(args: RunArgs, paths: &Result<Paths, PathsError>, state_dir: Option<&Path>, t_start: u64) -> i32 {
    let p = args.process.clone();
    let fail = |step: &str, msg: String| {
        let o = early_failure(step, msg, None);
        report(&o, "", "none", &serde_json::Value::Null, &p)
    };
    let mut spec = Spec::new(args.command.clone());
    if let Err(e) =
        apply_sandbox_args(&mut spec, &args.sandbox).and_then(|_| apply_process_args(&mut spec, &args.process))
    {
        return fail("arguments", e);
    }
    // Reading the cgroup layout on a `background` thread while the root is
    // resolved did not pay: the join still waited ~0.1 ms (thread start and
    // its first allocations ate the ~0.2 ms the probe takes).
    let mut host = HostFacts::probe();
    // One store for everything (images, compiled seccomp profiles).
    if let Ok(p) = paths {
        host.store_root = p.root.clone();
    }
    let (root, _lease) = match crate::image::root::root_input(&spec, &host, paths) {
        Ok(r) => r,
        Err(e) => return fail("root", e),
    };
    let selected = match backend::select(&spec, state_dir) {
        Ok(b) => b,
        Err(e) => return fail("backend", e),
    };
    let backend = selected.backend;
    let capture = match spec.output {
        OutputSpec::Capture { limit } => Some(limit),
        OutputSpec::Passthrough => None,
    };
    let plan = match Plan::build(spec, &host, root) {
        Ok(p) => p,
        Err(e) => return fail("plan", e.to_string()),
    };
    let id = plan.id.clone();
    let mut isolation = backend.isolation(&plan);
    if let (Some(note), Some(obj)) = (selected.note, isolation.as_object_mut()) {
        obj.insert("runtime_choice".into(), note);
    }
    let outcome = backend.run(plan, RunIo { capture, t_start });
    report(&outcome, &id, backend.name(), &isolation, &p)
}
