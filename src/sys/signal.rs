//! Signal dispositions the command must not inherit, and a flag that
//! signals raise instead of killing the process.

use super::{Errno, SysResult};
use std::sync::atomic::{AtomicBool, Ordering};

/// Adds `set` to this thread's blocked signals. Through sigprocmask, not
/// nix's `SigSet::thread_block`: pthread_sigmask returns its error number
/// instead of -1, and nix's wrapper takes any return but -1 for success, so
/// a refused block (e.g. under a seccomp filter) went unreported. husk's
/// processes are single-threaded where they change masks, and on Linux
/// sigprocmask acts on the calling thread.
pub fn block(set: &nix::sys::signal::SigSet) -> SysResult<()> {
    nix::sys::signal::sigprocmask(nix::sys::signal::SigmaskHow::SIG_BLOCK, Some(set), None)
}

/// Replaces this thread's blocked signals with `set` (see `block`).
pub fn set_mask(set: &nix::sys::signal::SigSet) -> SysResult<()> {
    nix::sys::signal::sigprocmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, Some(set), None)
}

/// Resets every catchable signal to SIG_DFL. Ignored dispositions survive
/// execve (Rust's runtime ignores SIGPIPE, for one), so the command would
/// otherwise start with a different signal setup than under a shell.
pub fn reset_dispositions() -> SysResult<()> {
    for sig in 1..libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: installing SIG_DFL has no handler code to be unsound;
        // failures for reserved signals (32, 33 used by libc) are ignored.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    Ok(())
}

static RAISED: AtomicBool = AtomicBool::new(false);

extern "C" fn raise_flag(_: libc::c_int) {
    RAISED.store(true, Ordering::SeqCst);
}

/// Makes each of `signals` set one process-wide flag (`flag_raised`)
/// instead of running its default action.
pub fn raise_flag_on(signals: &[libc::c_int]) -> SysResult<()> {
    for &sig in signals {
        // SAFETY: sigaction is plain old data; the handler only stores to an
        // atomic, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = raise_flag as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(Errno::last());
            }
        }
    }
    Ok(())
}

/// Has one of the signals given to `raise_flag_on` arrived?
pub fn flag_raised() -> bool {
    RAISED.load(Ordering::SeqCst)
}

/// Ends husk as a closed pipe ends `ls`: killed by SIGPIPE (Rust's runtime
/// ignores it, so writes return EPIPE instead; husk notices, then dies the
/// way a shell pipeline expects: status 141, nothing printed).
pub fn die_of_sigpipe() -> ! {
    let mut set = nix::sys::signal::SigSet::empty();
    set.add(nix::sys::signal::Signal::SIGPIPE);
    let _ = set.thread_unblock();
    // SAFETY: installing SIG_DFL has no handler code to be unsound; the
    // process is about to end by this very signal.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGPIPE);
    std::process::exit(128 + libc::SIGPIPE)
}
