//! The named steps of the sandbox's setup. A failure in the child is
//! reported as (step, errno, detail) over the sync channel, so the parent can
//! say "setup failed at pivot_root: EINVAL" instead of "exit 1".

use nix::errno::Errno;

macro_rules! steps {
    ($($variant:ident = $num:literal => $name:literal,)*) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u16)]
        pub enum Step { $($variant = $num,)* }

        impl Step {
            pub fn name(self) -> &'static str {
                match self { $(Step::$variant => $name,)* }
            }
            pub fn from_u16(n: u16) -> Option<Step> {
                match n { $($num => Some(Step::$variant),)* _ => None }
            }
        }
    };
}

steps! {
    AwaitRelease = 1 => "await_release",
    BecomeRoot = 2 => "become_root",
    UnshareCgroupNs = 3 => "unshare_cgroup_ns",
    SetHostname = 4 => "set_hostname",
    Loopback = 5 => "loopback_up",
    NewNetns = 17 => "new_netns",
    PrivateMounts = 6 => "private_mounts",
    OpenSources = 16 => "open_sources",
    Staging = 7 => "mount_staging",
    AssembleRoot = 8 => "assemble_root",
    MountFilesystems = 9 => "mount_filesystems",
    ReadOnlyRoot = 10 => "read_only_root",
    PivotRoot = 11 => "pivot_root",
    Chdir = 12 => "chdir_workdir",
    VerifyCwd = 13 => "verify_cwd",
    RedirectStdio = 18 => "redirect_stdio",
    BlockSignals = 19 => "block_signals",
    ForkCommand = 14 => "fork_command",
    InitConfine = 15 => "confine_init",
    Setsid = 20 => "setsid",
    SetIdentity = 21 => "set_identity",
    DropCaps = 22 => "drop_capabilities",
    Rlimits = 23 => "set_rlimits",
    ResetSignals = 28 => "reset_signals",
    NoNewPrivs = 24 => "no_new_privs",
    CloseFds = 25 => "close_fds",
    Seccomp = 26 => "install_seccomp",
    Exec = 27 => "exec",
    JoinCgroup = 30 => "join_cgroup",
    JoinNamespaces = 31 => "join_namespaces",
    ExecRunsc = 40 => "exec_runsc",
}

/// A failed step: which one, the errno, and a step-specific detail (for
/// mount_filesystems, the index of the mount op).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepError {
    pub step: Step,
    pub errno: Errno,
    pub detail: u32,
}

impl StepError {
    pub fn new(step: Step, errno: Errno) -> Self {
        StepError { step, errno, detail: 0 }
    }
}

/// `result.at(Step::X)` tags an errno with the step it happened in.
pub trait AtStep<T> {
    fn at(self, step: Step) -> Result<T, StepError>;
}

impl<T> AtStep<T> for Result<T, Errno> {
    fn at(self, step: Step) -> Result<T, StepError> {
        self.map_err(|e| StepError::new(step, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_round_trip_through_their_wire_number() {
        for s in [Step::AwaitRelease, Step::PivotRoot, Step::Exec, Step::JoinNamespaces] {
            assert_eq!(Step::from_u16(s as u16), Some(s));
        }
        assert_eq!(Step::from_u16(999), None);
        assert_eq!(Step::PivotRoot.name(), "pivot_root");
    }
}
