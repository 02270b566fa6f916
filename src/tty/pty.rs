//! The sandbox's side of `-t`: a pty pair made inside the sandbox, so the
//! slave belongs to the sandbox's private devpts instance (mounted with
//! `newinstance`, `ptmxmode=0666`: rootfs/plan.rs), never to the host's.
//! Runs in the command's process between clone and execve: no allocation.

use crate::step::{AtStep, Step, StepError};
use crate::sync::{Channel, Msg};
use crate::sys::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// The sandbox's ptmx, by its real path: /dev/ptmx is a symlink to it in
/// every husk root, and a path with no symlink to follow cannot be bent by
/// a sandbox that rewrote /dev (a live sandbox's root may have).
const PTMX: &std::ffi::CStr = c"/dev/pts/ptmx";

/// A fresh pty pair.
pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

impl Pty {
    /// Opens the sandbox's ptmx and the new pair's slave. The slave is
    /// opened from the master (TIOCGPTPEER), which also proves the file
    /// opened is a pty master.
    pub fn open() -> Result<Pty, Errno> {
        let how = OpenHow::new()
            .flags(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        let master = openat2(nix::fcntl::AT_FDCWD, PTMX, how)?;
        crate::sys::tty::unlock(master.as_fd())?;
        let slave = crate::sys::tty::open_peer(master.as_fd())?;
        Ok(Pty { master, slave })
    }
}

/// Step open_pty: makes the pair and sends the master to whoever watches
/// the command (husk's `Msg::PtyMaster`); returns the slave. The master
/// is closed here: only husk holds it.
pub fn open_and_hand_out(chan: &Channel) -> Result<OwnedFd, StepError> {
    let pty = Pty::open().at(Step::OpenPty)?;
    chan.send_fd(Msg::PtyMaster, pty.master.as_fd()).at(Step::OpenPty)?;
    Ok(pty.slave)
}

/// Step controlling_tty: the slave becomes the controlling terminal of the
/// calling session leader (the command, right after its setsid) and its
/// stdin, stdout and stderr.
pub fn make_controlling(slave: OwnedFd) -> Result<(), StepError> {
    crate::sys::tty::set_controlling(slave.as_fd()).at(Step::ControllingTty)?;
    for target in 0..3 {
        crate::sys::fd::dup_onto(slave.as_raw_fd(), target).at(Step::ControllingTty)?;
    }
    Ok(())
}
