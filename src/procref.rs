//! Processes named so that a recycled pid is never mistaken for them, for
//! whoever must find a process again later (a sandbox's supervisor and
//! init, a runsc sandbox `husk gc` is to reap).

use serde::{Deserialize, Serialize};

/// A process, named so that a recycled pid is never mistaken for it: its
/// pid and its start time (clock ticks after boot, /proc/<pid>/stat field
/// 22), which the kernel never gives two processes with the same pid.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcRef {
    pub pid: i32,
    pub start_time: u64,
}

/// Field 22 (starttime) of a /proc/<pid>/stat text; the comm field may
/// contain spaces and parentheses, so fields are counted after the last ')'.
pub fn start_time_of(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

impl ProcRef {
    pub fn of(pid: i32) -> Option<ProcRef> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(ProcRef { pid, start_time: start_time_of(&stat)? })
    }

    /// The same process still exists (a zombie counts: it holds the pid).
    pub fn alive(&self) -> bool {
        ProcRef::of(self.pid).is_some_and(|p| p == *self)
    }

    /// A pidfd for exactly this process: opened first, then the start time
    /// checked, so a pid recycled in between is caught.
    pub fn pidfd(&self) -> Option<std::os::fd::OwnedFd> {
        let fd = crate::sys::process::pidfd_open(nix::unistd::Pid::from_raw(self.pid)).ok()?;
        self.alive().then_some(fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_survives_odd_command_names() {
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 123456 0 0";
        assert_eq!(start_time_of(stat), Some(123456));
        let me = ProcRef::of(std::process::id() as i32).unwrap();
        assert!(me.alive());
        assert!(!ProcRef { start_time: me.start_time + 1, ..me }.alive(), "a recycled pid is not the same process");
    }
}
