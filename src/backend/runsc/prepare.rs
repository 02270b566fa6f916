//! What both ways of starting runsc build before they launch it: a run
//! (`husk run --runtime runsc`, runsc in the foreground) and a held sandbox
//! (`husk create --runtime runsc`, `runsc run --detach` of husk's holder).
//! The bundle, the run directory with its owner line, runsc's argv, its
//! user namespace and the host directories it must reach are the same for
//! both; only the process, the flags after `run` and where runsc logs
//! differ (`Invocation`).

use super::config::{self, Mode, RunscConfig};
use super::launch::{Expose, UserNs};
use super::layout::{self, Layout};
use super::{RunDir, bundle, gc, helper};
use crate::outcome::ErrorReport;
use crate::plan::Plan;
use crate::step::{Phase, Step, io_errno};
use crate::sys::fd::CStrArray;
use std::ffi::CString;
use std::path::{Path, PathBuf};

/// How runsc is run.
pub enum Invocation {
    /// `runsc run` in the foreground, logging to `--debug-log` (its
    /// "Exiting with status" line is the command's wait status). `debug`:
    /// HUSK_RUNSC_DEBUG, every runsc process logs in detail. `marker`:
    /// what husk's helper tags an exec failure with on stderr (see
    /// `helper::exec`; "-" when husk does not capture stderr).
    Run { debug: bool, marker: String },
    /// `runsc run --detach` of husk's holder; runsc's own output goes to
    /// the log file, which the caller passes as stdout/stderr.
    Detach,
    /// `runsc restore --detach` of a held sandbox from the checkpoint image
    /// in this directory (checkpoint.rs): the same bundle as `Detach`.
    Restore { image_dir: PathBuf },
}

impl Invocation {
    /// A held sandbox (husk's holder as its process, the OCI profile).
    fn held(&self) -> bool {
        matches!(self, Invocation::Detach | Invocation::Restore { .. })
    }
}

/// Everything `launch::Launch` needs besides the plan and the stdio.
pub struct Prepared {
    pub layout: Layout,
    pub dir: RunDir,
    pub bin: CString,
    pub argv: CStrArray,
    pub envp: CStrArray,
    pub user_ns: Option<UserNs>,
    pub expose: Expose,
    /// The run's log, open for appending and owned by runsc's user: runsc
    /// writes it through `--debug-log` (run) or as its stdout and stderr
    /// (detach).
    pub log: std::fs::File,
}

fn err(step: Phase, message: String) -> ErrorReport {
    ErrorReport::new(step, message)
}

pub fn prepare(plan: &Plan, cfg: &RunscConfig, how: Invocation) -> Result<Prepared, ErrorReport> {
    let layout = layout::layout(&plan.mounts);
    // A run's command loads the compiled filter itself, through husk's
    // helper (`helper::exec`): runsc's `--oci-seccomp` answers EPERM for
    // every errno rule. A held sandbox's init (husk's holder) runs under
    // the OCI profile; each exec loads the compiled filter too. A profile
    // that cannot be rendered is refused, never dropped (fail closed).
    let profile = match (&plan.seccomp, &how) {
        (Some(p), how) if how.held() => Some(p.profile_json().ok_or_else(|| {
            err(Phase::Seccomp, format!("cannot read seccomp profile {} to hand it to runsc", p.name))
        })?),
        _ => None,
    };
    let dir = RunDir { path: config::runs_dir(&cfg.state).join(&plan.id), keep: false };
    let masked_file = dir.masked_file().display().to_string();
    let inputs = bundle::Inputs { plan, layout: &layout, seccomp: profile.as_ref(), masked_file: &masked_file };
    let mut config = bundle::render(&inputs).map_err(|e| err(Phase::Bundle, e.to_string()))?;
    let mut process = config.process().clone().ok_or_else(|| err(Phase::Bundle, "no process in the bundle".into()))?;
    match (&how, &plan.seccomp) {
        // Nothing from the image keeps the sandbox alive: husk's holder does.
        (how, _) if how.held() => {
            process.set_args(Some(helper::hold_argv()));
        }
        (Invocation::Run { marker, .. }, Some(p)) => {
            let cmd = process.args().clone().unwrap_or_default();
            process.set_args(Some(helper::exec_argv(marker, &p.to_bytes(), &cmd)));
        }
        _ => {}
    }
    config.set_process(Some(process));

    let state_err = |message: String| {
        ErrorReport::new(Phase::StateDir, message)
            .with_hint("pass --state-dir DIR (or HUSK_STATE_DIR) with a writable directory".to_string())
    };
    let state_io = |message: String, e: std::io::Error| state_err(format!("{message}: {e}")).with_errno(io_errno(&e));
    let runsc_err = |e: config::RunscError| state_err(e.to_string()).with_errno(e.errno());
    cfg.ensure_runsc_root().map_err(runsc_err)?;
    config::ensure_dir(&dir.path).map_err(runsc_err)?;
    let write = |p: PathBuf, data: Vec<u8>| {
        std::fs::write(&p, data).map_err(|e| state_io(format!("writing {}", p.display()), e))
    };
    // Who owns the run: `husk gc` leaves it alone while that process lives.
    write(dir.owner(), gc::Owner::me().to_line().into_bytes())?;
    write(dir.config(), serde_json::to_vec_pretty(&config).unwrap_or_default())?;
    write(dir.masked_file(), Vec::new())?;
    std::fs::set_permissions(dir.masked_file(), std::os::unix::fs::PermissionsExt::from_mode(0o444))
        .map_err(|e| state_io(format!("chmod {}", dir.masked_file().display()), e))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.log())
        .map_err(|e| state_io(format!("opening {}", dir.log().display()), e))?;

    let path = |p: &Path| p.display().to_string();
    let mut argv: Vec<String> = vec![path(&cfg.bin)];
    argv.extend(cfg.global_args(plan.network));
    if matches!(how, Invocation::Restore { .. }) {
        // runsc (2022-12) refuses `restore` with --rootless. Its only effect
        // on a start here (runsc already runs as root of husk's user
        // namespace, which maps no host root) is to re-exec runsc in a new
        // user namespace when it is not root, which it is: dropped, the
        // restore runs exactly as confined as the start.
        argv.retain(|a| a != "--rootless");
    }
    if profile.is_some() {
        argv.push("--oci-seccomp".into());
    }
    let mut exposed = vec![cfg.runsc_root(), dir.path.clone()];
    match how {
        Invocation::Run { debug, .. } => {
            // Only `run` logs unless debugging: the line "Exiting with
            // status: N" is the command's raw wait status (runsc's own exit
            // code folds a signal into 128+N, like a command that exits
            // 128+N), and a failure's message lands there too.
            argv.push(format!("--debug-log={}", path(&dir.log())));
            if debug {
                argv.extend(["--debug".into(), "--debug-command=run,boot,gofer".into()]);
            } else {
                argv.push("--debug-command=run".into());
            }
            argv.push("run".into());
        }
        Invocation::Detach => argv.extend(["run".into(), "--detach".into()]),
        Invocation::Restore { image_dir } => {
            argv.extend(["restore".into(), "--detach".into(), "--image-path".into(), path(&image_dir)]);
            // runsc restore, as the sandbox's mapped root, opens the image.
            exposed.push(image_dir);
        }
    }
    argv.extend(["--bundle".into(), path(&dir.path), "--pid-file".into(), path(&dir.pid_file())]);
    argv.push(plan.id.clone());
    let cstr = |s: &str| CString::new(s).map_err(|_| err(Phase::RunscArgs, format!("NUL byte in {s:?}")));
    let argv = CStrArray::new(argv.iter().map(|a| cstr(a)).collect::<Result<_, _>>()?);
    let envp = CStrArray::new(vec![cstr(&format!("PATH={}", crate::plan::DEFAULT_PATH))?]);
    let bin = cstr(&path(&cfg.bin))?;

    let user_ns = super::user_ns(cfg.mode, plan);
    if let (Mode::Root, Some(uid), Some(gid)) = (cfg.mode, plan.ids.host_uid_of(0), super::host_gid_of_root(plan)) {
        // runsc runs as the sandbox's mapped root: it writes its state, the
        // pid file and the log there.
        for d in [cfg.runsc_root(), dir.path.clone(), dir.log()] {
            std::os::unix::fs::chown(&d, Some(uid), Some(gid))
                .map_err(|e| state_io(format!("chown {} to {uid}:{gid}", d.display()), e))?;
        }
    }
    let staging = PathBuf::from(plan.mounts.staging.to_string_lossy().into_owned());
    exposed.extend(cfg.bin.parent().filter(|d| d.starts_with(&staging)).map(Path::to_path_buf));
    let expose = Expose::new(cfg.state.clone(), &exposed);
    if cfg.mode == Mode::Root {
        expose.open().map_err(|(p, e)| {
            ErrorReport::new(Step::OpenSources, format!("cloning {} for runsc: {e}", p.display())).with_errno(e)
        })?;
    }
    Ok(Prepared { layout, dir, bin, argv, envp, user_ns, expose, log })
}
