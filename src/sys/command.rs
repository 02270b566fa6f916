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
