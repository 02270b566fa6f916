//! SysV IPC: the message queue `husk selftest` creates on the host to
//! prove the sandbox's IPC namespace hides it.

use super::{SysResult, check};

/// msgget(key, IPC_CREAT | IPC_EXCL | 0600): a new queue's id; EEXIST if
/// `key` is taken, so a queue returned here is certainly the caller's.
pub fn msg_queue_create(key: i32) -> SysResult<i32> {
    // SAFETY: integer-only syscall.
    let id = check(unsafe { libc::msgget(key, libc::IPC_CREAT | libc::IPC_EXCL | 0o600) }.into())?;
    Ok(id as i32)
}

/// msgctl(id, IPC_RMID): removes the queue.
pub fn msg_queue_remove(id: i32) -> SysResult<()> {
    // SAFETY: IPC_RMID takes no buffer.
    check(unsafe { libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()) }.into()).map(|_| ())
}
