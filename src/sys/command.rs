//! Helper processes started with `std::process::Command`.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// The child gets SIGKILL when husk dies, so no helper (a `runsc kill`,
/// say) outlives a killed husk.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    // SAFETY: the closure runs between fork and exec and only makes the
    // async-signal-safe prctl(2) syscall; it allocates nothing and touches
    // no lock.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// The spawned process starts a new session whose controlling terminal is
/// its stdin (which must be a terminal).
pub fn with_controlling_tty(cmd: &mut Command) -> &mut Command {
    // SAFETY: the closure runs between fork and exec and calls only the
    // async-signal-safe setsid and ioctl on fd 0.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}
