//! Command-line structures (clap derive). No logic beyond value parsing:
//! `cmd::*` turns these into a `Spec`.

use crate::units::{parse_duration, parse_size};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(name = "husk", version, about = "Disposable Linux sandboxes for one command, in milliseconds")]
pub struct Cli {
    /// Store directory (images, layers). Default: /var/lib/husk as root,
    /// $XDG_DATA_HOME/husk otherwise.
    #[arg(long, global = true, env = "HUSK_ROOT", value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// State directory (live sandboxes, runs). Default: /run/husk as root,
    /// $XDG_RUNTIME_DIR/husk otherwise.
    #[arg(long, global = true, env = "HUSK_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run one command in a fresh sandbox and remove it afterwards.
    Run(Box<RunArgs>),
    /// Check what this host supports and how to fix what it does not.
    Doctor(DoctorArgs),
    /// Inspect seccomp profiles: validate one, or print a shipped one.
    #[command(subcommand)]
    Seccomp(SeccompCommand),
    /// Remove what crashed runs left behind (stale cgroups).
    Gc(GcArgs),
    /// Try to escape sandboxes made with the defaults; report what held.
    Selftest(SelftestArgs),
}

fn size(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkArg {
    /// Only loopback, in a fresh network namespace.
    None,
    /// The host's network (no network isolation).
    Host,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeArg {
    Native,
    Runsc,
    Auto,
}

/// How the sandbox is built: root filesystem, mounts, namespaces, identity.
#[derive(Args, Debug, Clone)]
pub struct SandboxArgs {
    /// Use DIR as the read-only root filesystem.
    #[arg(long, value_name = "DIR", conflicts_with = "image")]
    pub rootfs: Option<PathBuf>,

    /// Use an image (stored name or path to an OCI layout / archive) as root.
    #[arg(long, value_name = "REF")]
    pub image: Option<String>,

    /// Add a tmpfs upper layer over the image root, discarded at exit.
    #[arg(long)]
    pub writable: bool,

    /// Working directory (a fresh tmpfs, and the command's cwd).
    #[arg(long, value_name = "PATH")]
    pub workdir: Option<String>,

    /// Size of the workdir tmpfs.
    #[arg(long, value_name = "SIZE", value_parser = size, default_value = "256M")]
    pub workdir_size: u64,

    /// Size of the /tmp tmpfs.
    #[arg(long, value_name = "SIZE", value_parser = size, default_value = "64M")]
    pub tmp_size: u64,

    /// Bind a host path: SRC:DST[:ro|rw] (read-only unless rw).
    #[arg(long, value_name = "SRC:DST[:ro|rw]")]
    pub bind: Vec<String>,

    /// Mount an extra tmpfs: DST[:SIZE] (default size 64M).
    #[arg(long, value_name = "DST[:SIZE]")]
    pub tmpfs: Vec<String>,

    /// Network: none (only loopback) or host.
    #[arg(long, value_enum, default_value = "none")]
    pub network: NetworkArg,

    /// Hostname inside the sandbox.
    #[arg(long, default_value = "husk")]
    pub hostname: String,

    /// Keep a capability (e.g. CAP_NET_BIND_SERVICE); all others are dropped.
    #[arg(long, value_name = "CAP")]
    pub cap_add: Vec<String>,

    /// Resource limit NAME=SOFT[:HARD] (nofile, nproc, core, fsize, stack,
    /// cpu, as, memlock, ...); "unlimited" allowed.
    #[arg(long, value_name = "NAME=SOFT[:HARD]")]
    pub rlimit: Vec<String>,

    /// Host id range for the sandbox's ids when running as root: BASE:COUNT.
    #[arg(long, value_name = "BASE:COUNT", env = "HUSK_ID_RANGE")]
    pub id_range: Option<String>,

    /// Isolation backend.
    #[arg(long, value_enum, default_value = "native")]
    pub runtime: RuntimeArg,

    /// Seccomp profile: default, strict, unconfined (no filter), or the path
    /// of an OCI/Docker-format profile.
    #[arg(long, value_name = "default|strict|unconfined|PATH", default_value = "default")]
    pub seccomp: String,

    /// List the syscalls the filter denied, by name and count, in the
    /// verdict (the filter stays as strict: husk answers each denial).
    #[arg(long)]
    pub seccomp_report: bool,
    /// Memory limit (cgroup), e.g. 256M, 2G, or "unlimited".
    /// Default: 2G or half the host's RAM, whichever is smaller.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,

    /// Memory + swap limit (Docker's meaning); default: equal to --memory
    /// (no swap). "unlimited" allows any swap.
    #[arg(long, value_name = "SIZE")]
    pub memory_swap: Option<String>,

    /// CPU quota in cpus, fractional (0.5, 2); default: none.
    #[arg(long, value_name = "N")]
    pub cpus: Option<String>,

    /// Task limit (processes + threads, the sandbox init included);
    /// default 1024, "unlimited" to lift it.
    #[arg(long, value_name = "N")]
    pub pids: Option<String>,

    /// Run without a cgroup: no memory/cpu/pids limits, no accounting
    /// (the verdict says limits: "none").
    #[arg(long, env = "HUSK_NO_CGROUP", value_parser = clap::builder::BoolishValueParser::new(),
          conflicts_with_all = ["memory", "memory_swap", "cpus", "pids", "cgroup_parent"])]
    pub no_cgroup: bool,

    /// Parent cgroup, relative to each cgroup mount (default: husk; as an
    /// unprivileged user: husk in the delegated subtree).
    #[arg(long, value_name = "PATH")]
    pub cgroup_parent: Option<String>,
}

/// How one command is run and reported (shared by run and exec).
#[derive(Args, Debug, Clone)]
pub struct ProcessArgs {
    /// Wall-clock limit (500ms, 30s, 2m); on expiry every process dies, exit 124.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub timeout: Option<Duration>,

    /// On timeout, send SIGTERM and wait this long before SIGKILL.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub kill_grace: Option<Duration>,

    /// Print one JSON verdict on stdout, with the command's output captured.
    #[arg(long)]
    pub json: bool,

    /// Keep stdio passthrough and write the verdict (without output) to PATH.
    #[arg(long, value_name = "PATH")]
    pub verdict_file: Option<PathBuf>,

    /// Bound on captured bytes per stream (head and tail kept).
    #[arg(long, value_name = "BYTES", value_parser = size, default_value = "1M")]
    pub output_limit: u64,

    /// Set KEY=VALUE (or KEY, copied from husk's environment).
    #[arg(long, short = 'e', value_name = "KEY=VALUE")]
    pub env: Vec<String>,

    /// Read KEY=VALUE lines from a file.
    #[arg(long, value_name = "FILE")]
    pub env_file: Vec<PathBuf>,

    /// Run as UID[:GID] (or a user name from the root's /etc/passwd).
    #[arg(long, short = 'u', value_name = "UID[:GID]")]
    pub user: Option<String>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,

    #[command(flatten)]
    pub process: ProcessArgs,

    /// The command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct GcArgs {
    /// Machine-readable report.
    #[arg(long)]
    pub json: bool,

    /// Also look under this parent cgroup (as given to `run --cgroup-parent`).
    #[arg(long, value_name = "PATH")]
    pub cgroup_parent: Option<String>,

    /// Leave cgroups younger than this (a run may be starting in them).
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10s")]
    pub min_age: Duration,
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Machine-readable report.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum SeccompCommand {
    /// Validate a profile and print what it allows and denies.
    Check(SeccompCheckArgs),
    /// Print a shipped profile (default, strict).
    Show {
        #[arg(value_name = "NAME")]
        name: String,
    },
}

#[derive(Args, Debug)]
pub struct SeccompCheckArgs {
    /// Profile file (OCI/Docker JSON), or the name of a shipped one.
    #[arg(value_name = "PATH")]
    pub path: String,

    /// Machine-readable report.
    #[arg(long)]
    pub json: bool,

    /// Evaluate Docker's `includes.caps` as if these capabilities were kept.
    #[arg(long, value_name = "CAP")]
    pub cap_add: Vec<String>,
}

#[derive(Args, Debug)]
pub struct SelftestArgs {
    /// Isolation backend of the sandboxes (default: husk run's default).
    #[arg(long, value_enum)]
    pub runtime: Option<RuntimeArg>,

    /// Run the probes in this image instead of host mode (the probe is
    /// static, so any image works).
    #[arg(long, value_name = "REF")]
    pub image: Option<String>,

    /// One JSON report on stdout instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Only these probes or categories (comma-separated; see --list).
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub only: Vec<String>,

    /// List the probes and exit.
    #[arg(long)]
    pub list: bool,

    /// The static in-sandbox probe (default: husk-probe beside husk).
    #[arg(long, value_name = "PATH", env = "HUSK_PROBE")]
    pub probe: Option<PathBuf>,

    /// Test only: add a `husk run` argument to every sandbox (e.g.
    /// --network=host) to prove the selftest reports what gets through.
    #[arg(long = "unsafe-weaken", value_name = "RUN-ARG", hide = true, allow_hyphen_values = true)]
    pub weaken: Vec<String>,
}
