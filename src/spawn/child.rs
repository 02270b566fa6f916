//! The sandbox's first process (pid 1 in its pid namespace): a table of
//! contents of named setup steps, ending in forking the command and
//! becoming its reaper. Runs on a fork-like copy of the parent's memory; all
//! data it needs was built into the `Plan` before clone.

use super::{ChildStdio, fail, now_ns, phase};
use crate::plan::{InitRole, Plan};
use crate::rootfs::mount::{assemble, pivot};
use crate::spec::NetworkMode;
use crate::step::{AtStep, Step, StepError};
use crate::sync::{Channel, MAX_TIMES, Msg};
use crate::sys::process::{Forked, SingleThreaded, exit_now, fork};
use nix::fcntl::OFlag;
use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::sys::stat::{Mode, umask};
use nix::unistd::{Gid, Uid};

type R<T> = Result<T, StepError>;

pub fn run(plan: &Plan, chan: &Channel, stdio: ChildStdio, deferred_cgroup: bool, one: SingleThreaded) -> ! {
    let mut times = [0u64; MAX_TIMES];
    times[phase::CHILD_START] = now_ns();
    // `ps` shows what this process is, on the host and inside; and the
    // sandbox must not read husk's host command line from /proc/1/cmdline.
    let _ = prctl::set_name(c"husk:[init]");
    crate::sys::process::scrub_cmdline(&plan.arg_areas, b"husk:[init]");
    match setup(plan, chan, stdio, deferred_cgroup, one, &mut times) {
        Ok(Some(cmd)) => super::init::reap(cmd, chan),
        Ok(None) => super::init::hold(),
        Err(e) => fail(chan, e),
    }
}

/// The namespaces a held sandbox hands to its supervisor, in the order a
/// `husk exec` joins them: the user namespace first (it grants the
/// capabilities every other setns needs), the mount namespace last
/// (joining it moves root and cwd into the sandbox). The network
/// namespace only when the sandbox has its own.
pub const NAMESPACES: [(&std::ffi::CStr, libc::c_int, &str); 7] = [
    (c"/proc/self/ns/user", libc::CLONE_NEWUSER, "user"),
    (c"/proc/self/ns/ipc", libc::CLONE_NEWIPC, "ipc"),
    (c"/proc/self/ns/uts", libc::CLONE_NEWUTS, "uts"),
    (c"/proc/self/ns/net", libc::CLONE_NEWNET, "net"),
    (c"/proc/self/ns/cgroup", libc::CLONE_NEWCGROUP, "cgroup"),
    (c"/proc/self/ns/pid", libc::CLONE_NEWPID, "pid"),
    (c"/proc/self/ns/mnt", libc::CLONE_NEWNS, "mnt"),
];

/// `NAMESPACES` of a sandbox with this network mode.
pub fn namespaces_of(
    network: NetworkMode,
) -> impl Iterator<Item = &'static (&'static std::ffi::CStr, libc::c_int, &'static str)> {
    NAMESPACES.iter().filter(move |(_, flag, _)| *flag != libc::CLONE_NEWNET || network == NetworkMode::None)
}

fn setup(
    plan: &Plan,
    chan: &Channel,
    stdio: ChildStdio,
    deferred_cgroup: bool,
    one: SingleThreaded,
    times: &mut [u64; MAX_TIMES],
) -> R<Option<nix::unistd::Pid>> {
    await_release(chan)?;
    times[phase::RELEASED] = now_ns();
    // Under -t nothing of the sandbox keeps husk's terminal: the init
    // leaves husk's session (and its controlling terminal) too, as the
    // command does; keys reach the sandbox only through its own pty.
    if plan.process.tty {
        nix::unistd::setsid().at(Step::Setsid)?;
    }
    become_root(plan, chan)?;
    // A new network namespace has "lo", but down.
    if plan.namespaces.made_by_clone(libc::CLONE_NEWNET) {
        crate::sys::net::loopback_up().at(Step::Loopback)?;
    }
    if plan.spec.egress.is_some() {
        egress_listeners(chan)?;
    }
    nix::unistd::sethostname(plan.hostname.to_str().unwrap_or("husk")).at(Step::SetHostname)?;
    times[phase::NAMESPACES] = now_ns();

    let assembled = assemble(&plan.mounts)?;
    times[phase::MOUNTS] = now_ns();
    pivot(assembled.root.as_fd_compat())?;
    drop(assembled);
    enter_workdir(plan)?;
    if deferred_cgroup {
        await_cgroup(chan)?;
    }
    // Only once in every cgroup: the namespace is rooted where we are now,
    // so the sandbox sees its own cgroups as "/" (no host path).
    if plan.namespaces.made_by_init(libc::CLONE_NEWCGROUP) {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP).at(Step::UnshareCgroupNs)?;
    }
    times[phase::PIVOT] = now_ns();
    if !plan.spec.publish.is_empty() {
        super::factory::start(plan, chan, &one)?;
    }

    redirect_stdio(stdio)?;
    // Shrink the bounding set once, here, for both processes, to what
    // --cap-add asked for. Effective capabilities are untouched, so both can
    // still switch users below.
    crate::sys::caps::drop_bounding(crate::sys::caps::all_caps(plan.last_cap), plan.process.caps_keep)
        .at(Step::DropCaps)?;
    block_signals()?;
    if plan.role == InitRole::Hold {
        hand_over(plan, chan, times)?;
        return Ok(None);
    }
    // The command must not run a single instruction of its own while the
    // init still holds capabilities: it waits at this gate until the init
    // has confined itself (EOF instead of a byte means the init failed).
    let (gate_r, gate_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).at(Step::ForkCommand)?;
    match fork(&one).at(Step::ForkCommand)? {
        Forked::Child(_) => {
            drop(gate_w);
            super::command::run(plan, chan, times, gate_r)
        }
        Forked::Parent { pid, .. } => {
            drop(gate_r);
            confine_init(plan, chan)?;
            nix::unistd::write(&gate_w, &[1]).at(Step::InitConfine)?;
            Ok(Some(pid))
        }
    }
}

/// Hold mode (`husk create`): the init confines itself as it would next to
/// a command, keeps no fd but the channel (it inherited the supervisor's:
/// its socket, its lock, the image lease), and hands its namespaces to the
/// supervisor, which gives them to each `husk exec`. Only the init itself
/// may open them: it is not dumpable, so nobody else without
/// CAP_SYS_PTRACE in the host's namespace (a rootless husk) could.
fn hand_over(plan: &Plan, chan: &Channel, times: &mut [u64; MAX_TIMES]) -> R<()> {
    use std::os::fd::{AsFd, AsRawFd};
    confine_init(plan, chan)?;
    crate::sys::fd::close_all_except(&[chan.fd().as_raw_fd()]).at(Step::InitConfine)?;
    let mut opened: [Option<std::os::fd::OwnedFd>; 7] = Default::default();
    let mut n = 0;
    for (path, _, _) in namespaces_of(plan.network) {
        opened[n] =
            Some(nix::fcntl::open(*path, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty()).at(Step::InitConfine)?);
        n += 1;
    }
    let list: [std::os::fd::BorrowedFd<'_>; 7] =
        std::array::from_fn(|i| opened[i].as_ref().map_or(chan.fd(), |f| f.as_fd()));
    times[phase::CONFINED] = now_ns();
    let _ = chan.send(Msg::Times(*times));
    chan.send_fds(Msg::Namespaces { count: n as i32 }, &list[..n]).at(Step::InitConfine)
}

/// `--network allow=`: the proxy's ports, listening on 127.0.0.1 inside
/// the sandbox's own network namespace (the only place they can be made
/// without privilege over it), handed to husk, whose proxy serves them
/// from the host's namespace. Made before anything of the sandbox runs,
/// so its command finds them bound and cannot take the ports itself; the
/// init keeps no copy.
fn egress_listeners(chan: &Channel) -> R<()> {
    use std::os::fd::AsFd;
    let http = crate::sys::net::listen_loopback(crate::net::HTTP_PORT).at(Step::EgressListeners)?;
    let socks = crate::sys::net::listen_loopback(crate::net::SOCKS_PORT).at(Step::EgressListeners)?;
    chan.send_fds(Msg::EgressListeners, &[http.as_fd(), socks.as_fd()]).at(Step::EgressListeners)
}

/// Dies with the parent (PDEATHSIG) and waits for the id maps.
fn await_release(chan: &Channel) -> R<()> {
    prctl::set_pdeathsig(Signal::SIGKILL).at(Step::AwaitRelease)?;
    umask(Mode::empty());
    match chan.recv() {
        Ok(Some(Msg::Release)) => {}
        // The parent died or gave up before releasing us: leave quietly.
        Ok(_) | Err(_) => exit_now(125),
    }
    // Not dumpable: nothing in the sandbox may ptrace us or open
    // /proc/1/{mem,fd,exe} (CVE-2016-9962 shape). Only after the release:
    // a non-dumpable task's /proc/<pid>/{uid_map,gid_map,setgroups} belong
    // to host root, so a rootless parent could no longer write the maps.
    // Nothing runs in the sandbox before this point.
    prctl::set_dumpable(false).at(Step::AwaitRelease)
}

/// Waits until the parent has made the rest of the cgroup (v1 directories,
/// every limit) while we mounted, and moves into the v1 hierarchies whose
/// `tasks` files come attached (as `v1::join_self` does right after clone
/// when the cgroup was made first). The init is already in its v2 or
/// unified cgroup (CLONE_INTO_CGROUP). Nothing of the sandbox has run yet,
/// and its command is forked only after this.
fn await_cgroup(chan: &Channel) -> R<()> {
    match chan.recv_with_fds() {
        Ok(Some((Msg::CgroupReady, files))) => {
            for f in &files {
                nix::unistd::write(f, b"0").at(Step::JoinCgroup)?;
            }
            Ok(())
        }
        // The parent failed to make the cgroup, or died: it kills us anyway.
        Ok(_) | Err(_) => exit_now(125),
    }
}

/// Switches to the ids the maps give us, and drops host supplementary
/// groups (they would otherwise stay attached to the sandbox).
fn become_root(plan: &Plan, chan: &Channel) -> R<()> {
    if !plan.ids.deny_setgroups {
        nix::unistd::setgroups(&[]).at(Step::BecomeRoot)?;
    }
    switch_ids(plan.ids.init_uid, plan.ids.init_gid, chan, Step::BecomeRoot)
}

/// setresgid + setresuid, then re-arm what a credential change clears: the
/// parent-death signal and non-dumpability. If husk died in the window where
/// no death signal was armed, leave now.
fn switch_ids(uid: u32, gid: u32, chan: &Channel, step: Step) -> R<()> {
    let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
    nix::unistd::setresgid(gid, gid, gid).at(step)?;
    nix::unistd::setresuid(uid, uid, uid).at(step)?;
    super::command::rearm_after_id_switch(chan, Some(Signal::SIGKILL), step)
}

/// chdir into the workdir and prove the cwd is inside the new root (a cwd
/// reachable only through a leaked host fd is CVE-2024-21626's shape).
fn enter_workdir(plan: &Plan) -> R<()> {
    nix::unistd::chdir(plan.mounts.workdir.as_c_str()).at(Step::Chdir)?;
    let mut buf = [0u8; libc::PATH_MAX as usize];
    crate::sys::fd::getcwd_reachable(&mut buf).at(Step::VerifyCwd)
}

pub(super) fn redirect_stdio(stdio: ChildStdio) -> R<()> {
    for (fd, target) in [(stdio.stdin, 0), (stdio.stdout, 1), (stdio.stderr, 2)] {
        if let Some(fd) = fd {
            crate::sys::fd::dup_onto(fd, target).at(Step::RedirectStdio)?;
        }
    }
    Ok(())
}

/// Forwarded signals are blocked from here on and collected with sigwait
/// by the reaper: no handler ever runs in the init (`sys::signal::block`
/// says why not nix's `thread_block`).
pub(super) fn block_signals() -> R<()> {
    crate::sys::signal::block(&super::init::init_signals()).at(Step::BlockSignals)
}

/// The init keeps no privilege once the command runs: it takes the
/// command's ids (so it can still forward signals to it without CAP_KILL),
/// drops every capability and sets no_new_privs.
fn confine_init(plan: &Plan, chan: &Channel) -> R<()> {
    let p = &plan.process;
    crate::sys::caps::drop_bounding(p.caps_keep, 0).at(Step::InitConfine)?;
    if (p.uid, p.gid) != (plan.ids.init_uid, plan.ids.init_gid) {
        if !plan.ids.deny_setgroups {
            nix::unistd::setgroups(&[]).at(Step::InitConfine)?;
        }
        switch_ids(p.uid, p.gid, chan, Step::InitConfine)?;
    }
    crate::sys::caps::set_process_caps(0, plan.last_cap).at(Step::InitConfine)?;
    prctl::set_no_new_privs().at(Step::InitConfine)
}

trait AsFdCompat {
    fn as_fd_compat(&self) -> std::os::fd::BorrowedFd<'_>;
}

impl AsFdCompat for std::os::fd::OwnedFd {
    fn as_fd_compat(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.as_fd()
    }
}
