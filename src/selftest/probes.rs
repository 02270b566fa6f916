//! The probe table: what `husk selftest` tries, as data. Each entry is one
//! `husk run` of the in-sandbox probe (`husk-probe`, see tests/probe/README.md)
//! with husk's defaults, and the rule that judges its report.
//!
//! Arguments may name host fixtures the selftest sets up for the run
//! (`fixtures.rs`): `{probe}` (the probe inside the sandbox), `{marker}`
//! (absolute host path of the marker file), `{up}` (`../` repeated), `{tcp4}`
//! / `{tcp6}` (host loopback listeners), `{abstract}` (a host abstract unix
//! socket), `{victim}` (host pid of a process to signal), `{block_dev}` /
//! `{block_dev_nums}` (a host block device, its MAJOR:MINOR), `{suid_host}` /
//! `{suid_sandbox}` (setuid copies of the probe owned by host root / by
//! sandbox root), `{mem_bomb}`, `{fork_max}`,
//! `{tmp_bomb}`, `{workdir_bomb}`, `{shm_bomb}` (sizes past the default
//! limits), `{scratch}` (a file name unique to the run: the selftest checks
//! the host for it afterwards) and `{token}` (an argv marker to find leftover
//! processes on the host by).

use super::egress::Expect;
use super::judge::Judge;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Privileges,
    Filesystem,
    Network,
    #[serde(rename = "pid_ipc_uts")]
    PidIpcUts,
    Resources,
    Timeout,
}

impl Category {
    pub fn label(self) -> &'static str {
        match self {
            Category::Privileges => "privileges",
            Category::Filesystem => "filesystem",
            Category::Network => "network",
            Category::PidIpcUts => "pid_ipc_uts",
            Category::Resources => "resources",
            Category::Timeout => "timeout",
        }
    }
}

/// What the sandbox's stdin is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stdin {
    /// /dev/null.
    Null,
    /// A host pseudo-terminal that is the controlling terminal of the
    /// `husk run` process (as when husk is started from a shell).
    Tty,
}

/// The default wall-clock bound of one probe run.
pub const DEFAULT_TIMEOUT_S: u32 = 10;

#[derive(Clone, Copy, Debug)]
pub struct Probe {
    /// Unique, kebab-case; `--only` selects by it.
    pub name: &'static str,
    pub category: Category,
    /// What the probe attempts, in a few words.
    pub about: &'static str,
    /// The command inside the sandbox, with placeholders.
    pub argv: &'static [&'static str],
    /// `--timeout` of the run, seconds.
    pub timeout_s: u32,
    pub stdin: Stdin,
    /// `--user` of the run (the only non-default sandbox option a probe
    /// uses, besides `husk_args`).
    pub user: Option<&'static str>,
    /// More `husk run` options, with placeholders: the egress probes'
    /// `--network allow=` and `--add-host` (their point is a sandbox with
    /// an allowlist).
    pub husk_args: &'static [&'static str],
    pub judge: Judge,
}

const fn p(
    name: &'static str,
    category: Category,
    about: &'static str,
    argv: &'static [&'static str],
    judge: Judge,
) -> Probe {
    Probe {
        name,
        category,
        about,
        argv,
        timeout_s: DEFAULT_TIMEOUT_S,
        stdin: Stdin::Null,
        user: None,
        husk_args: &[],
        judge,
    }
}

impl Probe {
    const fn timeout(mut self, seconds: u32) -> Self {
        self.timeout_s = seconds;
        self
    }

    const fn tty(mut self) -> Self {
        self.stdin = Stdin::Tty;
        self
    }

    const fn user(mut self, user: &'static str) -> Self {
        self.user = Some(user);
        self
    }

    const fn with(mut self, husk_args: &'static [&'static str]) -> Self {
        self.husk_args = husk_args;
        self
    }
}

use Category::*;
use Judge::*;

/// `try-syscall NAME`, judged by `Syscall`: `passed` are the errnos that
/// show the kernel's permission check let the call through.
const fn sys(
    name: &'static str,
    about: &'static str,
    argv: &'static [&'static str],
    passed: &'static [&'static str],
) -> Probe {
    p(name, Privileges, about, argv, Syscall { passed, absent: &[] })
}

pub const PROBES: &[Probe] = &[
    // ------------------------------------------------------------ privileges
    p("capabilities", Privileges, "hold any capability (all five sets)", &["{probe}", "caps"], Caps),
    p("no-new-privs", Privileges, "run without no_new_privs", &["{probe}", "caps"], NoNewPrivs),
    p(
        "setuid-host-root",
        Privileges,
        "setuid/setgid to the host id behind sandbox root",
        &["{probe}", "setuid-root"],
        SetuidHostRoot,
    ),
    p(
        "setuid-binary-host-root",
        Privileges,
        "exec a setuid binary owned by host root, as uid 1000",
        &["{suid_host}", "ids"],
        SuidExec,
    )
    .user("1000:1000"),
    p(
        "setuid-binary-sandbox-root",
        Privileges,
        "exec a setuid binary owned by sandbox root, as uid 1000",
        &["{suid_sandbox}", "ids"],
        SuidExec,
    )
    .user("1000:1000"),
    sys(
        "module-init",
        "load a kernel module (init_module)",
        &["{probe}", "try-syscall", "init_module"],
        &["ENOEXEC", "EINVAL", "EFAULT", "EBADMSG", "EKEYREJECTED"],
    ),
    sys(
        "module-finit",
        "load a kernel module from a file (finit_module)",
        &["{probe}", "try-syscall", "finit_module"],
        &["EBADF", "EINVAL"],
    ),
    sys(
        "module-delete",
        "unload a kernel module (delete_module)",
        &["{probe}", "try-syscall", "delete_module"],
        &["ENOENT", "EAGAIN"],
    ),
    sys("kexec", "load a new kernel (kexec_load)", &["{probe}", "try-syscall", "kexec_load"], &["EINVAL", "EBUSY"]),
    sys("reboot", "reboot the host (reboot, bad magic)", &["{probe}", "try-syscall", "reboot"], &["EINVAL"]),
    sys("mount", "mount a tmpfs", &["{probe}", "try-syscall", "mount"], &[]),
    sys("umount", "unmount (umount2)", &["{probe}", "try-syscall", "umount2"], &["EINVAL"]),
    sys("fsopen", "new mount API: fsopen(\"tmpfs\")", &["{probe}", "try-syscall", "fsopen"], &[]),
    sys("open-tree", "new mount API: clone the root mount (open_tree)", &["{probe}", "try-syscall", "open_tree"], &[]),
    sys("move-mount", "new mount API: move_mount", &["{probe}", "try-syscall", "move_mount"], &["ENOENT"]),
    sys(
        "mount-setattr",
        "new mount API: mount_setattr on /",
        &["{probe}", "try-syscall", "mount_setattr"],
        &["EINVAL"],
    ),
    sys("chroot", "chroot", &["{probe}", "try-syscall", "chroot"], &[]),
    sys("pivot-root", "pivot_root", &["{probe}", "try-syscall", "pivot_root"], &["ENOENT", "EINVAL", "EBUSY"]),
    p(
        "chroot-escape",
        Privileges,
        "chroot breakout (chroot, fchdir out, climb ..) to the host marker",
        &["{probe}", "chroot-escape", "{marker}"],
        Marker,
    ),
    sys("ptrace-init", "ptrace the sandbox's pid 1 (husk's init)", &["{probe}", "try-syscall", "ptrace-attach-1"], &[]),
    sys(
        "personality-aslr",
        "turn off ASLR for what it execs next (personality ADDR_NO_RANDOMIZE)",
        &["{probe}", "try-syscall", "personality"],
        &[],
    ),
    sys("nested-userns", "create a nested user namespace", &["{probe}", "try-syscall", "clone-newuser"], &[]),
    sys("unshare", "unshare a new mount namespace", &["{probe}", "try-syscall", "unshare"], &[]),
    // ENOENT: the sandbox kernel has no /proc/self/ns to join (gVisor).
    p(
        "setns",
        Privileges,
        "setns into a namespace",
        &["{probe}", "try-syscall", "setns"],
        Syscall { passed: &[], absent: &["ENOENT"] },
    ),
    sys("keyctl", "kernel keyrings: keyctl", &["{probe}", "try-syscall", "keyctl"], &["ENOKEY"]),
    sys("add-key", "kernel keyrings: add_key", &["{probe}", "try-syscall", "add_key"], &["EDQUOT"]),
    sys("request-key", "kernel keyrings: request_key", &["{probe}", "try-syscall", "request_key"], &["ENOKEY"]),
    sys("bpf", "load a BPF map (bpf)", &["{probe}", "try-syscall", "bpf"], &[]),
    sys("perf-event-open", "open a perf event", &["{probe}", "try-syscall", "perf_event_open"], &[]),
    sys("userfaultfd", "userfaultfd (kernel-fault races)", &["{probe}", "try-syscall", "userfaultfd"], &[]),
    sys(
        "io-uring",
        "io_uring_setup (bypasses seccomp for its operations)",
        &["{probe}", "try-syscall", "io_uring_setup"],
        &[],
    ),
    sys("settimeofday", "change the host clock (settimeofday)", &["{probe}", "try-syscall", "settimeofday"], &[]),
    sys("clock-settime", "change the host clock (clock_settime)", &["{probe}", "try-syscall", "clock_settime"], &[]),
    sys("adjtimex", "adjust the host clock (adjtimex)", &["{probe}", "try-syscall", "adjtimex"], &[]),
    sys("iopl", "raw I/O port access (iopl)", &["{probe}", "try-syscall", "iopl"], &[]),
    sys("ioperm", "raw I/O port access (ioperm)", &["{probe}", "try-syscall", "ioperm"], &[]),
    sys(
        "open-by-handle-at",
        "open a file by handle, past any mount (shocker)",
        &["{probe}", "try-syscall", "open_by_handle_at"],
        &["ESTALE", "EINVAL"],
    ),
    sys("swapon", "enable host swap (swapon)", &["{probe}", "try-syscall", "swapon"], &["ENOENT"]),
    sys("acct", "switch host process accounting (acct)", &["{probe}", "try-syscall", "acct"], &["ENOENT"]),
    p(
        "tiocsti",
        Privileges,
        "inject input into the caller's terminal (TIOCSTI, CVE-2017-5226)",
        &["{probe}", "tiocsti"],
        Tiocsti,
    )
    .tty(),
    p(
        "personality-page-zero",
        Privileges,
        "map page 0 via personality(MMAP_PAGE_ZERO) or MAP_FIXED",
        &["{probe}", "page-zero"],
        PageZero,
    ),
    sys("x32-abi", "reach syscalls through the x32 ABI", &["{probe}", "try-syscall", "x32-getpid"], &[]),
    sys("i386-abi", "reach syscalls through the i386 ABI (int 0x80)", &["{probe}", "try-syscall", "i386-int80"], &[]),
    // ------------------------------------------------------------ filesystem
    p("write-root", Filesystem, "create a file in /", &["{probe}", "write", "/{scratch}"], WriteDenied),
    p("write-usr", Filesystem, "create a file in /usr", &["{probe}", "write", "/usr/{scratch}"], WriteDenied),
    p("write-etc", Filesystem, "create a file in /etc", &["{probe}", "write", "/etc/{scratch}"], WriteDenied),
    p(
        "write-proc-sys",
        Filesystem,
        "open /proc/sys/kernel/core_pattern for writing",
        &["{probe}", "write", "/proc/sys/kernel/core_pattern"],
        WriteDenied,
    ),
    p(
        "write-sysrq-trigger",
        Filesystem,
        "open /proc/sysrq-trigger for writing",
        &["{probe}", "write", "/proc/sysrq-trigger"],
        WriteDenied,
    ),
    p(
        "write-sys",
        Filesystem,
        "open /sys/kernel/rcu_expedited for writing",
        &["{probe}", "write", "/sys/kernel/rcu_expedited"],
        WriteDenied,
    ),
    p(
        "cgroup-release-agent",
        Filesystem,
        "reach a writable release_agent: visible, or by mounting cgroup v1 (CVE-2022-0492)",
        &["{probe}", "cgroup-escape"],
        CgroupEscape,
    ),
    p("proc-kcore", Filesystem, "read /proc/kcore (host memory)", &["{probe}", "read", "/proc/kcore"], MaskedRead),
    p("proc-kmsg", Filesystem, "read /proc/kmsg (host kernel log)", &["{probe}", "read", "/proc/kmsg"], MaskedRead),
    p("proc-keys", Filesystem, "read /proc/keys (host keyrings)", &["{probe}", "read", "/proc/keys"], MaskedRead),
    p(
        "proc-timer-list",
        Filesystem,
        "read /proc/timer_list (host timers)",
        &["{probe}", "read", "/proc/timer_list"],
        MaskedRead,
    ),
    p(
        "proc-sched-debug",
        Filesystem,
        "read /proc/sched_debug (host tasks)",
        &["{probe}", "read", "/proc/sched_debug"],
        MaskedRead,
    ),
    p(
        "dev-nodes",
        Filesystem,
        "find device nodes beyond null/zero/full/random/urandom/tty in /dev",
        &["{probe}", "ls", "/dev"],
        DevNodes,
    ),
    p(
        "mknod",
        Filesystem,
        "mknod a node for the host's disk and read it",
        &["{probe}", "mknod-read", "/tmp/{scratch}", "{block_dev_nums}"],
        Mknod,
    ),
    p("dev-mem", Filesystem, "read /dev/mem", &["{probe}", "read", "/dev/mem"], DeviceRead),
    p("dev-kmsg", Filesystem, "read /dev/kmsg", &["{probe}", "read", "/dev/kmsg"], DeviceRead),
    p("block-device", Filesystem, "read the host's block device", &["{probe}", "read", "{block_dev}"], DeviceRead),
    p(
        "nosuid",
        Filesystem,
        "find /usr (host setuid binaries) mounted without nosuid",
        &["{probe}", "statfs", "/usr"],
        NoSuid,
    ),
    p("marker-path", Filesystem, "read the host marker by its path", &["{probe}", "read", "{marker}"], Marker),
    p(
        "marker-proc-1-root",
        Filesystem,
        "read the host marker through /proc/1/root",
        &["{probe}", "read", "/proc/1/root{marker}"],
        Marker,
    ),
    p(
        "marker-proc-self-root",
        Filesystem,
        "read the host marker through /proc/self/root",
        &["{probe}", "read", "/proc/self/root{marker}"],
        Marker,
    ),
    p(
        "marker-proc-cwd",
        Filesystem,
        "read the host marker through /proc/self/cwd/..",
        &["{probe}", "read", "/proc/self/cwd/{up}{marker}"],
        Marker,
    ),
    p(
        "marker-proc-1-cwd",
        Filesystem,
        "read the host marker through /proc/1/cwd/..",
        &["{probe}", "read", "/proc/1/cwd/{up}{marker}"],
        Marker,
    ),
    p(
        "marker-dotdot",
        Filesystem,
        "read the host marker by climbing .. from the cwd",
        &["{probe}", "read", "{up}{marker}"],
        Marker,
    ),
    p(
        "marker-leaked-fd",
        Filesystem,
        "read the host marker through any inherited fd (CVE-2024-21626)",
        &["{probe}", "fd-escape", "{marker}"],
        Marker,
    ),
    p("leaked-fds", Filesystem, "inherit fds beyond stdin/stdout/stderr (CVE-2024-21626)", &["{probe}", "fds"], Fds),
    p("cwd-in-root", Filesystem, "start with a cwd outside the root", &["{probe}", "cwd"], Cwd),
    p(
        "exe-write",
        Filesystem,
        "open /proc/self/exe or /proc/1/exe (husk) for writing (CVE-2019-5736)",
        &["{probe}", "exe-write"],
        ExeWrite,
    ),
    // --------------------------------------------------------------- network
    p("interfaces", Network, "see a network interface other than lo", &["{probe}", "ifaces"], Ifaces),
    p(
        "host-loopback-tcp",
        Network,
        "connect to a listener on the host's 127.0.0.1",
        &["{probe}", "connect", "{tcp4}"],
        Connect,
    ),
    p(
        "host-loopback-tcp6",
        Network,
        "connect to a listener on the host's ::1",
        &["{probe}", "connect", "{tcp6}"],
        Connect,
    ),
    p(
        "host-abstract-unix",
        Network,
        "connect to a host abstract unix socket",
        &["{probe}", "connect-unix", "{abstract}"],
        Connect,
    ),
    p(
        "raw-socket",
        Network,
        "open a raw IP socket",
        &["{probe}", "try-syscall", "socket-raw"],
        Syscall { passed: &[], absent: &[] },
    ),
    p(
        "packet-socket",
        Network,
        "open a packet socket",
        &["{probe}", "try-syscall", "socket-packet"],
        Syscall { passed: &[], absent: &[] },
    ),
    // The egress allowlist (egress.rs): every way to the host's marker
    // server but the allowed one. The proxy's ports are fixed (3128 HTTP,
    // 1080 SOCKS5); `selftest-*.test` names are pinned to 127.0.0.1.
    p(
        "egress-raw-ip",
        Network,
        "with an allowlist, connect straight (past the proxy) to a host address a rule allows",
        &["{probe}", "connect", "127.0.0.1:{egress_port}"],
        Egress(Expect::NoRoute),
    )
    .with(&["--network=allow=127.0.0.1:{egress_port}"]),
    p(
        "egress-udp",
        Network,
        "with an allowlist, send a UDP datagram to a host address a rule allows",
        &["{probe}", "udp-send", "127.0.0.1:{egress_udp}", "husk-selftest"],
        Egress(Expect::NoDatagram),
    )
    .with(&["--network=allow=127.0.0.1:{egress_udp}"]),
    p(
        "egress-dns",
        Network,
        "with an allowlist, ask a resolver on the host (DNS exfiltration)",
        &["{probe}", "dns-query", "127.0.0.1:{egress_udp}", "selftest-allowed.test"],
        Egress(Expect::NoDatagram),
    )
    .with(&["--network=allow=selftest-allowed.test,127.0.0.1:{egress_udp}"]),
    p(
        "egress-proxy-not-allowed",
        Network,
        "through the HTTP proxy, reach a name no rule allows",
        &["{probe}", "proxy-get", "127.0.0.1:3128", "http://selftest-denied.test:{egress_port}/"],
        Egress(Expect::ProxyDenied("not_allowed")),
    )
    .with(&[
        "--network=allow=selftest-allowed.test:{egress_port}",
        "--add-host=selftest-allowed.test:127.0.0.1",
        "--add-host=selftest-denied.test:127.0.0.1",
    ]),
    p(
        "egress-private-address",
        Network,
        "through the HTTP proxy, reach an allowed name that resolves to the host's loopback (DNS rebinding)",
        &["{probe}", "proxy-get", "127.0.0.1:3128", "http://localhost:{egress_port}/"],
        Egress(Expect::ProxyDenied("private_address")),
    )
    .with(&["--network=allow=localhost:{egress_port}"]),
    p(
        "egress-socks-not-allowed",
        Network,
        "through the SOCKS5 proxy, reach a name no rule allows",
        &["{probe}", "socks-connect", "127.0.0.1:1080", "selftest-denied.test", "{egress_port}"],
        Egress(Expect::SocksDenied),
    )
    .with(&[
        "--network=allow=selftest-allowed.test:{egress_port}",
        "--add-host=selftest-allowed.test:127.0.0.1",
        "--add-host=selftest-denied.test:127.0.0.1",
    ]),
    // ----------------------------------------------------------- pid/ipc/uts
    p("host-processes", PidIpcUts, "see host processes (a victim husk starts)", &["{probe}", "ps"], Processes),
    p("signal-host-pid", PidIpcUts, "SIGKILL the victim's host pid", &["{probe}", "kill", "{victim}", "9"], Kill),
    p("host-sysv-ipc", PidIpcUts, "see a host SysV message queue", &["{probe}", "ipc"], Ipc),
    p("hostname", PidIpcUts, "see or change the host's hostname", &["{probe}", "hostname"], Hostname),
    // ------------------------------------------------------------- resources
    p("fork-bomb", Resources, "fork without bound", &["{probe}", "forkbomb", "{fork_max}"], ForkBomb).timeout(60),
    p(
        "memory-bomb",
        Resources,
        "touch more memory than the default limit",
        &["{probe}", "memhog", "{mem_bomb}"],
        MemoryBomb,
    )
    .timeout(60),
    p("tmp-fill", Resources, "fill /tmp past its size", &["{probe}", "fill", "/tmp/{scratch}", "{tmp_bomb}"], Fill)
        .timeout(30),
    p(
        "workdir-fill",
        Resources,
        "fill the workdir past its size",
        &["{probe}", "fill", "{scratch}", "{workdir_bomb}"],
        Fill,
    )
    .timeout(30),
    p(
        "shm-fill",
        Resources,
        "fill /dev/shm past its size",
        &["{probe}", "fill", "/dev/shm/{scratch}", "{shm_bomb}"],
        Fill,
    )
    .timeout(30),
    p("cpu-hog", Resources, "spin a CPU for 60 s under a 2 s timeout", &["{probe}", "spin", "60"], CpuHog).timeout(2),
    // --------------------------------------------------------------- timeout
    p(
        "daemon-after-exit",
        Timeout,
        "leave a double-forked setsid daemon behind at exit",
        &["{probe}", "daemon", "{token}", "120"],
        Daemon,
    ),
    p(
        "daemon-after-timeout",
        Timeout,
        "leave a double-forked setsid daemon behind at a 1 s timeout",
        &["{probe}", "daemon", "{token}", "120", "60"],
        Daemon,
    )
    .timeout(1),
];

/// Looks a probe up by name.
pub fn find(name: &str) -> Option<&'static Probe> {
    PROBES.iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn names_are_unique_kebab_case() {
        let mut seen = BTreeSet::new();
        for p in PROBES {
            assert!(seen.insert(p.name), "duplicate probe {}", p.name);
            assert!(p.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'), "{}", p.name);
        }
    }

    #[test]
    fn at_least_forty_probes_cover_every_category() {
        assert!(PROBES.len() >= 40, "{} probes", PROBES.len());
        for c in [Privileges, Filesystem, Network, PidIpcUts, Resources, Timeout] {
            assert!(PROBES.iter().any(|p| p.category == c), "no probe in {c:?}");
        }
    }

    #[test]
    fn every_placeholder_is_known() {
        for p in PROBES {
            for a in p.argv.iter().chain(p.husk_args) {
                let mut rest = *a;
                while let Some(i) = rest.find('{') {
                    let end = rest[i..].find('}').map(|e| i + e).unwrap_or_else(|| panic!("{}: unclosed {a}", p.name));
                    let key = &rest[i + 1..end];
                    assert!(super::super::fixtures::KEYS.contains(&key), "{}: unknown placeholder {{{key}}}", p.name);
                    rest = &rest[end + 1..];
                }
            }
            assert!(p.argv[0].starts_with('{'), "{}: the command is a probe binary", p.name);
        }
    }

    #[test]
    fn the_issue_list_is_covered() {
        // Every class issue 8 names, by the probe that covers it.
        for name in [
            "capabilities",
            "no-new-privs",
            "setuid-host-root",
            "module-init",
            "mount",
            "fsopen",
            "chroot-escape",
            "pivot-root",
            "ptrace-init",
            "nested-userns",
            "keyctl",
            "bpf",
            "perf-event-open",
            "userfaultfd",
            "io-uring",
            "kexec",
            "reboot",
            "clock-settime",
            "iopl",
            "open-by-handle-at",
            "tiocsti",
            "personality-page-zero",
            "write-root",
            "write-proc-sys",
            "write-sysrq-trigger",
            "write-sys",
            "cgroup-release-agent",
            "proc-kcore",
            "dev-nodes",
            "mknod",
            "dev-mem",
            "block-device",
            "setuid-binary-host-root",
            "marker-proc-1-root",
            "marker-proc-cwd",
            "marker-dotdot",
            "marker-leaked-fd",
            "exe-write",
            "interfaces",
            "host-loopback-tcp",
            "raw-socket",
            "packet-socket",
            "host-abstract-unix",
            "host-processes",
            "host-sysv-ipc",
            "hostname",
            "signal-host-pid",
            "fork-bomb",
            "memory-bomb",
            "tmp-fill",
            "cpu-hog",
            "daemon-after-timeout",
        ] {
            assert!(find(name).is_some(), "{name} missing");
        }
    }
}
