//! The named steps of the sandbox's setup. A failure in the child is
//! reported as (step, errno, detail) over the sync channel, so the parent can
//! say "setup failed at pivot_root: EINVAL" instead of "exit 1".
//!
//! `Phase` names every place a run can fail, the child's steps and the
//! parent's own phases (plan, cgroup, runsc, ...): the verdict's `error.step`.

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
            pub const ALL: &[Step] = &[$(Step::$variant,)*];
        }
    };
}

steps! {
    AwaitRelease = 1 => "await_release",
    BecomeRoot = 2 => "become_root",
    UnshareCgroupNs = 3 => "unshare_cgroup_ns",
    SetHostname = 4 => "set_hostname",
    Loopback = 5 => "loopback_up",
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
    OpenPty = 32 => "open_pty",
    ControllingTty = 33 => "controlling_tty",
    Rlimits = 23 => "set_rlimits",
    ResetSignals = 28 => "reset_signals",
    NoNewPrivs = 24 => "no_new_privs",
    CloseFds = 25 => "close_fds",
    Seccomp = 26 => "install_seccomp",
    Exec = 27 => "exec",
    JoinCgroup = 30 => "join_cgroup",
    JoinNamespaces = 31 => "join_namespaces",
    EgressListeners = 34 => "egress_listeners",
    PublishFactory = 35 => "publish_factory",
    UnsharePidNs = 36 => "unshare_pid_ns",
    ExecRunsc = 40 => "exec_runsc",
    RootfsPropagation = 50 => "rootfs_propagation",
    CreateDevices = 51 => "create_devices",
    ContainerHooks = 52 => "container_hooks",
    MaskPaths = 53 => "mask_paths",
    Sysctl = 54 => "set_sysctl",
    ConsoleSocket = 55 => "console_socket",
    AwaitStart = 56 => "await_start",
    OomScoreAdj = 57 => "oom_score_adj",
}

macro_rules! phases {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// Where a run failed: one of the child's setup steps, or a phase the
        /// parent runs itself. Serialized as its name (`pivot_root`, `plan`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Phase {
            Step(Step),
            $($(#[$doc])* $variant,)*
        }

        impl Phase {
            pub const PARENT: &[Phase] = &[$(Phase::$variant,)*];

            pub fn name(self) -> &'static str {
                match self { Phase::Step(s) => s.name(), $(Phase::$variant => $name,)* }
            }
        }
    };
}

phases! {
    /// The command line or a configuration value was refused.
    Arguments => "arguments",
    /// The image or root directory could not be resolved.
    Root => "root",
    /// No backend fits the request on this host.
    Backend => "backend",
    /// The spec did not validate into a plan.
    Plan => "plan",
    /// Creating, configuring or joining the sandbox's cgroup.
    Cgroup => "cgroup",
    /// A limit the backend cannot apply as asked (runsc: a --pids the
    /// command could escape inside gVisor, or too large a host budget).
    Limits => "limits",
    /// Blocking the forwarded signals / the signalfd.
    Signals => "signals",
    /// Pipes for the command's stdio.
    Stdio => "stdio",
    /// Cloning the sandbox's init.
    Clone => "clone",
    /// The parent<->child sync channel.
    SyncChannel => "sync_channel",
    /// Writing the uid/gid maps of the sandbox's user namespace.
    WriteIdMaps => "write_id_maps",
    /// The sandbox's init ended before the command ran.
    Init => "init",
    /// The sandbox's setup did not report in time.
    Setup => "setup",
    /// Waiting for an exec's command.
    Wait => "wait",
    /// Making husk a child subreaper.
    Subreaper => "subreaper",
    /// The runsc backend: its configuration, or runsc itself failing.
    Runsc => "runsc",
    /// `runsc run --detach` starting a live sandbox.
    RunscRun => "runsc_run",
    /// `runsc exec` in a live sandbox.
    RunscExec => "runsc_exec",
    /// Rendering runsc's OCI bundle.
    Bundle => "bundle",
    /// runsc's command line.
    RunscArgs => "runsc_args",
    /// The seccomp profile handed to runsc.
    Seccomp => "seccomp",
    /// husk's state directory.
    StateDir => "state_dir",
    /// Starting the egress allowlist's proxy (`--network allow=`).
    EgressProxy => "egress_proxy",
    /// Binding `--publish`'s host ports and starting their forwarder.
    Publish => "publish",
    /// Finding a sandbox (unknown, gone, name taken).
    Sandbox => "sandbox",
    /// A sandbox that runs one exec at a time is running one.
    Busy => "busy",
    /// A sandbox's record or files under the state directory.
    State => "state",
    /// A sandbox's supervisor: reaching it, or it failing.
    Supervisor => "supervisor",
    /// The socket pair between `husk create` and the supervisor.
    Socketpair => "socketpair",
    /// Forking the sandbox's supervisor.
    ForkSupervisor => "fork_supervisor",
    /// Copying files in or out of a sandbox (`husk cp`, --copy-in/--copy-out).
    Copy => "copy",
    /// The image store: importing, listing, inspecting, removing images.
    Image => "image",
    /// Fetching an image from a registry.
    Pull => "pull",
    /// Claiming from a pool of `husk serve` (`husk create --pool`).
    Pool => "pool",
    /// A warm interpreter or session (`create --warm` / `--session`,
    /// `exec --code`): starting it, or handing it a call.
    Warm => "warm",
    /// `create --ready-cmd`: the readiness check failed, timed out or could
    /// not run; the sandbox was destroyed.
    ReadyCheck => "ready_check",
    /// `husk selftest` itself (its probe binary, a probe's run).
    Selftest => "selftest",
    /// `husk build` (its context, Dockerfile, a step).
    Build => "build",
}

impl Phase {
    pub fn from_name(name: &str) -> Option<Phase> {
        Step::ALL.iter().map(|s| Phase::Step(*s)).chain(Phase::PARENT.iter().copied()).find(|p| p.name() == name)
    }
}

impl From<Step> for Phase {
    fn from(s: Step) -> Phase {
        Phase::Step(s)
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for Phase {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Phase {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Phase, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Phase::from_name(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown step {name:?}")))
    }
}

/// An errno as the verdict spells it: its symbolic name (`EINVAL`).
pub fn errno_name(e: Errno) -> String {
    format!("{e:?}")
}

/// `Option<Errno>` as `null` or its symbolic name (serde `serialize_with`).
pub fn serialize_errno<S: serde::Serializer>(e: &Option<Errno>, s: S) -> Result<S::Ok, S::Error> {
    match e {
        Some(e) => s.serialize_str(&errno_name(*e)),
        None => s.serialize_none(),
    }
}

/// The errno an `io::Error` carries, when the kernel gave one.
pub fn io_errno(e: &std::io::Error) -> Option<Errno> {
    e.raw_os_error().map(Errno::from_raw)
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

    #[test]
    fn every_phase_has_one_name_and_parses_back() {
        let all: Vec<Phase> = Step::ALL.iter().map(|s| Phase::Step(*s)).chain(Phase::PARENT.iter().copied()).collect();
        let mut names: Vec<&str> = all.iter().map(|p| p.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len(), "two phases share a name: the verdict could not tell them apart");
        for p in all {
            assert_eq!(Phase::from_name(p.name()), Some(p));
            assert_eq!(serde_json::to_value(p).unwrap(), serde_json::json!(p.name()));
        }
    }

    #[test]
    fn errno_is_named_symbolically() {
        assert_eq!(errno_name(Errno::EINVAL), "EINVAL");
        assert_eq!(io_errno(&std::io::Error::from_raw_os_error(libc::ENOENT)), Some(Errno::ENOENT));
    }
}
