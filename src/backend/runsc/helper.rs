//! husk's side inside gVisor: the static husk binary is bound read-only at
//! `/.husk` into the sandbox and runs there in one of three roles.
//!
//! - `exec -- MARKER SECCOMP CMD...`: a run's command (`husk run`): loads
//!   the run's compiled seccomp filter and execs the command (see `exec`).
//!
//! For sandboxes that live under runsc (`husk create --runtime runsc`):
//! - `hold`: the container's init. It waits and reaps orphans, nothing
//!   else, so a sandbox holds no process of the user's between execs and
//!   needs nothing from the image (no `sleep`, no shell: busybox, scratch
//!   and host roots alike).
//! - `reap -- KEEP CMD...`: each exec's parent. It puts the command in a
//!   pid namespace of its own (see `reap`), so every process the command
//!   starts stays there even after double forks and `setsid`; on
//!   `KILL_TREE` (sent by husk exec with `runsc kill --pid` at its timeout)
//!   it kills the namespace and exits; on `KILL_COMMAND` (sent by the
//!   supervisor when husk exec died without a word) it SIGKILLs the command
//!   only. Other signals are forwarded to the command. When the command ends on its own, the reaper ends with the
//!   same status and the namespace's init stays to reap what the command
//!   left in the background, which keeps running, as after a native exec.
//!
//! - `copy -- OP PATH SHAPE MAX_BYTES MAX_ENTRIES`: `husk cp`'s copier
//!   (see `super::copy`).
//!
//! Both run as the exec's user with no_new_privs. The holder has no
//! capabilities; the reaper starts with CAP_SYS_ADMIN and CAP_SETPCAP
//! (`REAPER_CAPS`) and drops them, from every set, before it forks.

use crate::sys::process::{Forked, SingleThreaded, exit_now};
use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::ffi::CString;

/// Where the husk binary is inside a runsc sandbox that lives.
pub const PATH_IN_SANDBOX: &str = "/.husk";
/// The hidden subcommand (src/cli.rs) that runs these roles.
pub const SUBCOMMAND: &str = "gvisor-helper";
/// Tells a reaper to kill its command's whole tree. husk never forwards
/// it (only INT, TERM, HUP, QUIT are), so it cannot be confused with a
/// signal meant for the command.
pub const KILL_TREE: Signal = Signal::SIGPWR;
/// Tells a reaper to SIGKILL its command only (its background processes
/// live on): sent by the supervisor when husk exec died without a word, as
/// a native exec's command dies with husk exec. Never forwarded by husk
/// either; nothing else sends it (SIGURG comes of out-of-band socket data
/// for an owner that asked, which the reaper never does).
pub const KILL_COMMAND: Signal = Signal::SIGURG;

/// The argv of an exec's reaper for `cmd`.
/// `seccomp`: the compiled filter (`seccomp::Program::to_bytes`) the
/// command must run under, hex-encoded into the argv ("-": none).
pub fn reap_argv(keep_caps: u64, seccomp: Option<&[u8]>, cmd: &[String]) -> Vec<String> {
    let filter = match seccomp {
        Some(b) => hex::encode(b),
        None => "-".to_string(),
    };
    let mut v = vec![PATH_IN_SANDBOX.to_string(), SUBCOMMAND.into(), "reap".into(), "--".into(), keep_caps.to_string()];
    v.push(filter);
    v.extend(cmd.iter().cloned());
    v
}

/// The argv of a run's command under husk's seccomp filter: `exec`
/// loads `seccomp` (the compiled filter, `seccomp::Program::to_bytes`) and
/// execs `cmd`. `marker`: a nonce for `exec_failure_line` when husk
/// captures stderr ("-": it does not; the failure is then told in words).
pub fn exec_argv(marker: &str, seccomp: &[u8], cmd: &[String]) -> Vec<String> {
    let mut v = vec![PATH_IN_SANDBOX.to_string(), SUBCOMMAND.into(), "exec".into(), "--".into()];
    v.extend([marker.to_string(), hex::encode(seccomp)]);
    v.extend(cmd.iter().cloned());
    v
}

/// The line `exec` writes to stderr when the command cannot be started:
/// the marker (a nonce only husk and the helper know; the command never
/// ran, so it cannot have printed it) and the errno's number.
pub fn exec_failure_line(marker: &str, errno: i32) -> String {
    format!("husk-exec-failed {marker} {errno}\n")
}

/// The argv of the container's init.
pub fn hold_argv() -> Vec<String> {
    vec![PATH_IN_SANDBOX.to_string(), SUBCOMMAND.into(), "hold".into()]
}

/// Runs one role; returns the exit code.
pub fn main(role: &str, cmd: &[String]) -> i32 {
    match role {
        "hold" => hold(),
        "reap" => reap(cmd, None),
        // -t: `reap-tty:ROWSxCOLS`, the user's terminal's size at the start.
        tty if tty.starts_with("reap-tty") => {
            let size = tty.strip_prefix("reap-tty:").and_then(|s| s.split_once('x'));
            let size = size.and_then(|(r, c)| Some((r.parse().ok()?, c.parse().ok()?)));
            reap(cmd, Some(size.unwrap_or((0, 0))))
        }
        "exec" => exec(cmd),
        "copy" => copy_inside(cmd),
        _ => {
            crate::errln!("husk: {SUBCOMMAND}: unknown role {role:?} (hold, reap, exec or copy)");
            125
        }
    }
}

/// A run's command (`exec_argv`): `cmd` is `MARKER SECCOMP CMD...`. Loads
/// the filter and execs the command, as the native backend's last two
/// steps do. runsc's `--oci-seccomp` cannot stand in for this: runsc
/// drops every rule's `errnoRet` and answers EPERM (gVisor issue 14688),
/// so clone3 gave EPERM instead of ENOSYS and glibc could not start a
/// thread. gVisor's kernel runs a filter a process loads itself exactly.
pub fn exec(cmd: &[String]) -> i32 {
    let (Some(marker), Some(filter), Some(first)) = (cmd.first(), cmd.get(1), cmd.get(2)) else {
        crate::errln!("husk: {SUBCOMMAND} exec: expected MARKER SECCOMP CMD...");
        return 125;
    };
    let Some(program) =
        hex::decode(filter).ok().and_then(|b| crate::seccomp::Program::from_bytes("sandbox", true, "", false, &b))
    else {
        return fail("reading the seccomp filter", "not a compiled filter");
    };
    let argv: Vec<CString> = match cmd[2..].iter().map(|a| CString::new(a.as_bytes())).collect() {
        Ok(v) => v,
        Err(e) => return fail("the command line", e),
    };
    // No flags: single-threaded here (TSYNC is moot), and gVisor refuses
    // the audit-only ones. noNewPrivileges is set by the OCI process.
    if let Err(e) = crate::sys::seccomp::install_filter(program.installed(), 0) {
        return fail("loading the seccomp filter", e);
    }
    let e = nix::unistd::execvp(&argv[0], &argv).unwrap_err();
    if marker != "-" {
        crate::errln!("{}", exec_failure_line(marker, e as i32).trim_end());
    } else {
        let what = match e {
            Errno::ENOENT | Errno::ENOTDIR => "command not found",
            _ => "cannot execute",
        };
        crate::errln!("husk: {what}: {first}: {e}");
    }
    match e {
        Errno::ENOENT | Errno::ENOTDIR => 127,
        _ => 126,
    }
}

/// The container's init: reaps whatever is orphaned to it, forever.
pub fn hold() -> i32 {
    // Not ptraceable, nor its /proc/1/{fd,environ,mem} open, by the
    // sandbox's own processes of the same uid.
    let _ = nix::sys::prctl::set_dumpable(false);
    let all = SigSet::all();
    let _ = crate::sys::signal::block(&all);
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    loop {
        match waitpid(None::<Pid>, None) {
            Ok(_) | Err(Errno::EINTR) => {}
            // No child now: one appears only when an exec's process is
            // orphaned, and its exit raises SIGCHLD.
            Err(_) => {
                let _ = chld.wait();
            }
        }
    }
}

/// Signals the reaper handles itself: those husk's init forwards, plus
/// SIGALRM and SIGCONT (also forwarded) and KILL_TREE.
fn handled() -> SigSet {
    let mut s = crate::spawn::init::init_signals();
    for sig in [Signal::SIGALRM, Signal::SIGCONT, KILL_TREE, KILL_COMMAND] {
        s.add(sig);
    }
    s
}

/// Capabilities the reaper starts with beyond the exec's own: SYS_ADMIN
/// for its pid namespace, SETPCAP to drop both from the bounding set.
/// It gives them up before anything of the user's runs.
pub const REAPER_CAPS: u64 = (1 << 21) | (1 << 8); // CAP_SYS_ADMIN, CAP_SETPCAP

fn fail(what: &str, e: impl std::fmt::Display) -> i32 {
    crate::errln!("husk: {what} inside gVisor: {e}");
    125
}

/// An exec's parent (see the module docs). `cmd` is `KEEP SECCOMP CMD...`:
/// KEEP the exec's own capabilities (decimal bit mask), SECCOMP its
/// compiled filter in hex (`-`: none). Returns the exit code
/// to use when the command did not die of a signal.
///
/// gVisor (2022-12) has no PR_SET_CHILD_SUBREAPER, so the command's tree is
/// held by a pid namespace instead: the reaper unshares one, drops every
/// capability but the exec's own, and forks the namespace's init, which
/// starts the command, forwards signals to it, reports its status over a
/// pipe and then stays to reap whatever it left in the background. Killing
/// that init kills every process in the namespace (the kernel's rule for a
/// pid namespace whose init dies), double-forked daemons included.
pub fn reap(cmd: &[String], tty: Option<(u16, u16)>) -> i32 {
    let (Some(keep), Some(filter), Some(first)) =
        (cmd.first().and_then(|k| k.parse::<u64>().ok()), cmd.get(1), cmd.get(2))
    else {
        crate::errln!("husk: {SUBCOMMAND} reap: expected KEEP-CAPS SECCOMP CMD...");
        return 125;
    };
    let seccomp = match filter.as_str() {
        "-" => None,
        hex => match hex::decode(hex)
            .ok()
            .and_then(|b| crate::seccomp::Program::from_bytes("sandbox", true, "", false, &b))
        {
            Some(p) => Some(p),
            None => return fail("the seccomp filter", "not a compiled program"),
        },
    };
    let argv: Vec<CString> = match cmd[2..].iter().map(|a| CString::new(a.as_bytes())).collect() {
        Ok(v) => v,
        Err(_) => return fail("the command", "NUL byte in an argument"),
    };
    // The reaper and the namespace's init run as the exec's user: also
    // non-dumpable (where the kernel enforces it: gVisor 2022-12 still lets
    // the same uid read their /proc/PID/fd and environ), and under the
    // command's filter once they have forked (below). The command's execve
    // makes it dumpable again, as any process.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        return fail("PR_SET_DUMPABLE", e);
    }
    // Without it a daemon that double-forks would escape the timeout's
    // kill: refuse rather than run with a weaker guarantee.
    if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWPID) {
        return fail("unshare(CLONE_NEWPID)", e);
    }
    let last_cap =
        std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").ok().and_then(|t| t.trim().parse().ok()).unwrap_or(40);
    let all = crate::sys::caps::all_caps(last_cap);
    if let Err(e) =
        crate::sys::caps::drop_bounding(all, keep).and_then(|()| crate::sys::caps::set_process_caps(keep, last_cap))
    {
        return fail("dropping capabilities", e);
    }
    let set = handled();
    let signals = match crate::sys::signal::block(&set)
        .and_then(|()| nix::sys::signalfd::SignalFd::with_flags(&set, nix::sys::signalfd::SfdFlags::SFD_CLOEXEC))
    {
        Ok(s) => s,
        Err(e) => return fail("blocking signals", e),
    };
    let (status_r, status_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return fail("pipe", e),
    };
    // -t: the command's terminal, from the sandbox's devpts (`super::tty`).
    let opened = tty.map(|size| {
        let keys = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC);
        (size, super::tty::open_inside().and_then(|p| Ok((p, keys?))))
    });
    let (mut relay, slave) = match opened {
        Some(((rows, cols), Ok(((master, slave), (keys_r, keys_w))))) => {
            // Sized before the command starts (a shell reads it once).
            let ws = crate::sys::tty::Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
            let _ = crate::sys::tty::set_window_size(master.as_fd(), &ws);
            (Some(super::tty::InsideRelay::new(master, keys_w)), Some((slave, keys_r)))
        }
        Some((_, Err(e))) => return fail("opening a pty (/dev/pts/ptmx)", e),
        None => (None, None),
    };
    let one = match SingleThreaded::check() {
        Ok(one) => one,
        Err(e) => return fail("fork", e),
    };
    let init = match crate::sys::process::fork(&one) {
        Err(e) => return fail("fork", e),
        Ok(Forked::Child(alone)) => {
            drop(status_r);
            drop(relay);
            exit_now(inner_init(&alone, &set, &argv, first, seccomp.as_ref(), status_w, slave))
        }
        Ok(Forked::Parent { pid, .. }) => pid,
    };
    drop(status_w);
    drop(slave);
    // From here on the reaper runs under the command's filter too, so a
    // command able to ptrace it gains no syscall its filter refuses.
    if let Some(p) = &seccomp
        && let Err(e) = crate::sys::seccomp::install_filter(p.installed(), 0)
    {
        let _ = kill(init, Signal::SIGKILL);
        return fail("loading the seccomp filter", e);
    }
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let stdin = std::io::stdin();
    loop {
        let mut fds =
            vec![PollFd::new(signals.as_fd(), PollFlags::POLLIN), PollFd::new(status_r.as_fd(), PollFlags::POLLIN)];
        let (mut at_stdin, mut at_master) = (None, None);
        if let Some(r) = &relay {
            if r.stdin_open {
                at_stdin = Some(fds.len());
                fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
            }
            if r.master_open {
                at_master = Some(fds.len());
                fds.push(PollFd::new(r.master.as_fd(), PollFlags::POLLIN));
            }
        }
        if let Err(e) = poll(&mut fds, PollTimeout::NONE) {
            // Never spin (a filter refusing poll, say): end the exec.
            let _ = kill(init, Signal::SIGKILL);
            return fail("poll", e);
        }
        let ready = |i: Option<usize>| i.is_some_and(|i| fds[i].revents().is_some_and(|r| !r.is_empty()));
        let (sig_ready, status_ready) = (ready(Some(0)), ready(Some(1)));
        let (stdin_ready, master_ready) = (ready(at_stdin), ready(at_master));
        drop(fds);
        if let Some(r) = &mut relay {
            if stdin_ready {
                r.from_stdin();
            }
            if master_ready {
                r.from_master();
            }
        }
        if status_ready {
            // What the command wrote last is still in the master.
            if let Some(r) = &mut relay {
                r.drain();
            }
            let mut buf = [0u8; 4];
            return match nix::unistd::read(&status_r, &mut buf) {
                Ok(4) => end_like_raw(i32::from_ne_bytes(buf)),
                // The namespace's init died without a word (killed).
                _ => 128 + libc::SIGKILL,
            };
        }
        if !sig_ready {
            continue;
        }
        let Ok(Some(info)) = signals.read_signal() else { continue };
        match Signal::try_from(info.ssi_signo as i32) {
            Ok(Signal::SIGCHLD) => {
                while matches!(waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)), Ok(s) if s != WaitStatus::StillAlive) {
                }
            }
            Ok(s) if s == KILL_TREE => {
                let _ = kill(init, Signal::SIGKILL);
                let _ = waitpid(init, None);
                return 128 + libc::SIGKILL;
            }
            Ok(s) => {
                let _ = kill(init, s);
            }
            Err(_) => {}
        }
    }
}

/// Pid 1 of the exec's pid namespace: starts the command, forwards
/// signals to it, reports its raw wait status on `status`, then reaps
/// until nothing is left in the namespace.
fn inner_init(
    one: &SingleThreaded,
    set: &SigSet,
    argv: &[CString],
    first: &str,
    seccomp: Option<&crate::seccomp::Program>,
    status: std::os::fd::OwnedFd,
    tty: Option<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)>,
) -> i32 {
    let cmd = match crate::sys::process::fork(one) {
        Err(e) => return fail("fork", e),
        Ok(Forked::Child(alone)) => {
            let _ = SigSet::all().thread_unblock();
            // -t: a session of its own whose controlling terminal is the
            // pty's slave, also its stdin, stdout and stderr.
            if let Some((slave, keys)) = tty
                && let Err(e) = nix::unistd::setsid()
                    .map_err(|e| e.to_string())
                    .and_then(|_| crate::tty::pty::make_controlling(slave).map_err(|e| format!("{:?}", e.errno)))
                    // gVisor's TIOCSCTTY leaves the terminal without a
                    // foreground group (Ctrl-C would signal no one): the
                    // command's own group is made it, as Linux does.
                    .and_then(|()| {
                        nix::unistd::tcsetpgrp(std::io::stdin(), nix::unistd::getpgrp()).map_err(|e| e.to_string())
                    })
                    .map(|()| super::tty::key_watcher(&alone, keys, seccomp))
            {
                exit_now(fail("making the pty the controlling terminal", e));
            }
            // Last, as natively: nothing of husk's runs under the filter.
            // No flags: the command is single-threaded here (TSYNC is
            // moot) and gVisor refuses the audit-only ones.
            if let Some(p) = seccomp
                && let Err(e) = crate::sys::seccomp::install_filter(p.installed(), 0)
            {
                exit_now(fail("loading the seccomp filter", e));
            }
            let e = nix::unistd::execvp(&argv[0], argv).unwrap_err();
            let (code, what) = match e {
                Errno::ENOENT | Errno::ENOTDIR => (127, "command not found"),
                _ => (126, "cannot execute"),
            };
            crate::errln!("husk: {what}: {first}: {e}");
            exit_now(code)
        }
        Ok(Forked::Parent { pid, .. }) => pid,
    };
    drop(tty);
    if let Some(p) = seccomp
        && let Err(e) = crate::sys::seccomp::install_filter(p.installed(), 0)
    {
        let _ = kill(cmd, Signal::SIGKILL);
        return fail("loading the seccomp filter", e);
    }
    let mut status = Some(status);
    loop {
        // Never spin: on an error the namespace ends, and the exec with it.
        let sig = match set.wait() {
            Ok(s) => s,
            Err(e) => return fail("sigwait", e),
        };
        if sig != Signal::SIGCHLD {
            if status.is_some() {
                let _ = kill(cmd, if sig == KILL_COMMAND { Signal::SIGKILL } else { sig });
            }
            continue;
        }
        loop {
            match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Err(_) => {
                    // No child left: the command and all it started are done.
                    if status.is_none() {
                        return 0;
                    }
                    break;
                }
                Ok(st) if st.pid() == Some(cmd) => {
                    let raw = match st {
                        WaitStatus::Exited(_, c) => c << 8,
                        WaitStatus::Signaled(_, s, _) => s as i32,
                        _ => continue,
                    };
                    if let Some(w) = status.take() {
                        let _ = nix::unistd::write(&w, &raw.to_ne_bytes());
                    }
                    // Its background processes may hold the exec's stdio;
                    // this process no longer needs it.
                    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
                        use std::os::fd::AsRawFd;
                        for fd in 0..3 {
                            let _ = crate::sys::fd::dup_onto(null.as_raw_fd(), fd);
                        }
                    }
                }
                Ok(_) => {}
            }
        }
    }
}

/// `end_like` for a raw wait status.
fn end_like_raw(raw: i32) -> i32 {
    match decode(raw) {
        Some(st) => end_like(st),
        None => 125,
    }
}

fn decode(raw: i32) -> Option<WaitStatus> {
    let me = nix::unistd::getpid();
    match crate::sys::process::decode_wait_status(raw)? {
        crate::sys::process::ExitStatus::Exited(c) => Some(WaitStatus::Exited(me, c)),
        crate::sys::process::ExitStatus::Signaled(s) => {
            Signal::try_from(s).ok().map(|s| WaitStatus::Signaled(me, s, false))
        }
    }
}

/// Ends the reaper as the command ended: the same code, or death by the
/// same signal (so `runsc exec` reports exactly the command's status).
fn end_like(st: WaitStatus) -> i32 {
    match st {
        WaitStatus::Exited(_, code) => code,
        WaitStatus::Signaled(_, sig, _) => {
            let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
            // SIG_DFL for a signal cannot run a handler of ours.
            let _ = crate::sys::signal::reset_dispositions();
            let _ = SigSet::all().thread_unblock();
            let _ = nix::sys::signal::raise(sig);
            128 + sig as i32
        }
        _ => 125,
    }
}

/// The copier's side, inside gVisor (`main`'s `copy` role, started by `super::copy`): runs
/// the copy on its stdin or stdout, writes the JSON report to stderr and
/// returns the exit code.
pub fn copy_inside(cmd: &[String]) -> i32 {
    use crate::backend::native::copy::{self as native, Inside};
    use std::os::fd::AsFd;
    let result = copy_parse(cmd).and_then(|(op, limits)| {
        // Not ptraceable by the sandbox's processes of the same user
        // while it holds the stream.
        nix::sys::prctl::set_dumpable(false).map_err(|e| crate::copy::CopyError::fs("PR_SET_DUMPABLE", e))?;
        let fd = |f: std::io::Result<std::os::fd::OwnedFd>| f.map_err(crate::copy::CopyError::io);
        match op {
            Inside::Put { dest, shape } => {
                native::put(&dest, shape, OWN_ROOT, limits, fd(std::io::stdin().as_fd().try_clone_to_owned())?)
            }
            Inside::Get { path } => {
                native::get(&path, OWN_ROOT, limits, fd(std::io::stdout().as_fd().try_clone_to_owned())?)
            }
            Inside::List { path } => {
                native::list(&path, OWN_ROOT, limits, fd(std::io::stdout().as_fd().try_clone_to_owned())?)
            }
        }
    });
    let text = serde_json::to_vec(&result).unwrap_or_default();
    let _ = std::io::Write::write_all(&mut std::io::stderr(), &text);
    if result.is_ok() { 0 } else { 1 }
}

/// gVisor (2022-12) has no openat2: the copier's own root is the
/// sandbox's, and the kernel's walk from it stays there (`Resolve::OwnRoot`).
const OWN_ROOT: crate::copy::unpack::Resolve = crate::copy::unpack::Resolve::OwnRoot;

pub fn copy_parse(
    cmd: &[String],
) -> Result<(crate::backend::native::copy::Inside, crate::copy::Limits), crate::copy::CopyError> {
    let bad =
        || crate::copy::CopyError::Stream(format!("{} copy: expected OP PATH SHAPE MAX_BYTES MAX_ENTRIES", SUBCOMMAND));
    let [verb, path, shape, max_bytes, max_entries] = cmd else { return Err(bad()) };
    let shape = match shape.as_str() {
        "tree" => crate::copy::unpack::Shape::Tree,
        "entries" => crate::copy::unpack::Shape::Entries,
        _ => return Err(bad()),
    };
    let limits = crate::copy::Limits {
        max_bytes: max_bytes.parse().map_err(|_| bad())?,
        max_entries: max_entries.parse().map_err(|_| bad())?,
    };
    let op = match verb.as_str() {
        "put" => crate::backend::native::copy::Inside::Put { dest: path.clone(), shape },
        "get" => crate::backend::native::copy::Inside::Get { path: path.clone() },
        "list" => crate::backend::native::copy::Inside::List { path: path.clone() },
        _ => return Err(bad()),
    };
    Ok((op, limits))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reaper_argv_puts_the_command_after_the_separator() {
        let v = reap_argv(0, None, &["sh".into(), "-c".into(), "x".into()]);
        assert_eq!(v, ["/.husk", "gvisor-helper", "reap", "--", "0", "-", "sh", "-c", "x"]);
        let v = reap_argv(8, Some(&[0x0a, 0xff]), &["true".into()]);
        assert_eq!(v[4..], ["8", "0aff", "true"]);
    }
}
