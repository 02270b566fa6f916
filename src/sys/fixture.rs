//! Host-side helpers for `husk selftest`'s fixtures: a SysV message queue
//! the sandbox must not see, spawning a process that dies with husk or that
//! owns a terminal, and a flag that SIGINT/SIGTERM/SIGHUP raise so the
//! selftest can remove its fixtures instead of dying with them in place.
//! Unlike the rest of `sys`, these run on the host side only and may allocate.

use super::{Errno, SysResult, check};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

/// A SysV message queue created for one selftest run; removed on drop.
#[derive(Debug)]
pub struct MsgQueue {
    pub id: i32,
    pub key: i32,
}

impl MsgQueue {
    /// msgget(key, IPC_CREAT | IPC_EXCL | 0600): fails with EEXIST if the
    /// key is taken, so the queue is certainly ours.
    pub fn create(key: i32) -> SysResult<Self> {
        // SAFETY: integer-only syscall.
        let id = check(unsafe { libc::msgget(key, libc::IPC_CREAT | libc::IPC_EXCL | 0o600) }.into())?;
        Ok(MsgQueue { id: id as i32, key })
    }
}

impl Drop for MsgQueue {
    fn drop(&mut self) {
        // SAFETY: IPC_RMID takes no buffer; removing the queue we created.
        unsafe { libc::msgctl(self.id, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

/// The spawned process starts a new session whose controlling terminal is
/// its stdin (which must be a terminal): the position of a `husk run`
/// started from an interactive shell, the setup of CVE-2017-5226.
pub fn with_controlling_tty(cmd: &mut Command) {
    // SAFETY: the closure runs between fork and exec and calls only the
    // async-signal-safe setsid and ioctl on fd 0.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn note_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes SIGINT, SIGTERM and SIGHUP set a flag instead of killing husk.
pub fn catch_interrupts() -> SysResult<()> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: sigaction is plain old data; the handler only stores to an
        // atomic, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = note_interrupt as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(Errno::last());
            }
        }
    }
    Ok(())
}

/// Has one of the signals `catch_interrupts` handles arrived?
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
