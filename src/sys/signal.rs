//! Signal dispositions the command must not inherit.

use super::SysResult;

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
