//! The container's init, from clone to execve. It reads like a table of
//! contents of named steps; a failure before `ready` goes to `create` as
//! (step, errno, detail), after it (create has returned) to the runtime log.
//! Everything that can fail for a reason the engine should show (the
//! identity, capabilities, the cwd, the executable's lookup) happens before
//! `ready`, so `create` fails with it, as runc's does; after exec.fifo only
//! startContainer hooks, no_new_privs with its filter and execve remain.
//! Like runc's, this process *becomes* the container's process: no husk
//! code stays inside the container once it runs.
//!
//! Host fds (CVE-2024-21626): every fd but stdio, the preserved ones, the
//! channel, the log and an O_PATH handle of exec.fifo is *closed* (not just
//! marked close-on-exec) before `chdir(process.cwd)`, and the cwd must then
//! be reachable from the container's root: a `cwd` of /proc/self/fd/N can
//! name no host directory. Init is non-dumpable from the moment create
//! released it, so nothing in the container can open its /proc/<pid>/exe
//! (the host binary) or fds.

use super::channel::{Channel, Msg};
use super::config::{Ns, OciPlan, OciProcess};
use super::{LogFormat, console, hooks, mounts};
use crate::step::{AtStep, Step, StepError};
use crate::sys::Errno;
use crate::sys::fd::CStrArray;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Uid};
use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

/// What init holds besides the plan, all opened by `create` before clone.
pub struct InitCtx {
    pub chan: Channel,
    /// O_PATH fd of <root>/<id>: exec.fifo's O_PATH handle is opened
    /// through it after pivot_root, and then it is closed (a directory of
    /// the host's must not reach `chdir`).
    pub state_dir: Option<OwnedFd>,
    /// The connected --console-socket, when process.terminal.
    pub console: Option<OwnedFd>,
    /// The runtime log, for failures after create returned.
    pub log: Option<(std::fs::File, LogFormat)>,
    /// controller -> cgroup dir, for `cgroup` mounts.
    pub cgroup_dirs: Vec<(String, PathBuf)>,
    pub preserve_fds: u32,
    pub last_cap: u32,
}

/// Runs init; never returns.
pub fn run(plan: &OciPlan, mut ctx: InitCtx) -> ! {
    match setup(plan, &mut ctx) {
        Ok(never) => match never {},
        Err(Failure::Before(e, detail)) => {
            ctx.chan.fail(e, &detail);
            crate::sys::process::exit_now(1)
        }
        Err(Failure::After(code, msg)) => {
            if let Some((f, format)) = ctx.log.as_mut() {
                let _ = f.write_all(super::log::line(*format, "error", &msg).as_bytes());
            }
            crate::sys::process::exit_now(code)
        }
    }
}

enum Failure {
    /// Reported to create over the channel.
    Before(StepError, String),
    /// After create returned: an exit code and a message for the log.
    After(i32, String),
}

impl From<StepError> for Failure {
    fn from(e: StepError) -> Self {
        Failure::Before(e, String::new())
    }
}

impl From<mounts::MountFail> for Failure {
    fn from(e: mounts::MountFail) -> Self {
        Failure::Before(e.0, e.1)
    }
}

fn setup(plan: &OciPlan, ctx: &mut InitCtx) -> Result<std::convert::Infallible, Failure> {
    await_go(&ctx.chan)?;
    // After create wrote the id maps (a non-dumpable task's /proc files
    // belong to root), before anything of the container's is mounted.
    nix::sys::prctl::set_dumpable(false).at(Step::AwaitRelease)?;
    let in_userns = plan.has(Ns::User);
    if plan.has_new(Ns::User) {
        become_root()?;
    }
    if plan.has_new(Ns::Cgroup) {
        // After create moved us into the container's cgroup, so that is
        // the namespace's root.
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP).at(Step::UnshareCgroupNs)?;
    }
    if let Some(h) = &plan.hostname {
        nix::unistd::sethostname(h).at(Step::SetHostname)?;
    }
    set_rlimits(&plan.process)?;
    mounts::prepare_root(plan, &ctx.cgroup_dirs, in_userns)?;
    let mut state = run_create_hooks(plan, &ctx.chan)?;
    mounts::pivot(&plan.rootfs)?;
    // Before /proc/sys turns read-only (readonlyPaths).
    set_sysctls(plan)?;
    mounts::mask_and_protect(plan)?;
    if plan.root_readonly {
        mounts::readonly_root()?;
    }
    if plan.process.terminal {
        let sock = ctx.console.take().ok_or(StepError::new(Step::ConsoleSocket, Errno::EBADF))?;
        console::attach(sock)?;
    }
    let fifo = fifo_handle(ctx)?;
    let mut keep = vec![ctx.chan.0.as_raw_fd(), fifo.as_raw_fd()];
    keep.extend(ctx.log.as_ref().map(|(f, _)| f.as_raw_fd()));
    let confined = confine(&plan.process, &keep, ctx.preserve_fds, ctx.last_cap)
        .map_err(|e| Failure::Before(e, what_failed(&plan.process, e)))?;
    ctx.chan.send(&Msg::Ready).map_err(|e| StepError::new(Step::AwaitRelease, e))?;
    // Held (close-on-exec) until execve: start reads it to EOF, so its
    // poststart hooks run after the startContainer hooks and the exec, as
    // the runtime spec orders them.
    let _started =
        await_start(&fifo).map_err(|e| Failure::After(1, format!("container init: waiting for start: {e}")))?;
    drop(fifo);
    if !plan.hooks.start_container.is_empty() {
        // create has returned: the container is "created" until execve.
        state["status"] = serde_json::json!(super::state::Status::Created.name());
        // A hook with no env of its own gets the process's, as runc's do
        // (they run in init after it set the process's environment).
        let process_env: Vec<String> =
            plan.process.env.iter().filter_map(|e| e.to_str().ok().map(str::to_string)).collect();
        let start_hooks: Vec<_> = plan
            .hooks
            .start_container
            .iter()
            .cloned()
            .map(|mut h| {
                if h.env.is_empty() {
                    h.env = process_env.clone();
                }
                h
            })
            .collect();
        hooks::run_all("startContainer", &start_hooks, &state).map_err(|e| Failure::After(1, e.to_string()))?;
    }
    let e = exec_confined(&plan.process, confined);
    Err(after(e))
}

/// exec.fifo as an O_PATH handle (reopened for writing through
/// /proc/self/fd once the process is confined, as runc does), and the
/// state directory closed.
fn fifo_handle(ctx: &mut InitCtx) -> Result<OwnedFd, Failure> {
    let dir = ctx.state_dir.take().ok_or(StepError::new(Step::AwaitRelease, Errno::EBADF))?;
    let fifo = openat(&dir, "exec.fifo", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| Failure::Before(StepError::new(Step::AwaitRelease, e), "opening exec.fifo".into()))?;
    drop(dir);
    // The container's /proc is where it is reopened: without one, fail now.
    nix::sys::stat::stat(format!("/proc/self/fd/{}", fifo.as_raw_fd()).as_str()).map_err(|e| {
        Failure::Before(
            StepError::new(Step::AwaitRelease, e),
            "exec.fifo through /proc/self/fd (is /proc mounted?)".into(),
        )
    })?;
    Ok(fifo)
}

/// A failure of the final steps, once create has returned: the exit code
/// a shell would give (127 not found, 126 not executable), and the log.
fn after(e: StepError) -> Failure {
    let code = match (e.step, e.errno) {
        (Step::Exec, Errno::ENOENT) => 127,
        (Step::Exec, Errno::EACCES | Errno::ENOEXEC | Errno::EISDIR) => 126,
        _ => 1,
    };
    Failure::After(code, format!("container process: {} failed: {}", e.step.name(), e.errno.desc()))
}

fn await_go(chan: &Channel) -> Result<(), StepError> {
    match chan.recv() {
        Ok(Msg::Go) => Ok(()),
        Ok(_) => Err(StepError::new(Step::AwaitRelease, Errno::EPROTO)),
        Err(e) => Err(StepError::new(Step::AwaitRelease, e)),
    }
}

fn become_root() -> Result<(), StepError> {
    nix::unistd::setresgid(Gid::from_raw(0), Gid::from_raw(0), Gid::from_raw(0)).at(Step::BecomeRoot)?;
    nix::unistd::setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0)).at(Step::BecomeRoot)
}

fn set_rlimits(p: &OciProcess) -> Result<(), StepError> {
    for (res, soft, hard) in &p.rlimits {
        crate::sys::process::set_rlimit(*res, *soft, *hard).at(Step::Rlimits)?;
    }
    Ok(())
}

/// prestart/createRuntime run by create (in the host's namespaces, now
/// that ours exist); createContainer here, before pivot_root.
fn run_create_hooks(plan: &OciPlan, chan: &Channel) -> Result<serde_json::Value, Failure> {
    chan.send(&Msg::Hooks).map_err(|e| StepError::new(Step::ContainerHooks, e))?;
    let state = match chan.recv() {
        Ok(Msg::State(s)) => serde_json::from_str(&s).unwrap_or(serde_json::Value::Null),
        Ok(_) => return Err(StepError::new(Step::ContainerHooks, Errno::EPROTO).into()),
        Err(e) => return Err(StepError::new(Step::ContainerHooks, e).into()),
    };
    if !plan.hooks.create_container.is_empty() {
        hooks::run_all("createContainer", &plan.hooks.create_container, &state)
            .map_err(|e| Failure::Before(StepError::new(Step::ContainerHooks, Errno::EIO), e.to_string()))?;
    }
    Ok(state)
}

fn set_sysctls(plan: &OciPlan) -> Result<(), Failure> {
    let all = plan
        .sysctl
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(plan.domainname.as_deref().map(|d| ("kernel.domainname", d)));
    let proc = if plan.sysctl.is_empty() && plan.domainname.is_none() { None } else { super::verify::private_proc() };
    for (k, v) in all {
        let rel = format!("sys/{}", k.replace('.', "/"));
        // Through procfs itself (a mount over /proc/sys/... would take the
        // write elsewhere and the sysctl would silently not be set).
        super::verify::write_proc(proc.as_ref(), &rel, v)
            .map_err(|e| Failure::Before(StepError::new(Step::Sysctl, e), format!("{k} (/proc/{rel})")))?;
    }
    Ok(())
}

/// Blocks opening exec.fifo for writing until `start` opens it for
/// reading, then tells start so with one byte. The open fifo is returned
/// so that start sees EOF only when execve (or init's death) closes it.
fn await_start(handle: &OwnedFd) -> Result<std::fs::File, Errno> {
    let path = format!("/proc/self/fd/{}", handle.as_raw_fd());
    let fifo = nix::fcntl::open(path.as_str(), OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty())?;
    let mut f = std::fs::File::from(fifo);
    f.write_all(b"0").map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    Ok(f)
}

/// A process confined and its executable found: what is left (no_new_privs,
/// its filter, execve) has nothing the caller could act on.
pub struct Confined {
    path: CString,
    argv: CStrArray,
    envp: CStrArray,
}

/// The process's fds, identity, capabilities, cwd and executable: every
/// step that can fail for a reason the engine should report. `keep` are
/// fds above the preserved ones that stay open (all close-on-exec).
pub fn confine(p: &OciProcess, keep: &[RawFd], preserve_fds: u32, last_cap: u32) -> Result<Confined, StepError> {
    if let Some(adj) = p.oom_score_adj {
        let rel = format!("{}/oom_score_adj", nix::unistd::getpid());
        super::verify::write_proc(super::verify::private_proc().as_ref(), &rel, &adj.to_string())
            .at(Step::OomScoreAdj)?;
    }
    // Closed, not marked close-on-exec: chdir below runs before execve, and
    // a cwd of /proc/self/fd/N would otherwise land on the host's side of
    // any directory fd still open (CVE-2024-21626).
    crate::sys::fd::close_from_except(3 + preserve_fds, keep).at(Step::CloseFds)?;
    let argv = CStrArray::new(p.args.clone());
    let envp = CStrArray::new(p.env.clone());
    // Without no_new_privs, loading a filter needs CAP_SYS_ADMIN, which
    // the process is about to drop: as runc does, the filter goes in first,
    // and the steps after it must be allowed by it (Docker's profile does).
    if !p.no_new_privs {
        install_seccomp(p)?;
    }
    crate::sys::caps::drop_bounding(crate::sys::caps::all_caps(last_cap), p.caps.bounding).at(Step::DropCaps)?;
    let groups: Vec<Gid> = p.additional_gids.iter().map(|g| Gid::from_raw(*g)).collect();
    match nix::unistd::setgroups(&groups) {
        // setgroups denied (a rootless user namespace): an empty list is
        // what the container has anyway.
        Err(Errno::EPERM) if groups.is_empty() => {}
        r => r.at(Step::SetIdentity)?,
    }
    crate::sys::caps::set_keepcaps(true).at(Step::SetIdentity)?;
    let gid = Gid::from_raw(p.gid);
    nix::unistd::setresgid(gid, gid, gid).at(Step::SetIdentity)?;
    let uid = Uid::from_raw(p.uid);
    nix::unistd::setresuid(uid, uid, uid).at(Step::SetIdentity)?;
    crate::sys::caps::set_keepcaps(false).at(Step::SetIdentity)?;
    crate::sys::caps::set_all(p.caps.effective, p.caps.permitted, p.caps.inheritable, p.caps.ambient, last_cap)
        .at(Step::DropCaps)?;
    nix::unistd::chdir(p.cwd.as_c_str()).at(Step::Chdir)?;
    // The kernel reports a cwd outside our root as "(unreachable)/...".
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    crate::sys::fd::getcwd_reachable(&mut buf).at(Step::VerifyCwd)?;
    if let Some(mask) = p.umask {
        nix::sys::stat::umask(Mode::from_bits_truncate(mask));
    }
    crate::sys::signal::reset_dispositions().at(Step::ResetSignals)?;
    crate::sys::signal::set_mask(&nix::sys::signal::SigSet::empty()).at(Step::ResetSignals)?;
    let path = look_up(p).map_err(|e| StepError::new(Step::Exec, e))?;
    Ok(Confined { path, argv, envp })
}

/// The detail of a failure of `confine`: what of the process it was about.
/// The executable's in runc's words, which engines match (docker run exits
/// 127 on "executable file not found"/"no such file or directory", 126 on
/// "permission denied").
pub fn what_failed(p: &OciProcess, e: StepError) -> String {
    let arg0 = p.args[0].to_string_lossy();
    let lower = e.errno.desc().to_lowercase();
    match e.step {
        Step::Exec if e.errno == Errno::ENOENT && !arg0.contains('/') => {
            format!("exec: {arg0:?}: executable file not found in $PATH")
        }
        Step::Exec if e.errno == Errno::ENOENT => format!("exec: {arg0:?}: stat {arg0}: {lower}"),
        Step::Exec => format!("exec: {arg0:?}: {lower}"),
        Step::Chdir => format!("process.cwd {:?}", p.cwd),
        Step::VerifyCwd => format!("process.cwd {:?} is outside the container's root", p.cwd),
        Step::SetIdentity => format!("user {}:{}", p.uid, p.gid),
        _ => String::new(),
    }
}

/// no_new_privs and the filter that needs it, then execve. Returns only on
/// failure.
pub fn exec_confined(p: &OciProcess, c: Confined) -> StepError {
    if p.no_new_privs {
        if let Err(e) = nix::sys::prctl::set_no_new_privs().at(Step::NoNewPrivs) {
            return e;
        }
        if let Err(e) = install_seccomp(p) {
            return e;
        }
    }
    StepError::new(Step::Exec, crate::sys::process::execve(&c.path, &c.argv, &c.envp))
}

/// The first candidate that is an executable file, as a shell's lookup
/// (and runc's) finds it: ENOENT when there is none, EACCES when one
/// exists but cannot be executed.
fn look_up(p: &OciProcess) -> Result<CString, Errno> {
    let mut err = Errno::ENOENT;
    for path in candidates(p) {
        match nix::sys::stat::stat(path.as_c_str()) {
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => {
                match nix::unistd::access(path.as_c_str(), nix::unistd::AccessFlags::X_OK) {
                    Ok(()) => return Ok(path),
                    Err(e) => err = e,
                }
            }
            Ok(_) => err = Errno::EACCES,
            Err(Errno::ENOENT | Errno::ENOTDIR) => {}
            Err(e) => err = e,
        }
    }
    Err(err)
}

fn install_seccomp(p: &OciProcess) -> Result<(), StepError> {
    if let Some(sc) = &p.seccomp {
        crate::sys::seccomp::install_filter(&sc.filter, sc.flags).at(Step::Seccomp)?;
    }
    Ok(())
}

/// args[0] as a path, or each PATH directory joined with it.
fn candidates(p: &OciProcess) -> Vec<CString> {
    let arg0 = p.args[0].as_bytes();
    if arg0.contains(&b'/') {
        return vec![p.args[0].clone()];
    }
    p.path_dirs
        .iter()
        .filter_map(|d| {
            let mut v = d.as_bytes().to_vec();
            v.push(b'/');
            v.extend_from_slice(arg0);
            CString::new(v).ok()
        })
        .collect()
}

/// Joins each namespace by path, in `Ns::JOIN_ORDER` (the intermediate
/// process, before it clones init).
pub fn join_namespaces(join: &[(Ns, PathBuf)]) -> Result<(), StepError> {
    for (ns, path) in join {
        let fd = nix::fcntl::open(path, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty()).at(Step::JoinNamespaces)?;
        nix::sched::setns(fd, nix::sched::CloneFlags::from_bits_truncate(ns.flag())).at(Step::JoinNamespaces)?;
    }
    Ok(())
}
