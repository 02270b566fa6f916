//! Explain mode, husk's side: the supervisor holds the filter's listener
//! and answers every notification itself.
//!
//! Why user notifications and not SECCOMP_RET_LOG: RET_LOG *allows* the
//! syscall after logging it (it would weaken the filter), and the log goes to
//! the audit subsystem or a rate-limited kernel printk that a sandbox manager
//! cannot read reliably (needs CAP_SYSLOG or auditd, is host-global, and
//! drops records under load). A notification is per-sandbox, carries the
//! exact syscall and arguments, and costs nothing for allowed calls.
//!
//! Safety of the answer: the supervisor never sends
//! SECCOMP_USER_NOTIF_FLAG_CONTINUE, so a notified syscall can only fail.
//! Its errno is what the enforcing program returns for the very same
//! `seccomp_data` (`eval::run`); anything else (which the construction of
//! the notify variant rules out) is answered EPERM. If husk dies, the kernel
//! fails pending and later notified syscalls with ENOSYS: still denied.

use super::compile::{RET_ACTION_FULL, RET_DATA, RET_ERRNO, SockFilter};
use super::eval;
use crate::sys::Errno;
use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;

/// One denied syscall: how often, and with which errno.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Denial {
    pub count: u64,
    pub errno: u16,
}

/// Denials by syscall number.
pub type Denials = BTreeMap<i64, Denial>;

/// The errno the enforcing program gives this syscall; EPERM for any
/// verdict that is not an errno.
pub fn errno_for(enforcing: &[SockFilter], data: &eval::Data) -> u16 {
    let ret = eval::run(enforcing, data);
    if ret & RET_ACTION_FULL == RET_ERRNO { (ret & RET_DATA) as u16 } else { libc::EPERM as u16 }
}

/// Receives one notification and fails its syscall. `Err` means the
/// listener is unusable (the caller stops polling it).
pub fn answer(listener: BorrowedFd<'_>, enforcing: &[SockFilter], denied: &mut Denials) -> Result<(), Errno> {
    let n = match crate::sys::seccomp::notif_recv(listener) {
        Ok(n) => n,
        // The task was killed, or left the syscall on a signal, between
        // poll and recv: nothing to answer.
        Err(Errno::ENOENT) | Err(Errno::EINTR) => return Ok(()),
        Err(e) => return Err(e),
    };
    let d = &n.data;
    let data = eval::Data { nr: d.nr, arch: d.arch, ip: d.instruction_pointer, args: d.args };
    let errno = errno_for(enforcing, &data);
    match crate::sys::seccomp::notif_send(listener, n.id, errno) {
        Ok(()) => {
            let e = denied.entry(d.nr as i64).or_default();
            e.count += 1;
            e.errno = errno;
            Ok(())
        }
        // Gone before the answer (killed, or interrupted: a restarted
        // syscall notifies again and is counted then).
        Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(e),
    }
}
