//! create and run. `create` validates config.json into a plan, makes the
//! state directory and the cgroup, then forks an intermediate process that
//! joins the namespaces given by path and clones init into the new ones.
//! The intermediate exits at once, so init is never husk's child: when
//! `create` returns, init is adopted by the caller's subreaper (the
//! containerd shim), which reaps it for the exit status. `create` itself
//! writes the id maps, moves init into the cgroup, runs the prestart and
//! createRuntime hooks when init asks, and writes the pid file once init
//! reports ready (it then waits on exec.fifo for `start`).

use super::channel::{self, Msg};
use super::config::{self, Ns, OciPlan};
use super::init::{self, InitCtx};
use super::state::{Record, Status, Store};
use super::{CreateArgs, OciError, RunArgs, cgroups, hooks, lifecycle, log};
use crate::procref::ProcRef;
use crate::step::Step;
use crate::sys::process::{Forked, SingleThreaded};
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use nix::unistd::Pid;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

pub fn create(store: &Store, a: &CreateArgs) -> Result<(), OciError> {
    create_container(store, a).map(|_| ())
}

/// Removes what a failed create made: init, the cgroup, the state dir.
struct Undo<'a> {
    store: &'a Store,
    id: String,
    init: Option<i32>,
    cgroups: Vec<PathBuf>,
    leaves: Vec<PathBuf>,
    armed: bool,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(pid) = self.init {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
        let _ = cgroups::remove(&self.cgroups, &self.leaves);
        let _ = self.store.sweep_parents();
        let _ = self.store.remove(&self.id);
    }
}

fn create_container(store: &Store, a: &CreateArgs) -> Result<ProcRef, OciError> {
    super::state::check_id(&a.id)?;
    let (spec, raw) = config::load(&a.bundle)?;
    let plan = config::plan(&a.bundle, spec)?;
    match (plan.process.terminal, &a.console_socket) {
        (true, None) => {
            return Err(OciError::Refused(
                "process.terminal is true but no --console-socket was given (where the pty's master goes)".into(),
            ));
        }
        (false, Some(_)) => {
            return Err(OciError::Refused("--console-socket given but process.terminal is false".into()));
        }
        _ => {}
    }
    let dir = store.make(&a.id)?;
    let mut undo = Undo { store, id: a.id.clone(), init: None, cgroups: Vec::new(), leaves: Vec::new(), armed: true };
    // Init opens exec.fifo as the container's root, which in a user
    // namespace is an unprivileged host uid: it needs "other" search on the
    // directory and write on the fifo (runc's 0622).
    let io = |what: &str| {
        let what = format!("{what} {}", dir.display());
        move |e| OciError::io(what, e)
    };
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).map_err(io("chmod"))?;
    let fifo = store.fifo(&a.id);
    nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o622))
        .map_err(|e| OciError::sys(format!("mkfifo {}", fifo.display()), e))?;
    std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o622)).map_err(io("chmod exec.fifo in"))?;

    let rel = cgroups::relative_path(plan.cgroups_path.as_deref(), &a.id)?;
    let made = if nix::unistd::geteuid().is_root() || !resources_empty(&plan) {
        cgroups::create(&cgroups::Layout::probe(), &rel, &plan.resources)?
    } else {
        log::warn("not root and no linux.resources: the container gets no cgroup of its own");
        cgroups::Made::default()
    };
    undo.cgroups = made.created.clone();
    undo.leaves = made.dirs.values().cloned().collect();
    let parents: Vec<PathBuf> = made.created.iter().filter(|d| !undo.leaves.contains(d)).cloned().collect();
    store.note_parents(&parents)?;
    let mut record = Record {
        id: a.id.clone(),
        init: None,
        bundle: plan.bundle.clone(),
        rootfs: plan.rootfs.clone(),
        created: log::rfc3339_now(),
        owner: owner(),
        annotations: plan.annotations.clone(),
        cgroups: made.dirs.clone(),
        made_cgroups: made.created.clone(),
        poststart: plan.hooks.poststart.clone(),
        poststop: plan.hooks.poststop.clone(),
        exec_defaults: exec_defaults(&raw),
        namespaces: plan
            .new_ns
            .iter()
            .chain(plan.join_ns.iter().map(|(n, _)| n))
            .map(|n| n.proc_name().to_string())
            .collect(),
    };
    store.save(&record)?;

    let state_dir = nix::fcntl::open(&dir, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| OciError::sys(format!("opening {}", dir.display()), e))?;
    let console = match &a.console_socket {
        Some(p) => Some(OwnedFd::from(
            std::os::unix::net::UnixStream::connect(p)
                .map_err(|e| OciError::io(format!("--console-socket {}", p.display()), e))?,
        )),
        None => None,
    };
    let log_file = log::path().and_then(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).ok());
    let (parent, child) = channel::pair().map_err(|e| OciError::sys("socketpair", e))?;
    let ctx = InitCtx {
        chan: child,
        state_dir: Some(state_dir),
        console,
        log: log_file.map(|f| (f, log::format())),
        cgroup_dirs: made.dirs.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        preserve_fds: a.preserve_fds,
        last_cap: last_cap(),
    };
    let one = SingleThreaded::check().map_err(|e| OciError::Refused(e.to_string()))?;
    let mid = match crate::sys::process::fork(&one).map_err(|e| OciError::sys("fork", e))? {
        Forked::Child(one) => {
            drop(parent);
            intermediate(&plan, ctx, one)
        }
        Forked::Parent { pid, .. } => pid,
    };
    drop(ctx);
    let pid = match parent.recv() {
        Ok(Msg::Pid(p)) => p,
        Ok(Msg::Fail { step, errno, detail }) => return Err(init_failed(step, errno, detail)),
        Ok(_) | Err(_) => return Err(OciError::Refused("the container's init could not be started".into())),
    };
    let _ = nix::sys::wait::waitpid(mid, None);
    undo.init = Some(pid);
    if let (Some(u), Some(g)) = (&plan.uid_map, &plan.gid_map) {
        write_maps(pid, u, g)?;
    }
    cgroups::attach(&made.dirs, pid)?;
    parent.send(&Msg::Go).map_err(|e| OciError::sys("releasing the container's init", e))?;
    record.init = ProcRef::of(pid);
    loop {
        match parent.recv() {
            Ok(Msg::Hooks) => {
                let state = record.hook_state(Status::Creating);
                hooks::run_all("prestart", &plan.hooks.prestart, &state)?;
                hooks::run_all("createRuntime", &plan.hooks.create_runtime, &state)?;
                // createContainer still sees "creating" (runc's, and the
                // spec's: create has not finished); init marks it
                // "created" for startContainer.
                parent.send(&Msg::State(state.to_string())).map_err(|e| OciError::sys("container init", e))?;
            }
            Ok(Msg::Ready) => break,
            Ok(Msg::Fail { step, errno, detail }) => return Err(init_failed(step, errno, detail)),
            Ok(_) | Err(_) => return Err(OciError::Refused("the container's init exited during its setup".into())),
        }
    }
    let init = record.init.ok_or_else(|| OciError::Refused("the container's init exited during its setup".into()))?;
    store.save(&record)?;
    if let Some(p) = &a.pid_file {
        // The shim reads this as a bare decimal: no newline.
        crate::files::write_atomic(p, pid.to_string().as_bytes())
            .map_err(|e| OciError::io(format!("--pid-file {}", p.display()), e))?;
    }
    undo.armed = false;
    Ok(init)
}

/// What an exec inherits from the container: its process object (user,
/// env, capabilities, noNewPrivileges...) and linux.seccomp.
fn exec_defaults(raw: &serde_json::Value) -> serde_json::Value {
    let mut d = raw.get("process").cloned().unwrap_or(serde_json::Value::Null);
    if let Some(o) = d.as_object_mut() {
        o.insert("seccomp".into(), raw.pointer("/linux/seccomp").cloned().unwrap_or(serde_json::Value::Null));
    }
    d
}

fn init_failed(step: Step, errno: nix::errno::Errno, detail: String) -> OciError {
    let detail = if detail.is_empty() { String::new() } else { format!(" ({detail})") };
    OciError::Init { step: step.name(), errno, detail }
}

fn resources_empty(plan: &OciPlan) -> bool {
    let r = &plan.resources;
    r.memory.is_none()
        && r.pids_limit.is_none()
        && r.cpu_shares.is_none()
        && r.cpu_quota.is_none()
        && r.cpuset_cpus.is_none()
        && r.devices.is_empty()
        && r.hugepages.is_empty()
        && r.blkio_weight.is_none()
}

fn owner() -> String {
    let uid = nix::unistd::geteuid();
    nix::unistd::User::from_uid(uid).ok().flatten().map(|u| u.name).unwrap_or_else(|| uid.to_string())
}

pub fn last_cap() -> u32 {
    crate::files::read_text("/proc/sys/kernel/cap_last_cap").ok().and_then(|t| t.trim().parse().ok()).unwrap_or(40)
}

fn write_maps(pid: i32, uid_map: &str, gid_map: &str) -> Result<(), OciError> {
    for (file, data) in [("uid_map", uid_map), ("gid_map", gid_map)] {
        let path = format!("/proc/{pid}/{file}");
        std::fs::write(&path, data).map_err(|e| OciError::io(format!("writing {path} ({})", data.trim()), e))?;
    }
    Ok(())
}

/// The intermediate: joins namespaces by path, clones init into the new
/// ones (the cgroup namespace is unshared by init once it is in its
/// cgroup), reports init's pid and exits.
fn intermediate(plan: &OciPlan, ctx: InitCtx, one: SingleThreaded) -> ! {
    if let Err(e) = init::join_namespaces(&plan.join_ns) {
        ctx.chan.fail(e, "");
        crate::sys::process::exit_now(1);
    }
    let flags = plan.new_ns.iter().filter(|n| **n != Ns::Cgroup).fold(0, |f, n| f | n.flag());
    match crate::sys::process::clone3(&one, flags, None) {
        Ok(Forked::Child(_)) => init::run(plan, ctx),
        Ok(Forked::Parent { pid, .. }) => {
            let _ = ctx.chan.send(&Msg::Pid(pid.as_raw()));
            crate::sys::process::exit_now(0)
        }
        Err(e) => {
            ctx.chan.fail(crate::step::StepError::new(Step::ForkCommand, e), "clone of the container's init");
            crate::sys::process::exit_now(1)
        }
    }
}

/// create + start; without --detach, waits for init and exits with its
/// status (128+N for signal N), then deletes the container.
pub fn run(store: &Store, a: &RunArgs) -> Result<i32, OciError> {
    if !a.detach {
        // The intermediate exits, so init would be reparented past us.
        nix::sys::prctl::set_child_subreaper(true).map_err(|e| OciError::sys("PR_SET_CHILD_SUBREAPER", e))?;
    }
    let init = create_container(store, &a.create)?;
    lifecycle::start(store, &a.create.id)?;
    if a.detach {
        return Ok(0);
    }
    let code = loop {
        match nix::sys::wait::waitpid(None, None) {
            Ok(nix::sys::wait::WaitStatus::Exited(p, c)) if p.as_raw() == init.pid => break c,
            Ok(nix::sys::wait::WaitStatus::Signaled(p, s, _)) if p.as_raw() == init.pid => break 128 + s as i32,
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(OciError::sys("waiting for the container", e)),
        }
    };
    if !a.keep {
        lifecycle::delete(store, &super::DeleteArgs { force: true, id: a.create.id.clone() })?;
    }
    Ok(code)
}
