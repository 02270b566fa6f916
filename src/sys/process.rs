//! Process creation and termination: clone3 with pidfd/cgroup, a fork for
//! the sandbox's pid 2, execve from pre-built arrays, pidfd signalling.

use super::fd::{CStrArray, owned};
use super::{Errno, SysResult, check};
use nix::unistd::Pid;
use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

/// Proof that no other thread of this process can run user code: what makes
/// a fork-like clone sound. The child gets a copy of the whole address space
/// but only the calling thread, so a lock another thread held at that
/// instant (malloc's, stdio's, a `Mutex`) would stay locked forever in the
/// child, and data it was halfway through writing would stay torn.
///
/// A token rather than `unsafe fn` wrappers: the callers live outside
/// `src/sys/`, where `unsafe` is not allowed, and a check costs one stat(2)
/// (about 4 us) while turning a broken assumption (a thread some future
/// change starts before a clone) into an error instead of a child that hangs
/// now and then. There are two ways to get one:
/// - `SingleThreaded::check()`, right before the clone: the link count of
///   /proc/self/task is 2 + the number of threads (Linux and gVisor alike);
/// - `Forked::Child(token)`: a process just made by a fork-like clone has
///   exactly one thread, by the kernel's guarantee, with no /proc needed
///   (the sandbox's init has none of its own at first).
///
/// Not `Send`: a token made on one thread proves nothing on another. It
/// stays valid only while its holder starts no thread: whatever starts one
/// must take the token by value and give it back only once the thread is
/// joined, or the caller checks again.
#[derive(Debug)]
pub struct SingleThreaded(std::marker::PhantomData<*const ()>);

/// Why `SingleThreaded::check` refused.
#[derive(Debug, thiserror::Error)]
pub enum ThreadsError {
    #[error("husk has {0} threads where it must have one to fork (a bug in husk: please report it)")]
    Many(u64),
    #[error("counting husk's threads (stat /proc/self/task): {0}; is /proc mounted?")]
    Proc(Errno),
}

impl ThreadsError {
    pub fn errno(&self) -> Option<Errno> {
        match self {
            ThreadsError::Many(_) => None,
            ThreadsError::Proc(e) => Some(*e),
        }
    }
}

impl SingleThreaded {
    /// Counts this process's threads. A thread that was just joined may
    /// still be counted for a few microseconds (the kernel wakes the joiner
    /// when the thread has left user space, and unlists it a little later),
    /// so a count above one is re-read a bounded number of times; past that
    /// it is an error.
    pub fn check() -> Result<SingleThreaded, ThreadsError> {
        let mut threads = 0;
        for _ in 0..1000 {
            let st = nix::sys::stat::stat("/proc/self/task").map_err(ThreadsError::Proc)?;
            threads = (st.st_nlink as u64).saturating_sub(2);
            if threads == 1 {
                return Ok(SingleThreaded::proven());
            }
            std::thread::yield_now();
        }
        Err(ThreadsError::Many(threads))
    }

    /// The child's token after a fork-like clone (or a passed check).
    fn proven() -> SingleThreaded {
        SingleThreaded(std::marker::PhantomData)
    }
}

/// What a fork-like clone returned.
#[derive(Debug)]
pub enum Forked {
    /// We are the new process, with one thread.
    Child(SingleThreaded),
    /// We are the caller; `pidfd` refers to the child when it was asked for.
    Parent { pid: Pid, pidfd: Option<OwnedFd> },
}

#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_PIDFD: u64 = 0x1000;
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Fork-like clone3(2): `flags` are namespace flags (`CLONE_NEW*`); the child
/// always gets a pidfd and, when `cgroup` is given, is born in that cgroup
/// (CLONE_INTO_CGROUP), so not one instruction runs outside its limits.
///
/// Like fork, only the calling thread exists in the child (`one`).
pub fn clone3(one: &SingleThreaded, ns_flags: libc::c_int, cgroup: Option<BorrowedFd<'_>>) -> SysResult<Forked> {
    let mut args = CloneArgs {
        flags: (ns_flags as u32 as u64) | CLONE_PIDFD,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    if let Some(fd) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd.as_raw_fd() as u64;
    }
    fork_like(one, args)
}

/// clone3(2) with `args`, which must not hold CLONE_VM (the one place the
/// syscall is made). With CLONE_PIDFD in its flags the parent gets the pidfd.
fn fork_like(_one: &SingleThreaded, mut args: CloneArgs) -> SysResult<Forked> {
    let mut pidfd: libc::c_int = -1;
    let wants_pidfd = args.flags & CLONE_PIDFD != 0;
    if wants_pidfd {
        args.pidfd = &mut pidfd as *mut libc::c_int as u64;
    }
    debug_assert!(args.flags & libc::CLONE_VM as u64 == 0, "fork_like is fork-like: no CLONE_VM");
    // SAFETY: without CLONE_VM, clone3 behaves like fork: the child runs on a
    // copy of our address space and stack, so returning into Rust code in both
    // processes is sound. `args` and `pidfd` (the only memory `args` points
    // at) outlive the call. `_one` proves no other thread exists
    // whose locks or half-written data the child would inherit.
    let ret = unsafe { libc::syscall(libc::SYS_clone3, &mut args as *mut CloneArgs, std::mem::size_of::<CloneArgs>()) };
    match check(ret)? {
        0 => Ok(Forked::Child(SingleThreaded::proven())),
        pid => Ok(Forked::Parent {
            pid: Pid::from_raw(pid as i32),
            pidfd: wants_pidfd.then(|| owned(pidfd as libc::c_long)),
        }),
    }
}

/// Legacy clone(2) with a pidfd, for kernels (5.2) or seccomp profiles that
/// refuse clone3. Cannot place the child in a cgroup; callers attach it
/// before releasing it.
pub fn clone_legacy(_one: &SingleThreaded, ns_flags: libc::c_int) -> SysResult<Forked> {
    let mut pidfd: libc::c_int = -1;
    let flags = (ns_flags as libc::c_ulong) | (CLONE_PIDFD as libc::c_ulong) | libc::SIGCHLD as libc::c_ulong;
    // SAFETY: with a NULL stack and no CLONE_VM, raw clone is fork-like (see
    // fork_like), and `_one` proves this process has no other thread. x86_64 argument order: flags, stack, parent_tid(=pidfd
    // out-pointer for CLONE_PIDFD), child_tid, tls.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags,
            std::ptr::null_mut::<libc::c_void>(),
            &mut pidfd as *mut libc::c_int,
            std::ptr::null_mut::<libc::c_int>(),
            0usize,
        )
    };
    let pid = check(ret)?;
    if pid == 0 {
        Ok(Forked::Child(SingleThreaded::proven()))
    } else {
        Ok(Forked::Parent { pid: Pid::from_raw(pid as i32), pidfd: Some(owned(pidfd as libc::c_long)) })
    }
}

/// clone3(CLONE_PARENT | CLONE_PIDFD): a fork-like child whose parent is
/// our own parent, with a pidfd to it. `husk exec`'s joiner uses it so the
/// command it starts inside the sandbox is husk exec's child (waited for and
/// watched by pidfd there) while the joiner itself exits at once. The child
/// inherits our exit signal (clone3 refuses one with CLONE_PARENT).
pub fn clone_sibling(one: &SingleThreaded) -> SysResult<Forked> {
    const CLONE_PARENT: u64 = 0x8000;
    fork_like(one, CloneArgs { flags: CLONE_PARENT | CLONE_PIDFD, ..Default::default() })
}

/// A plain fork, used by the sandbox's init to start the command.
pub fn fork(one: &SingleThreaded) -> SysResult<Forked> {
    match fork_like(one, CloneArgs { exit_signal: libc::SIGCHLD as u64, ..Default::default() }) {
        Err(Errno::ENOSYS) => {
            // SAFETY: fork(2) in a process with no other thread (`one`).
            let pid = unsafe { libc::fork() };
            match pid {
                -1 => Err(Errno::last()),
                0 => Ok(Forked::Child(SingleThreaded::proven())),
                p => Ok(Forked::Parent { pid: Pid::from_raw(p), pidfd: None }),
            }
        }
        other => other,
    }
}

/// execve(2) from pre-built arrays; returns only on failure.
pub fn execve(path: &CStr, argv: &CStrArray, envp: &CStrArray) -> Errno {
    // SAFETY: all three pointers come from live, NULL-terminated CString
    // arrays owned by the caller for the duration of the call.
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    Errno::last()
}

/// _exit(2): leave now, without running atexit handlers or destructors that
/// belong to the parent's copy of the address space.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no Rust state.
    unsafe { libc::_exit(code) }
}

/// atexit(3): `f` runs when the process exits normally (main returns or
/// `std::process::exit`), once. The integration tests stop a daemon
/// shared by every test of one binary with it: statics are never dropped,
/// and a daemon left running would outlive the test process.
pub fn at_exit(f: extern "C" fn()) -> SysResult<()> {
    // SAFETY: atexit stores a plain function pointer (no captured state,
    // 'static by type) and calls it from exit(3) on this process's stack.
    match unsafe { libc::atexit(f) } {
        0 => Ok(()),
        _ => Err(Errno::ENOMEM),
    }
}

/// pidfd_send_signal(2): signal exactly the process the pidfd refers to,
/// immune to pid reuse.
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: libc::c_int) -> SysResult<()> {
    // SAFETY: integer arguments and a NULL siginfo.
    let ret = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), sig, std::ptr::null::<libc::siginfo_t>(), 0)
    };
    check(ret).map(|_| ())
}

/// pidfd_open(2).
pub fn pidfd_open(pid: Pid) -> SysResult<OwnedFd> {
    // SAFETY: integer arguments only.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    check(ret).map(owned)
}

/// The pid (in husk's pid namespace) of the process a pidfd refers to,
/// from /proc/self/fdinfo; None once it is gone.
pub fn pidfd_pid(pidfd: BorrowedFd<'_>) -> Option<i32> {
    use std::os::fd::AsRawFd;
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    text.lines().find_map(|l| l.strip_prefix("Pid:")).and_then(|p| p.trim().parse().ok()).filter(|p: &i32| *p > 0)
}

/// Whether the wait status says the child ended; (exited code) or (signal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Exited(i32),
    Signaled(i32),
}

/// waitid(P_PIDFD) without nix's enum conversions, blocking.
pub fn wait_pidfd(pidfd: BorrowedFd<'_>) -> SysResult<ExitStatus> {
    const P_PIDFD: libc::idtype_t = 3;
    // SAFETY: siginfo_t is plain old data; zeroed is a valid initial value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `info` is a valid out-pointer for the duration of the call.
        let ret = unsafe { libc::waitid(P_PIDFD, pidfd.as_raw_fd() as libc::id_t, &mut info, libc::WEXITED) };
        if ret == 0 {
            break;
        }
        let e = Errno::last();
        if e != Errno::EINTR {
            return Err(e);
        }
    }
    // SAFETY: waitid filled a CLD_* record, for which si_status is valid.
    let status = unsafe { info.si_status() };
    Ok(match info.si_code {
        libc::CLD_EXITED => ExitStatus::Exited(status),
        _ => ExitStatus::Signaled(status),
    })
}

/// Raw wait status word -> ExitStatus (for waitpid in the sandbox init).
pub fn decode_wait_status(status: libc::c_int) -> Option<ExitStatus> {
    if libc::WIFEXITED(status) {
        Some(ExitStatus::Exited(libc::WEXITSTATUS(status)))
    } else if libc::WIFSIGNALED(status) {
        Some(ExitStatus::Signaled(libc::WTERMSIG(status)))
    } else {
        None
    }
}

/// waitpid(-1, WNOHANG) returning (pid, raw status); `None` when no child
/// has changed state. ECHILD means no children at all.
pub fn reap_any_nohang() -> SysResult<Option<(Pid, libc::c_int)>> {
    let mut status: libc::c_int = 0;
    // SAFETY: `status` is a valid out-pointer.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG | libc::__WALL) };
    match pid {
        -1 => Err(Errno::last()),
        0 => Ok(None),
        p => Ok(Some((Pid::from_raw(p), status))),
    }
}

/// setrlimit(2) by raw resource number (RLIM_INFINITY for unlimited).
pub fn set_rlimit(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) -> SysResult<()> {
    let lim = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: `lim` is a valid rlimit for the duration of the call.
    let ret = unsafe { libc::setrlimit(resource, &lim) };
    check(ret as libc::c_long).map(|_| ())
}

/// This process's argv and environment areas (what /proc/<pid>/cmdline
/// and /environ show), as the kernel reports them in /proc/self/stat
/// (fields arg_start, arg_end, env_start, env_end). Only `of_self` makes
/// one, so `scrub_cmdline` can zero nothing but these areas (in this
/// process, or in a fork of it: the same addresses, its own copy).
#[derive(Clone, Debug, Default)]
pub struct ArgAreas([(usize, usize); 2]);

impl ArgAreas {
    /// Read on the host side, before clone (the child must not allocate);
    /// empty (nothing to scrub) if /proc/self/stat cannot be read.
    pub fn of_self() -> ArgAreas {
        use std::io::Read;
        let mut stat = String::with_capacity(1024);
        let read = std::fs::File::open("/proc/self/stat").and_then(|f| f.take(u64::MAX).read_to_string(&mut stat));
        if read.is_err() {
            return ArgAreas::default();
        }
        ArgAreas::parse(&stat)
    }

    /// Fields 48-51 of a /proc/<pid>/stat line; the comm field (2) may
    /// contain spaces and parentheses, so fields are counted from the last ')'.
    fn parse(stat: &str) -> ArgAreas {
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { return ArgAreas::default() };
        // After ") " the fields start at number 3 (state).
        let field = |n: usize| rest.split_whitespace().nth(n - 3).and_then(|x| x.parse().ok()).unwrap_or(0);
        ArgAreas([(field(48), field(49)), (field(50), field(51))])
    }
}

/// Overwrites this process's argv and environment areas with `title` and
/// NULs. The sandbox init is a fork of husk: without this, anything in the
/// sandbox could read husk's host command line (host paths, --env values)
/// from /proc/1/cmdline.
pub fn scrub_cmdline(areas: &ArgAreas, title: &[u8]) {
    for (i, &(start, end)) in areas.0.iter().enumerate() {
        if start == 0 || end <= start || end - start > (1 << 20) {
            continue;
        }
        let len = end - start;
        // SAFETY: [start, end) is this process's own argv/envp block on its
        // initial stack, as the kernel reported it (`ArgAreas::of_self`, the
        // only constructor, in this process or the one it was forked from:
        // the same address space layout); it is mapped read-write and, after
        // fork, private to this process. Nothing in husk holds a reference
        // into it (std copied argv/env into its own Strings).
        unsafe {
            std::ptr::write_bytes(start as *mut u8, 0, len);
            if i == 0 {
                let n = title.len().min(len - 1);
                std::ptr::copy_nonoverlapping(title.as_ptr(), start as *mut u8, n);
            }
        }
    }
}

/// getrlimit(2) by raw resource number.
pub fn get_rlimit(resource: libc::__rlimit_resource_t, out: &mut libc::rlimit) -> SysResult<()> {
    // SAFETY: `out` is a valid, writable rlimit.
    let ret = unsafe { libc::getrlimit(resource, out) };
    check(ret as libc::c_long).map(|_| ())
}

/// execveat(fd, "", argv, envp, AT_EMPTY_PATH): runs the file `fd` holds
/// (an ELF binary; a close-on-exec fd is fine for one). Returns only on
/// failure.
pub fn execve_fd(fd: BorrowedFd<'_>, argv: &CStrArray, envp: &CStrArray) -> Errno {
    // SAFETY: `fd` is a live fd, the path is a static empty C string and
    // both arrays are NULL-terminated and owned by the caller for the call.
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            fd.as_raw_fd(),
            c"".as_ptr(),
            argv.as_ptr(),
            envp.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    Errno::last()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process with a second thread alive gets no proof, so no fork-like
    /// clone can copy that thread's locks into a child.
    #[test]
    fn a_process_with_a_second_thread_gets_no_fork_proof() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || rx.recv());
        let proof = SingleThreaded::check();
        drop(tx);
        let _ = other.join();
        assert!(matches!(proof, Err(ThreadsError::Many(n)) if n >= 2), "{proof:?}");
    }

    /// A process named to look like more fields (comm may hold spaces and
    /// ')') cannot move the areas husk scrubs.
    #[test]
    fn arg_areas_are_counted_from_the_last_paren_of_comm() {
        let tail: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        let stat = format!("42 (a) 1 2 (b) {}\n", tail.join(" "));
        assert_eq!(ArgAreas::parse(&stat).0, [(48, 49), (50, 51)]);
        assert_eq!(ArgAreas::parse("garbage").0, [(0, 0), (0, 0)]);
        let own = ArgAreas::of_self().0;
        assert!(own[0].0 != 0 && own[0].0 < own[0].1, "{own:?}");
    }
}
