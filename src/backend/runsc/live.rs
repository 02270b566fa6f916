//! Sandboxes that live under gVisor (`husk create --runtime runsc`).
//!
//! The supervisor builds the root exactly as `husk run --runtime runsc`
//! does (in a private mount namespace of runsc's child, `launch::spawn`,
//! born in the sandbox's cgroup) and runs `runsc run --detach` of a bundle
//! whose process is husk's own holder (`helper::hold`, the static husk
//! binary bound read-only at `/.husk`): nothing from the image is needed
//! to keep the sandbox alive. runsc exits once the sandbox runs; its gofer
//! and sandbox (the sentry) are reparented to the supervisor, a child
//! subreaper, which watches the sentry's pidfd as a native supervisor
//! watches its init. The mount namespace lives on with the gofer.
//!
//! `husk exec` runs `runsc exec --process` with the exec's user, env,
//! cwd, rlimits, no capabilities and no_new_privs; the process is husk's
//! reaper (`helper::reap`), a child subreaper inside gVisor whose child is
//! the command. A timeout sends the reaper `KILL_TREE` (`runsc kill
//! --pid`), and it kills the command's whole tree (double-forked daemons
//! included: they are reparented to it), leaving the sandbox and other
//! execs' background processes alone.
//!
//! The end (rm, lease, SIGTERM): `runsc kill --all`, the sentry killed and
//! reaped, `runsc delete --force`, every leftover child reaped, the run
//! directory removed; the supervisor then removes the cgroup and state as
//! for native. A SIGKILLed supervisor leaves the sentry running (runsc
//! gives a detached sandbox no death signal): `sandbox::gc::sweep_one` reaps
//! it through `backend::reap_orphan` (`gc::reap_run`), which proves the pid
//! is that sandbox's.

use super::config::{self, RunscConfig};
use super::{self as rb, Ctl, RunDir, bundle, checkpoint, gc, helper, launch, layout, outcome as rout, prepare};
use crate::backend::{Attached, Executed, Live, MemoryImage};
use crate::cgroup::CgroupJoin;
use crate::cgroup::nested::Tree;
use crate::outcome::{ErrorReport, Outcome, Termination};
use crate::plan::{ExecPlan, Plan};
use crate::spawn::{ChildStdio, now_ns};
use crate::spec::NetworkMode;
use crate::step::{Phase, io_errno};
use crate::supervise::{Stop, Watch, signal_fd};
use crate::sync::Msg;
use crate::sys::process::{ExitStatus, decode_wait_status, pidfd_open, pidfd_send_signal, wait_pidfd};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The bind that puts the husk binary (this very file, read-only) at
/// `helper::PATH_IN_SANDBOX`.
pub fn helper_bind() -> std::io::Result<crate::spec::BindSpec> {
    let exe = std::env::current_exe()?;
    Ok(crate::spec::BindSpec {
        source: exe,
        target: helper::PATH_IN_SANDBOX.into(),
        access: crate::spec::Access::ReadOnly,
    })
}

/// A running gVisor sandbox, held by its supervisor.
pub struct RunscLive {
    cfg: RunscConfig,
    network: NetworkMode,
    id: String,
    dir: RunDir,
    /// The sentry (runsc's sandbox process), the supervisor's child.
    pub pid: i32,
    pub pidfd: OwnedFd,
}

/// Bound on `runsc run --detach` (root setup, gofer, sentry boot).
const START_LIMIT: Duration = Duration::from_secs(60);

/// Starts the sandbox (see the module docs). `cgroup`: the sandbox's
/// `init` leaf, which runsc, its gofer and the sentry are born in.
pub fn start(plan: &mut Plan, cfg: RunscConfig, cgroup: Option<&dyn CgroupJoin>) -> Result<RunscLive, ErrorReport> {
    start_as(plan, cfg, cgroup, prepare::Invocation::Detach)
}

/// `start`, or (`Invocation::Restore`) the same sandbox booted from a
/// checkpoint image (checkpoint.rs).
pub fn start_as(
    plan: &mut Plan,
    cfg: RunscConfig,
    cgroup: Option<&dyn CgroupJoin>,
    how: prepare::Invocation,
) -> Result<RunscLive, ErrorReport> {
    // As root, host trees are cloned here, as host root, so runsc's mapped
    // root needs no search permission on their parents.
    crate::spawn::open_sources(plan).map_err(crate::backend::native::spawn_error)?;
    layout::scaffold_mount_points(&mut plan.mounts);
    let plan = &*plan;
    let p = prepare::prepare(plan, &cfg, how)?;
    let prepare::Prepared { layout, dir, bin, argv, envp, user_ns, expose, log } = p;
    // The gofer and the sentry outlive `runsc run --detach`: as its
    // subreaper the supervisor gets them, watches the sentry by pidfd and
    // reaps both.
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| ErrorReport::new(Phase::Subreaper, e.to_string()).with_errno(e))?;
    let stdio = ChildStdio { stdin: None, stdout: Some(log.as_raw_fd()), stderr: Some(log.as_raw_fd()) };
    let l = launch::Launch { plan, layout: &layout, bin, argv, envp, stdio, user_ns, expose };
    let launched = launch::spawn(&l, cgroup)?;
    drop(l);
    let network = plan.network;
    let live = |pid: i32, pidfd: OwnedFd, dir: RunDir| RunscLive {
        cfg: cfg.clone(),
        network,
        id: plan.id.clone(),
        dir,
        pid,
        pidfd,
    };

    // runsc run --detach returns once the sandbox runs (or failed).
    // Whatever of the container runsc made goes, and the adopted gofer and
    // sentry are reaped, before the error is returned.
    let abort = |msg: String, step: Phase, errno: Option<nix::errno::Errno>| {
        let mut report = gc::RunscGcReport::default();
        gc::delete(&cfg, &plan.id, &mut report);
        rout::reap_descendants();
        ErrorReport::new(step, msg).with_errno(errno)
    };
    let deadline = Instant::now() + START_LIMIT;
    let mut failed = None;
    let status = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut fds = [nix::poll::PollFd::new(launched.pidfd.as_fd(), nix::poll::PollFlags::POLLIN)];
        let t = nix::poll::PollTimeout::try_from(left.as_millis().min(60_000) as u64)
            .unwrap_or(nix::poll::PollTimeout::MAX);
        match nix::poll::poll(&mut fds, t) {
            Ok(0) => {
                let _ = pidfd_send_signal(launched.pidfd.as_fd(), libc::SIGKILL);
                let _ = wait_pidfd(launched.pidfd.as_fd());
                return Err(abort("runsc did not start the sandbox within 60s".into(), Phase::RunscRun, None));
            }
            Ok(_) => break wait_pidfd(launched.pidfd.as_fd()),
            Err(_) => continue,
        }
    };
    while let Ok(Some(m)) = launched.chan.recv() {
        if let Msg::Failed(e) = m {
            failed = Some(e);
        }
    }
    if let Some(e) = failed {
        return Err(abort(
            format!("starting runsc failed at {}: {:?}", e.step.name(), e.errno),
            e.step.into(),
            Some(e.errno),
        ));
    }
    if !matches!(status, Ok(ExitStatus::Exited(0))) {
        let text = std::fs::read_to_string(dir.log()).unwrap_or_default();
        return Err(abort(format!("runsc run --detach failed ({status:?}): {}", text.trim()), Phase::RunscRun, None));
    }
    let pid: i32 =
        std::fs::read_to_string(dir.pid_file()).ok().and_then(|t| t.trim().parse().ok()).ok_or_else(|| {
            abort(format!("runsc wrote no sandbox pid to {}", dir.pid_file().display()), Phase::RunscRun, None)
        })?;
    let pidfd = pidfd_open(nix::unistd::Pid::from_raw(pid)).map_err(|e| {
        abort(format!("the gVisor sandbox (pid {pid}) is gone right after its start: {e}"), Phase::RunscRun, Some(e))
    })?;
    Ok(live(pid, pidfd, dir))
}

impl Live for RunscLive {
    fn pid(&self) -> i32 {
        self.pid
    }

    fn pidfd(&self) -> &OwnedFd {
        &self.pidfd
    }

    /// None: execs enter through `runsc exec`.
    fn namespaces(&self) -> &[(&'static str, OwnedFd)] {
        &[]
    }

    /// husk exec's `runsc exec` died with it (PDEATHSIG), but nothing
    /// inside gVisor is tied to either, so the command would run on. If the
    /// exec's files are still there (husk exec removes them before it lets
    /// go of its connection), its reaper is told to SIGKILL the command
    /// (`helper::KILL_COMMAND`); what the command left in the background
    /// keeps running, as natively.
    fn exec_abandoned(&self, exec_id: &str) {
        let files = ExecFiles {
            spec: self.dir.path.join(format!("exec-{exec_id}.json")),
            pid: self.dir.path.join(format!("exec-{exec_id}.pid")),
            log: self.dir.path.join(format!("exec-{exec_id}.log")),
        };
        if !files.spec.exists() {
            return;
        }
        let ctl = Ctl { cfg: &self.cfg, network: self.network, id: &self.id };
        let stop = ExecStop { ctl, pid_file: files.pid.clone() };
        if let Some(p) = stop.pid() {
            let sig = (helper::KILL_COMMAND as i32).to_string();
            let _ = stop.ctl.runsc(&["kill", "--pid", &p, &self.id, &sig]);
        }
    }

    /// gVisor first (runsc kill --all, delete), while its sentry runs; then
    /// the cgroup, for whatever runsc left.
    fn stop(self: Box<Self>, kill_group: &dyn Fn()) {
        self.destroy();
        kill_group();
    }

    fn pause_kind(&self) -> crate::backend::PauseKind {
        crate::backend::PauseKind::Checkpoint
    }

    /// `runsc checkpoint` (checkpoint.rs). The sentry exits once the
    /// image is written: it and the gofer (the supervisor's adopted
    /// children) are reaped and runsc's container state deleted, so
    /// `restore` can make the container again under its id; the run
    /// directory (bundle) stays for it.
    fn checkpoint(&mut self, plan: &Plan, dir: &Path) -> Result<MemoryImage, ErrorReport> {
        if let Some(e) = checkpoint::unsupported(plan) {
            return Err(ErrorReport::new(Phase::Runsc, e.to_string()));
        }
        let saved = checkpoint::save(&self.cfg, self.network, &self.id, dir)
            .map_err(|e| ErrorReport::new(Phase::Runsc, e.to_string()))?;
        let _ = pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL);
        rout::reap_descendants();
        let mut report = gc::RunscGcReport::default();
        gc::delete(&self.cfg, &self.id, &mut report);
        Ok(saved)
    }

    /// `runsc restore --detach` through the same launch as the start:
    /// the root staged afresh (new clones of its host trees: the old ones
    /// were attached in runsc's mount namespace, gone with its gofer).
    fn restore(&mut self, plan: &mut Plan, dir: &Path, cgroup: Option<&dyn CgroupJoin>) -> Result<(), ErrorReport> {
        checkpoint::image_of(dir).map_err(|e| ErrorReport::new(Phase::Runsc, e.to_string()))?;
        plan.mounts.forget_trees();
        let how = prepare::Invocation::Restore { image_dir: dir.to_path_buf() };
        let new = start_as(plan, self.cfg.clone(), cgroup, how)?;
        let mut old = std::mem::replace(self, new);
        // The run directory is the same path, the new sandbox's now.
        old.dir.keep = true;
        Ok(())
    }
}

impl RunscLive {
    /// Ends the sandbox: every process in it, the sentry, runsc's state,
    /// every child the supervisor adopted (the gofer), the run directory.
    /// Returns what could not be cleaned.
    pub fn destroy(self) -> Vec<String> {
        let ctl = Ctl { cfg: &self.cfg, network: self.network, id: &self.id };
        let _ = ctl.runsc(&["kill", "--all", &self.id, "KILL"]);
        // The sentry and the gofer are our children (adopted), and our only
        // ones: killed and reaped here, before `runsc delete`, which takes
        // an unreaped zombie for a live process and waits 5 s for it.
        let _ = pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL);
        rout::reap_descendants();
        let mut report = gc::RunscGcReport::default();
        gc::delete(&self.cfg, &self.id, &mut report);
        // Removes the bundle, log and pid file.
        drop(self.dir);
        report.errors
    }
}

/// Reaches the exec's reaper inside gVisor by its sandbox pid.
struct ExecStop<'a> {
    ctl: Ctl<'a>,
    pid_file: PathBuf,
}

impl ExecStop<'_> {
    /// The reaper's pid inside the sandbox (written by `runsc exec` once
    /// the process started; waited for briefly).
    fn pid(&self) -> Option<String> {
        for _ in 0..100 {
            if let Some(p) = std::fs::read_to_string(&self.pid_file)
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok())
                .filter(|p| *p > 0)
            {
                return Some(p.to_string());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

impl Stop for ExecStop<'_> {
    fn signal(&self, sig: i32) {
        if let Some(p) = self.pid() {
            let _ = self.ctl.runsc(&["kill", "--pid", &p, self.ctl.id, &sig.to_string()]);
        }
    }

    fn kill_all(&self) -> bool {
        let sig = (helper::KILL_TREE as i32).to_string();
        self.pid().is_some_and(|p| self.ctl.runsc(&["kill", "--pid", &p, self.ctl.id, &sig]).is_ok())
    }
}

/// husk exec's pty for `-t` under gVisor (`super::tty`) and the reaper's
/// stdin (`to_runsc`: read end, write end) and stdout (`from_runsc`).
struct HostPty {
    master: OwnedFd,
    slave: OwnedFd,
    to_runsc: (OwnedFd, OwnedFd),
    from_runsc: (OwnedFd, OwnedFd),
}

fn host_pty() -> Result<HostPty, nix::errno::Errno> {
    use std::os::fd::AsFd as _;
    let ws = crate::tty::terminal::size_of_any([std::io::stdin().as_fd(), std::io::stdout().as_fd()]);
    let pty = nix::pty::openpty(ws.as_ref(), None)?;
    for fd in [&pty.master, &pty.slave] {
        nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))?;
    }
    let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC);
    Ok(HostPty { master: pty.master, slave: pty.slave, to_runsc: pipe()?, from_runsc: pipe()? })
}

/// OOM kills counted by the sandbox's cgroup or its `init` leaf, where the
/// sentry lives (v2 `memory.events`; v1 `memory.oom_control`, which counts
/// only in the killed task's own cgroup).
fn oom_kills(cgroup: Option<&Tree>) -> u64 {
    cgroup
        .iter()
        .flat_map(|t| &t.dirs)
        .flat_map(|d| [d.path.clone(), d.path.join("init")])
        .flat_map(|d| ["memory.events", "memory.oom_control"].map(|f| d.join(f)))
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|t| t.lines().find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse::<u64>().ok()))
        .max()
        .unwrap_or(0)
}

fn ms(from: u64, to: u64) -> f64 {
    crate::outcome::round3(to.saturating_sub(from) as f64 / 1e6)
}

/// One exec's files in the sandbox's run directory, removed on drop.
struct ExecFiles {
    spec: PathBuf,
    pid: PathBuf,
    log: PathBuf,
}

impl Drop for ExecFiles {
    fn drop(&mut self) {
        for p in [&self.spec, &self.pid, &self.log] {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Runs one exec under `runsc exec` (see the module docs) and maps what
/// runsc reports onto the same `Outcome` as a native exec.
pub fn exec(plan: &ExecPlan, at: Attached<'_>) -> Executed {
    let exec_id = at.exec_id.map(str::to_string).unwrap_or_else(crate::ids::new_id);
    let outcome = exec_as(plan, &at, &exec_id);
    Executed { exec_id, outcome, backend: "runsc" }
}

fn exec_as(plan: &ExecPlan, at: &Attached<'_>, exec_id: &str) -> Outcome {
    let (process, workdir, seccomp, t_start) = (&plan.process, &plan.workdir, plan.seccomp.as_ref(), plan.t_start);
    let id = at.sandbox_id;
    let failed = |step: Phase, message: String, errno: Option<nix::errno::Errno>| {
        let mut o = Outcome::setup_failed(ErrorReport::new(step, message).with_errno(errno));
        o.duration_ms = ms(t_start, now_ns());
        o
    };
    let tty = process.tty;
    let cfg = match RunscConfig::resolve(&at.spec.runsc, at.state_dir) {
        Ok(c) => c,
        Err(e) => return failed(Phase::Runsc, e.to_string(), e.errno()),
    };
    let dir = config::runs_dir(at.state_dir).join(id);
    let files = ExecFiles {
        spec: dir.join(format!("exec-{exec_id}.json")),
        pid: dir.join(format!("exec-{exec_id}.pid")),
        log: dir.join(format!("exec-{exec_id}.log")),
    };
    // gVisor applies the OCI profile (--oci-seccomp) to the container's
    // init only, not to processes `runsc exec` starts: the reaper loads the
    // sandbox's own compiled filter into the command itself.
    let mut args = helper::reap_argv(process.caps_keep, seccomp.map(|p| p.to_bytes()).as_deref(), &plan.argv);
    if tty {
        // -t: the reaper makes the pty inside gVisor (`super::tty`), sized
        // as the user's terminal is now.
        use std::os::fd::AsFd as _;
        let ws = crate::tty::terminal::size_of_any([std::io::stdin().as_fd(), std::io::stdout().as_fd()]);
        let (r, c) = ws.map(|w| (w.ws_row, w.ws_col)).unwrap_or((0, 0));
        args[2] = format!("reap-tty:{r}x{c}");
    }
    let caps = process.caps_keep | helper::REAPER_CAPS;
    let nproc = super::limits::workload_nproc_of(at.limits);
    let spec = match bundle::process_with_caps(process, args, workdir.to_string(), caps, plan.last_cap, nproc) {
        Ok(p) => p,
        Err(e) => return failed(Phase::Bundle, e.to_string(), None),
    };
    if let Err(e) = std::fs::write(&files.spec, serde_json::to_vec(&spec).unwrap_or_default()) {
        return failed(Phase::State, format!("writing {}: {e}", files.spec.display()), io_errno(&e));
    }
    let mut cmd = std::process::Command::new(&cfg.bin);
    cmd.args(cfg.global_args(at.spec.network));
    if seccomp.is_some() {
        cmd.arg("--oci-seccomp");
    }
    // Only exec logs: "Exiting with status: N" is the reaper's raw wait
    // status, which is the command's (the reaper ends as it did).
    cmd.arg(format!("--debug-log={}", files.log.display())).arg("--debug-command=exec");
    cmd.arg("exec").arg("--process").arg(&files.spec).arg("--internal-pid-file").arg(&files.pid).arg(id);
    // Terminal signals reach husk only, which forwards them to the command.
    cmd.process_group(0);
    crate::sys::command::die_with_parent(&mut cmd);

    // -t: husk's own pty (its master to the watch's relay, its slave
    // relayed to the reaper's pipes by a thread) and those pipes.
    let host_tty = match tty.then(host_pty) {
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => return failed(Phase::Step(crate::step::Step::OpenPty), format!("a pty for -t: {e}"), Some(e)),
        None => None,
    };
    if let Some(t) = &host_tty {
        match (t.to_runsc.0.try_clone(), t.from_runsc.1.try_clone()) {
            (Ok(i), Ok(o)) => {
                let e = o.try_clone().map(std::process::Stdio::from).unwrap_or_else(|_| std::process::Stdio::null());
                cmd.stdin(std::process::Stdio::from(i)).stdout(std::process::Stdio::from(o)).stderr(e);
            }
            (Err(e), _) | (_, Err(e)) => return failed(Phase::Stdio, format!("-t pipes: {e}"), io_errno(&e)),
        }
    }
    let signals = match signal_fd(tty) {
        Ok(s) => s,
        Err(e) => return failed(Phase::Signals, format!("blocking forwarded signals: {e}"), Some(e)),
    };
    let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC);
    let (out, err) = match plan.capture {
        Some(_) if !tty => match (pipe(), pipe()) {
            (Ok(o), Ok(e)) => (Some(o), Some(e)),
            (Err(e), _) | (_, Err(e)) => return failed(Phase::Stdio, format!("creating capture pipes: {e}"), Some(e)),
        },
        _ => (None, None),
    };
    let stdio = |p: &Option<(OwnedFd, OwnedFd)>| match p {
        Some((_, w)) => w.try_clone().map(std::process::Stdio::from).unwrap_or_else(|_| std::process::Stdio::null()),
        None => std::process::Stdio::inherit(),
    };
    if !tty {
        cmd.stdout(stdio(&out)).stderr(stdio(&err));
    }
    // gVisor writes a donated regular file at its own offset: append.
    let _append = rb::AppendGuard(match plan.capture {
        _ if tty => [false, false],
        Some(_) => [false, false],
        None => [rb::set_append(1), rb::set_append(2)],
    });
    let ooms_before = oom_kills(at.cgroup);
    let t_spawn = now_ns();
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return failed(Phase::RunscExec, format!("running {}: {e}", cfg.bin.display()), io_errno(&e)),
    };
    drop(cmd);
    // A std child: its pid is ours until the watch reaps it.
    let pidfd = match pidfd_open(nix::unistd::Pid::from_raw(child.id() as i32)) {
        Ok(fd) => fd,
        Err(e) => return failed(Phase::RunscExec, format!("pidfd_open: {e}"), Some(e)),
    };
    let (chan, tty_thread) = match crate::sync::Channel::pair() {
        Ok((a, b)) => match host_tty {
            // The master goes to the watch as a native command's does.
            Some(t) => match b
                .send_fd(Msg::PtyMaster, t.master.as_fd())
                .map_err(std::io::Error::from)
                .and_then(|()| super::tty::host_side(t.slave, t.to_runsc.1, t.from_runsc.0))
            {
                Ok(h) => (a, Some(h)),
                Err(e) => {
                    let _ = pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
                    return failed(Phase::Stdio, format!("relaying -t: {e}"), io_errno(&e));
                }
            },
            None => (a, None),
        },
        Err(e) => return failed(Phase::SyncChannel, e.to_string(), Some(e)),
    };
    let limit = plan.capture.unwrap_or(0);
    let stop = ExecStop { ctl: Ctl { cfg: &cfg, network: at.spec.network, id }, pid_file: files.pid.clone() };
    let watched = Watch {
        pidfd: &pidfd,
        chan: &chan,
        signals: &signals,
        stdout: out.map(|(r, _w)| (r, limit)),
        stderr: err.map(|(r, _w)| (r, limit)),
        timeout: plan.timeout,
        kill_grace: plan.kill_grace,
        group: None,
        seccomp: None,
        stop: Some(&stop),
        tap: at.tap,
        redact: at.redact,
        tty: crate::tty::relay::TtyOutput::of(tty, plan.capture),
        status: crate::supervise::StatusFrom::Wait,
    }
    .run();
    drop(child);
    if let Some(h) = tty_thread {
        let _ = h.join();
    }
    let t_end = now_ns();
    let log = std::fs::read_to_string(&files.log).map(|t| rout::parse_log(&t)).unwrap_or_default();
    let mut o = failed(Phase::RunscExec, String::new(), None);
    o.error = None;
    o.phases_ms.insert("plan", ms(t_start, t_spawn));
    o.phases_ms.insert("run", ms(t_spawn, watched.t_exit.max(t_spawn)));
    o.stdout = watched.stdout;
    o.stderr = watched.stderr;
    let status = log.status.and_then(decode_wait_status);
    if watched.timed_out {
        o.termination = Termination::WallTimeout;
        o.signal = Some(match status {
            Some(ExitStatus::Signaled(s)) => s,
            _ => libc::SIGKILL,
        });
    } else if let Some(s) = status {
        o.set_command_status(s);
    } else if oom_kills(at.cgroup) > ooms_before {
        // The host's OOM killer took the sentry (gVisor has none of its
        // own): the sandbox's memory limit ended the exec, and the sandbox.
        o.termination = Termination::OomKilled;
        o.signal = Some(libc::SIGKILL);
    } else {
        let why = log
            .fatal
            .unwrap_or_else(|| format!("runsc exec ended with {:?} without the command's status", watched.init));
        o.termination = Termination::SetupFailed;
        o.error = Some(ErrorReport::new(Phase::RunscExec, why));
    }
    if o.termination != Termination::SetupFailed {
        let applied = crate::seccomp::SeccompReport::applied(seccomp);
        o.seccomp = Some(applied.enforced_by("gvisor (husk's reaper loads the filter into the command)"));
    }
    // Limits are the sandbox's (its cgroup holds the whole gVisor sandbox);
    // processes inside gVisor have no cgroup of their own to count an exec by.
    o.limits = at.limits.cloned();
    o.phases_ms.insert("cgroup_setup", 0.0);
    o.phases_ms.insert("cgroup_teardown", ms(t_end, now_ns()));
    o.duration_ms = ms(t_start, now_ns());
    o
}
