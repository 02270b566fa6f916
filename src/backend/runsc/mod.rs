//! The runsc backend: the same `Plan` run under gVisor, a user-space kernel
//! between the command and the host's. husk builds the root exactly as the
//! native backend would (in a private mount namespace of runsc's child),
//! renders the plan as an OCI bundle, runs `runsc run`, and maps what runsc
//! reports onto the same `Outcome`. Sandboxes that live: `live`.

pub mod bundle;
pub mod checkpoint;
pub mod config;
pub mod copy;
pub mod gc;
pub mod helper;
pub mod launch;
pub mod layout;
pub mod limits;
pub mod live;
pub mod outcome;
pub mod prepare;
pub mod tty;

use super::{Backend, Live, RunIo};
use crate::isolation::{Isolation, RunscReport};
use crate::outcome::{ErrorReport, Outcome};
use crate::plan::Plan;
use crate::seccomp::SeccompReport;
use crate::spawn::{ChildStdio, now_ns};
use crate::spec::NetworkMode;
use crate::step::Phase;
use crate::supervise::{Stop, Watch, signal_fd};
use crate::userns::UserMapping;
use config::{Mode, RunscConfig};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};

pub struct Runsc {
    pub cfg: RunscConfig,
}

impl Runsc {
    pub fn new(cfg: RunscConfig) -> Runsc {
        Runsc { cfg }
    }
}

impl Backend for Runsc {
    fn name(&self) -> &'static str {
        "runsc"
    }

    fn isolation(&self, plan: &Plan) -> Isolation {
        let mut namespaces = vec!["pid", "ipc", "uts", "mount"];
        if plan.network == NetworkMode::None {
            namespaces.push("net");
        }
        let user_mapping = match (self.cfg.mode, user_ns(self.cfg.mode, plan)) {
            (mode, Some(ns)) => UserMapping {
                gid_map: ns.gid_map.trim().to_string(),
                mode: if mode == Mode::Root { "privileged" } else { "rootless" }.into(),
                sandbox_root_host_uid: match mode {
                    Mode::Root => plan.ids.host_uid_of(0),
                    Mode::Rootless { uid, .. } => Some(uid),
                    Mode::NamespaceRoot => None,
                },
                uid_map: ns.uid_map.trim().to_string(),
            },
            (_, None) => UserMapping {
                gid_map: std::fs::read_to_string("/proc/self/gid_map").unwrap_or_default().trim().to_string(),
                mode: "rootless".into(),
                sandbox_root_host_uid: None,
                uid_map: std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default().trim().to_string(),
            },
        };
        let mut report = super::isolation_report(plan, &namespaces, user_mapping);
        report.kernel = Some("gvisor".into());
        report.runsc = Some(RunscReport {
            cgroups: "runsc, its gofer and sandbox are born in husk's cgroup (runsc itself: --ignore-cgroups)".into(),
            // A run's command loads the compiled filter itself
            // (`helper::exec`); a held sandbox's init gets the OCI one.
            oci_seccomp: plan.seccomp.is_some() && plan.role == crate::plan::InitRole::Hold,
            path: self.cfg.bin.display().to_string(),
            platform: self.cfg.platform.clone(),
            rootless: true,
            version: self.cfg.info.version.clone(),
        });
        report
    }

    /// husk's holder, each exec's reaper and a run's seccomp loader run
    /// from husk's own binary inside gVisor.
    fn prepare_spec(&self, spec: &mut crate::spec::Spec) -> Result<(), ErrorReport> {
        let bind = live::helper_bind().map_err(|e| {
            ErrorReport::new(Phase::Runsc, format!("finding husk's own binary (/proc/self/exe): {e}"))
                .with_errno(crate::step::io_errno(&e))
        })?;
        // A fork's spec is its source's, which has it already.
        if !spec.binds.contains(&bind) {
            spec.binds.push(bind);
        }
        Ok(())
    }

    fn create(
        &self,
        plan: &mut Plan,
        cgroup: Option<&dyn crate::cgroup::CgroupJoin>,
    ) -> Result<Box<dyn Live>, ErrorReport> {
        Ok(Box::new(live::start(plan, self.cfg.clone(), cgroup)?))
    }

    fn create_restored(
        &self,
        plan: &mut Plan,
        cgroup: Option<&dyn crate::cgroup::CgroupJoin>,
        dir: &std::path::Path,
    ) -> Result<Box<dyn Live>, ErrorReport> {
        checkpoint::image_of(dir).map_err(|e| ErrorReport::new(crate::step::Phase::Runsc, e.to_string()))?;
        let how = prepare::Invocation::Restore { image_dir: dir.to_path_buf() };
        Ok(Box::new(live::start_as(plan, self.cfg.clone(), cgroup, how)?))
    }

    /// `--pids` and `--memory` split between gVisor and the host cgroup
    /// (see `limits`).
    fn adapt(&self, plan: &mut Plan) -> Result<(), ErrorReport> {
        if plan.process.tty {
            return Err(no_tty());
        }
        // runsc's gofer serves a bind as its own root, not as the
        // command's user, and fails on ids an idmapped bind leaves
        // unmapped: its :rw binds stay plain binds.
        plan.mounts.unfold_binds();
        limits::adapt_plan(plan)
            .map_err(|e| ErrorReport::new(crate::step::Phase::Limits, e.to_string()).with_hint(e.hint()))
    }

    /// An exec's processes live in the sentry, in the sandbox's `init` leaf.
    fn exec_leaves(&self) -> bool {
        false
    }

    fn run(&self, mut plan: Plan, io: RunIo<'_>) -> Outcome {
        layout::scaffold_mount_points(&mut plan.mounts);
        let mut outcome = match self.run_runsc(&plan, io) {
            Ok(o) => o,
            Err(e) => Outcome::setup_failed(e),
        };
        outcome.duration_ms = crate::outcome::round3(now_ns().saturating_sub(io.t_start) as f64 / 1e6);
        outcome
    }
}

/// `husk run -t` under gVisor is refused before anything starts, never
/// half made. (`husk exec -t` into a gVisor sandbox works: the reaper
/// makes the pty inside gVisor, `tty`; a run's command is started by
/// `runsc run`, which has no such reaper yet.)
pub(crate) fn no_tty() -> ErrorReport {
    ErrorReport::new(
        crate::step::Phase::Backend,
        "husk run -t/--tty is not supported by the runsc backend (gVisor) yet (husk exec -t into a gVisor sandbox is)",
    )
    .with_hint(Some(
        "drop -t, run under --runtime native, or `husk create --runtime runsc` and `husk exec -t ID -- CMD`".into(),
    ))
}

/// runsc's user namespace: as root, the sandbox's id range exactly as the
/// native backend maps it; rootless, the invoking user as its root; inside
/// a user namespace already, none (husk is root there).
pub(crate) fn user_ns(mode: Mode, plan: &Plan) -> Option<launch::UserNs> {
    match mode {
        Mode::Root => Some(launch::UserNs {
            uid_map: plan.ids.uid_map.clone(),
            gid_map: plan.ids.gid_map.clone(),
            deny_setgroups: plan.ids.deny_setgroups,
        }),
        Mode::Rootless { uid, gid } => Some(launch::UserNs {
            uid_map: format!("0 {uid} 1\n"),
            gid_map: format!("0 {gid} 1\n"),
            deny_setgroups: true,
        }),
        Mode::NamespaceRoot => None,
    }
}

pub(crate) fn host_gid_of_root(plan: &Plan) -> Option<u32> {
    match &plan.ids.mode {
        crate::userns::IdMode::Privileged { gid_range, .. } => Some(gid_range.base),
        crate::userns::IdMode::Rootless { host_gid, .. } => Some(*host_gid),
    }
}

/// husk's files for one run: the bundle, runsc's pid file and log, and who
/// owns the run (for `husk gc`).
pub struct RunDir {
    pub path: PathBuf,
    /// Left in place (HUSK_RUNSC_DEBUG); `husk gc` removes it later.
    pub keep: bool,
}

impl RunDir {
    pub fn config(&self) -> PathBuf {
        self.path.join("config.json")
    }
    pub fn log(&self) -> PathBuf {
        self.path.join("runsc.log")
    }
    pub fn pid_file(&self) -> PathBuf {
        self.path.join("sandbox.pid")
    }
    pub fn owner(&self) -> PathBuf {
        self.path.join("owner")
    }
    /// Empty and read-only: what the sandbox sees at /dev/fuse.
    pub fn masked_file(&self) -> PathBuf {
        self.path.join("masked")
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// `runsc kill` / `runsc delete` for one container.
pub struct Ctl<'a> {
    pub cfg: &'a RunscConfig,
    pub network: NetworkMode,
    pub id: &'a str,
}

impl Ctl<'_> {
    /// Runs `runsc <global flags> <args>`; Err carries runsc's message.
    pub fn runsc(&self, args: &[&str]) -> Result<(), CtlError> {
        let mut cmd = Command::new(&self.cfg.bin);
        cmd.args(self.cfg.global_args(self.network)).args(args);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        crate::sys::command::die_with_parent(&mut cmd);
        let out = cmd.output().map_err(|source| CtlError::Spawn { bin: self.cfg.bin.clone(), source })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(CtlError::Refused {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })
        }
    }
}

/// A `runsc` control command (kill, delete) that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    #[error("running {}: {source}", bin.display())]
    Spawn { bin: PathBuf, source: std::io::Error },
    #[error("runsc {args}: {stderr}")]
    Refused { args: String, stderr: String },
}

impl CtlError {
    /// runsc no longer knows the container (it is gone already).
    pub fn not_found(&self) -> bool {
        matches!(self, CtlError::Refused { stderr, .. } if stderr.contains("does not exist") || stderr.contains("not found"))
    }
}

impl Stop for Ctl<'_> {
    fn signal(&self, sig: i32) {
        let _ = self.runsc(&["kill", self.id, &sig.to_string()]);
    }

    fn kill_all(&self) -> bool {
        self.runsc(&["kill", "--all", self.id, "KILL"]).is_ok()
    }
}

/// When husk's stdout or stderr (`fd`) is a regular file not opened for
/// appending, sets O_APPEND on it for the run and returns true. gVisor
/// writes a donated regular file at an offset of its own, starting at 0,
/// and never moves the shared one: `{ echo a; husk run ...; echo b; } > f`
/// would lose `a` under the command's output and that under `b`. With
/// O_APPEND the command's writes land at the end; `restore_stdio` then
/// clears the flag and moves the shared offset after them. (Reopening the
/// file instead needs permission on it, which a rootless husk writing to
/// someone else's file does not have.)
pub(crate) fn set_append(fd: i32) -> bool {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use nix::sys::stat::{SFlag, fstat};
    let Ok(st) = with_stdio(fd, |b| fstat(b)) else { return false };
    let Ok(flags) = with_stdio(fd, |b| fcntl(b, FcntlArg::F_GETFL)) else { return false };
    let flags = OFlag::from_bits_truncate(flags);
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG || flags.contains(OFlag::O_APPEND) {
        return false;
    }
    with_stdio(fd, |b| fcntl(b, FcntlArg::F_SETFL(flags | OFlag::O_APPEND))).is_ok()
}

/// Undoes `set_append` on drop.
pub(crate) struct AppendGuard(pub(crate) [bool; 2]);

impl Drop for AppendGuard {
    fn drop(&mut self) {
        for (fd, set) in [1, 2].into_iter().zip(self.0) {
            if set {
                restore_stdio(fd);
            }
        }
    }
}

fn restore_stdio(fd: i32) {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    if let Ok(flags) = with_stdio(fd, |b| fcntl(b, FcntlArg::F_GETFL)) {
        let flags = OFlag::from_bits_truncate(flags) - OFlag::O_APPEND;
        let _ = with_stdio(fd, |b| fcntl(b, FcntlArg::F_SETFL(flags)));
    }
    let _ = with_stdio(fd, |b| nix::unistd::lseek(b, 0, nix::unistd::Whence::SeekEnd));
}

/// Calls `f` with husk's own stdout (1) or stderr (2).
fn with_stdio<T>(fd: i32, f: impl FnOnce(std::os::fd::BorrowedFd<'_>) -> T) -> T {
    use std::os::fd::AsFd;
    match fd {
        2 => f(std::io::stderr().as_fd()),
        _ => f(std::io::stdout().as_fd()),
    }
}

impl Runsc {
    fn run_runsc(&self, plan: &Plan, io: RunIo<'_>) -> Result<Outcome, ErrorReport> {
        let cfg = &self.cfg;
        // HUSK_RUNSC_DEBUG=1: every runsc process logs in detail to the
        // run's log, and the run directory is kept for reading it.
        let debug = std::env::var_os("HUSK_RUNSC_DEBUG").is_some_and(|v| !v.is_empty() && v != "0");
        // Tags an exec failure on captured stderr (`helper::exec`).
        let marker = match io.capture {
            Some(_) => crate::ids::random_hex(16),
            None => "-".to_string(),
        };
        let p = prepare::prepare(plan, cfg, prepare::Invocation::Run { debug, marker: marker.clone() })?;
        let prepare::Prepared { layout, mut dir, bin, argv, envp, user_ns, expose, log: _ } = p;
        if cfg.mode == Mode::Root {
            // Host trees are cloned here, as host root, so runsc's mapped
            // root needs no search permission on their parents.
            crate::spawn::open_sources(plan).map_err(crate::backend::native::spawn_error)?;
        }

        let sys_err = |what: &str| {
            let what = what.to_string();
            move |e: nix::errno::Errno| ErrorReport::new(Phase::Stdio, format!("{what}: {e}")).with_errno(e)
        };
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys_err("creating capture pipes"));
        type Pipe = Option<(OwnedFd, OwnedFd)>;
        let (out, err): (Pipe, Pipe) = match io.capture {
            Some(_) => (Some(pipe()?), Some(pipe()?)),
            None => (None, None),
        };
        let stdio = ChildStdio {
            stdin: None,
            stdout: out.as_ref().map(|(_, w)| w.as_raw_fd()),
            stderr: err.as_ref().map(|(_, w)| w.as_raw_fd()),
        };
        let signals = signal_fd(false).map_err(sys_err("blocking forwarded signals"))?;
        // runsc's gofer and sandbox become husk's children if runsc dies
        // first, so husk can reap (and, if need be, kill) them.
        nix::sys::prctl::set_child_subreaper(true).map_err(sys_err("PR_SET_CHILD_SUBREAPER"))?;

        dir.keep = debug;
        let l = launch::Launch { plan, layout: &layout, bin, argv, envp, stdio, user_ns, expose };
        // Restored when this function returns, on every path.
        let _append = AppendGuard(match io.capture {
            Some(_) => [false, false],
            None => [set_append(1), set_append(2)],
        });
        // The run's cgroup: runsc, its gofer and its sandbox are all born in
        // it, so limits bound the whole gVisor sandbox (the sentry's own
        // memory included) and the group kill reaches every one of them.
        let t_cg = now_ns();
        let cgroup = plan
            .cgroup
            .create(&plan.id)
            .map_err(|e| ErrorReport::new(Phase::Cgroup, e.to_string()).with_errno(e.errno()))?;
        let cg_setup_ms = crate::outcome::round3(now_ns().saturating_sub(t_cg) as f64 / 1e6);
        let launched = launch::spawn(&l, cgroup.as_ref().map(|c| c as &dyn crate::cgroup::CgroupJoin))
            .map_err(ErrorReport::from)?;
        drop(l);
        let limit = io.capture.unwrap_or(0);
        let ctl = Ctl { cfg, network: plan.network, id: &plan.id };
        let watched = Watch {
            pidfd: &launched.pidfd,
            chan: &launched.chan,
            signals: &signals,
            stdout: out.map(|(r, _w)| (r, limit)),
            stderr: err.map(|(r, _w)| (r, limit)),
            timeout: plan.timeout,
            kill_grace: plan.kill_grace,
            group: cgroup.as_ref().map(|c| c as &dyn crate::cgroup::GroupKill),
            seccomp: None,
            stop: Some(&ctl),
            tap: io.tap,
            redact: io.redact,
            tty: None,
            status: crate::supervise::StatusFrom::Wait,
        }
        .run();

        // Teardown: nothing of runsc's may outlive the run.
        outcome::reap_descendants();
        let log = std::fs::read_to_string(dir.log()).map(|t| outcome::parse_log(&t)).unwrap_or_default();
        let mut cleanup_errors = Vec::new();
        if log.status.is_none() && watched.failed.is_none() {
            // runsc did not finish on its own (killed, or failed midway):
            // its state may still name the container.
            let mut report = gc::RunscGcReport::default();
            gc::delete(cfg, &plan.id, &mut report);
            cleanup_errors.extend(report.errors);
        }
        let t_end = now_ns();
        let mut o = outcome::outcome_of(plan, &watched, &log, launched.t_clone, io.t_start, t_end);
        outcome::exec_failure(plan, &marker, &mut o);
        match cgroup {
            Some(c) => {
                let t = now_ns();
                let report = c.finish();
                o.phases_ms.insert("cgroup_setup", cg_setup_ms);
                o.phases_ms.insert("cgroup_teardown", crate::outcome::round3(now_ns().saturating_sub(t) as f64 / 1e6));
                o.add_cgroup(report);
            }
            None => o.no_cgroup(),
        }
        if o.termination != crate::outcome::Termination::SetupFailed || o.seccomp.is_none() {
            let applied = SeccompReport::applied(plan.seccomp.as_ref());
            o.seccomp = Some(applied.enforced_by("gvisor (loaded inside the sandbox by husk's helper)"));
        }
        if let (Some(e), false) = (&mut o.error, cleanup_errors.is_empty()) {
            e.message.push_str(&format!(" (cleanup: {})", cleanup_errors.join("; ")));
        }
        Ok(o)
    }
}
