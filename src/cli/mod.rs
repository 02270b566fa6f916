//! Command-line structures (clap derive). No logic beyond value parsing;
//! `spec` turns them into a `Spec`, `report` gives back the verdict.

pub mod cp;
pub mod habits;
pub mod images;
pub mod report;
pub mod secret;
pub mod shell;
pub mod spec;

use crate::units::{parse_duration, parse_size};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(name = "husk", version, about = "Disposable Linux sandboxes for one command, in milliseconds")]
pub struct Cli {
    #[command(flatten)]
    pub globals: Globals,

    #[command(subcommand)]
    pub command: Command,
}

/// The options every subcommand takes.
#[derive(Args, Debug)]
pub struct Globals {
    /// Store directory (images, layers). Default: /var/lib/husk as root,
    /// $XDG_DATA_HOME/husk otherwise.
    #[arg(long, global = true, env = "HUSK_ROOT", value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// State directory (live sandboxes, runs). Default: /run/husk as root,
    /// $XDG_RUNTIME_DIR/husk otherwise.
    #[arg(long, global = true, env = "HUSK_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

impl Cli {
    /// Parses the process's arguments. Building clap's whole command tree
    /// (every subcommand, every flag and its help) took ~0.4 ms, a tenth of
    /// a whole sandbox run; so `husk run ...` is first parsed by a tree
    /// holding only the `run` subcommand (same derive code, so the same
    /// flags and values). Anything that parser does not accept, --help and
    /// --version included, goes to the full tree, which gives the real
    /// message.
    pub fn parse_args() -> Result<Cli, clap::Error> {
        Cli::parse_from_args(std::env::args_os().collect())
    }

    pub fn parse_from_args(args: Vec<std::ffi::OsString>) -> Result<Cli, clap::Error> {
        if let Some(cli) = Cli::parse_run_only(&args) {
            return Ok(cli);
        }
        Cli::try_parse_from(args)
    }

    /// `husk run ...` through a tree holding only `run`; `None` when that
    /// tree does not accept the arguments.
    fn parse_run_only(args: &[std::ffi::OsString]) -> Option<Cli> {
        use clap::FromArgMatches;
        if args.get(1).is_some_and(|a| a == "run") {
            let run = RunArgs::augment_args(clap::Command::new("run")).disable_help_flag(true);
            let only_run = Globals::augment_args(clap::Command::new("husk"))
                .disable_help_flag(true)
                .disable_version_flag(true)
                .subcommand(run);
            let m = only_run.try_get_matches_from(args).ok()?;
            return Cli::from_arg_matches(&m).ok();
        }
        None
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run one command in a fresh sandbox and remove it afterwards.
    Run(Box<RunArgs>),
    /// Check what this host supports and how to fix what it does not.
    Doctor(DoctorArgs),
    /// Manage images: import, ls, inspect, rm, prune.
    Image(ImageArgs),
    /// Fetch an image from a registry into the store.
    Pull(PullArgs),
    /// Build an image from a Dockerfile (no Docker): each RUN in a husk
    /// sandbox, each step cached (docs/build.md).
    Build(BuildArgs),
    /// Store a live sandbox's filesystem changes as a new image (its image
    /// plus one layer; the sandbox is frozen while it is read).
    Commit(images::CommitArgs),
    /// Start N new sandboxes from a live sandbox's current filesystem (not
    /// its processes), with its settings; the source is frozen while read.
    Fork(images::ForkArgs),
    /// Push a stored image to a registry (blobs it has are skipped).
    Push(images::PushArgs),
    /// Store credentials for a registry (used by pull).
    Login(LoginArgs),
    /// Remove stored credentials for a registry.
    Logout(LogoutArgs),
    /// Inspect seccomp profiles: validate one, or print a shipped one.
    #[command(subcommand)]
    Seccomp(SeccompCommand),
    /// Remove what runs killed before their own cleanup left behind
    /// (stale cgroups, runsc sandboxes and state, dead or expired sandboxes).
    Gc(GcArgs),
    /// Start a sandbox that lives (its init waits; `husk exec` runs commands
    /// in it) until `husk rm`, or until its lease (--ttl) runs out.
    Create(Box<CreateArgs>),
    /// Run a command in a live sandbox (same verdict as `husk run`).
    Exec(Box<ExecArgs>),
    /// List live sandboxes.
    Ls(LsArgs),
    /// Show a sandbox's record (JSON).
    Inspect(InspectArgs),
    /// Destroy sandboxes (and wait until nothing of them remains).
    Rm(RmArgs),
    /// Extend a sandbox's lease.
    Renew(RenewArgs),
    /// Freeze a live sandbox until `husk resume` (its processes and memory
    /// stay, it uses no CPU, its lease does not run out).
    Pause(PauseArgs),
    /// Let a paused sandbox run again (its lease restarts from now).
    Resume(ResumeArgs),
    /// Copy files and directories between the host and a live sandbox
    /// (`SANDBOX:PATH` on one side; `-` is a tar stream on stdin/stdout).
    Cp(Box<cp::CpArgs>),
    /// Try to escape sandboxes made with the defaults; report what held.
    Selftest(SelftestArgs),
    /// Serve the Model Context Protocol on stdio: tools that run code and
    /// manage sandboxes (run_code, create_sandbox, exec, write_file,
    /// read_file, list_files, destroy_sandbox), for MCP clients.
    Mcp(McpArgs),
    /// Serve the sandbox API (HTTP/1.1 + JSON) on a unix socket or loopback
    /// TCP (docs/api.md).
    Serve(ServeArgs),
    /// Print a completion script for bash, zsh or fish (README: Install).
    Completions(shell::CompletionsArgs),
    /// Write husk's man pages (husk.1, husk-run.1, ...) into a directory.
    Man(shell::ManArgs),
    /// husk's own roles inside a gVisor sandbox that lives (not for users).
    #[command(name = "gvisor-helper", hide = true)]
    GvisorHelper(GvisorHelperArgs),
    /// The egress allowlist's proxy of one sandbox (not for users).
    #[command(name = "egress-proxy", hide = true)]
    EgressProxy,
    /// The `--publish` forwarder of one sandbox (not for users).
    #[command(name = "publish-forwarder", hide = true)]
    PublishForwarder,
}

/// `gvisor-helper hold` | `gvisor-helper reap -- CMD...` (src/backend/runsc/helper.rs).
#[derive(Args, Debug)]
pub struct GvisorHelperArgs {
    pub role: String,
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// A flag's value clap refused (clap prints it as the reason).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ValueError {
    #[error(transparent)]
    Unit(#[from] crate::units::UnitError),
    #[error(transparent)]
    OutputLimit(#[from] crate::capture::LimitTooLarge),
    #[error("a tmpfs of size 0 would have no size limit at all; give a size, e.g. 64M")]
    EmptyTmpfs,
    #[error("a timeout of 0 would kill every run at once; leave --timeout out for no limit")]
    ZeroTimeout,
    #[error("a lease of 0 would remove the sandbox at once; give e.g. 10m")]
    ZeroLease,
    #[error("a maximum lifetime of 0 would remove the sandbox at once; give e.g. 1h")]
    ZeroLifetime,
}

fn size(s: &str) -> Result<u64, ValueError> {
    Ok(parse_size(s)?)
}

pub(crate) fn size_of(s: &str) -> Result<u64, ValueError> {
    size(s)
}

/// `--output-limit`: captured output is held in husk's memory, so it has a
/// ceiling (`capture::MAX_LIMIT`).
fn output_limit(s: &str) -> Result<u64, ValueError> {
    Ok(crate::capture::check_limit(size(s)?)?)
}

fn duration(s: &str) -> Result<Duration, ValueError> {
    Ok(parse_duration(s)?)
}

/// A tmpfs size: tmpfs reads `size=0` as "no limit", so 0 is refused
/// instead of silently meaning the opposite of what it says.
pub fn tmpfs_size(s: &str) -> Result<u64, ValueError> {
    match parse_size(s)? {
        0 => Err(ValueError::EmptyTmpfs),
        n => Ok(n),
    }
}

/// `--timeout`: 0 would end every run as it starts; no flag means no limit.
fn timeout(s: &str) -> Result<Duration, ValueError> {
    match duration(s)? {
        d if d.is_zero() => Err(ValueError::ZeroTimeout),
        d => Ok(d),
    }
}

/// `--ttl`: a lease of 0 would remove the sandbox as it is made.
fn lease(s: &str) -> Result<Duration, ValueError> {
    match duration(s)? {
        d if d.is_zero() => Err(ValueError::ZeroLease),
        d => Ok(d),
    }
}

fn lifetime(s: &str) -> Result<Duration, ValueError> {
    match duration(s)? {
        d if d.is_zero() => Err(ValueError::ZeroLifetime),
        d => Ok(d),
    }
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

    /// Use an image as root: a stored name, a path to an OCI layout /
    /// archive, or a registry reference (pulled per --pull).
    #[arg(long, value_name = "REF")]
    pub image: Option<String>,

    /// When to fetch --image from its registry: missing (only when not
    /// stored), always, never.
    #[arg(long, value_enum, value_name = "POLICY", default_value = "missing")]
    pub pull: PullArg,

    /// Platform of --image to pull from a multi-platform image:
    /// OS/ARCH[/VARIANT] (default: the host's).
    #[arg(long, value_name = "OS/ARCH")]
    pub platform: Option<String>,

    #[command(flatten)]
    pub registry: RegistryArgs,

    /// Add a tmpfs upper layer over the image root, discarded at exit.
    #[arg(long)]
    pub writable: bool,

    /// Working directory (a fresh tmpfs, and the command's cwd).
    #[arg(long, value_name = "PATH")]
    pub workdir: Option<String>,

    /// Size of the workdir tmpfs.
    #[arg(long, value_name = "SIZE", value_parser = tmpfs_size, default_value = "256M")]
    pub workdir_size: u64,

    /// Size of the /tmp tmpfs.
    #[arg(long, value_name = "SIZE", value_parser = tmpfs_size, default_value = "64M")]
    pub tmp_size: u64,

    /// Bind a host path: SRC:DST[:ro|rw] (read-only unless rw).
    #[arg(long, value_name = "SRC:DST[:ro|rw]")]
    pub bind: Vec<String>,

    /// Mount an extra tmpfs: DST[:SIZE] (default size 64M).
    #[arg(long, value_name = "DST[:SIZE]")]
    pub tmpfs: Vec<String>,

    /// Network: none (only loopback), host, or allow=RULE[,RULE...] (only
    /// through husk's egress proxy, to what the rules allow: host,
    /// *.host, host:port, host:*, IP, IP/CIDR, [IPv6]:port; ports 80 and
    /// 443 when none is given). Repeatable for allow=.
    #[arg(long, value_name = "none|host|allow=RULE,...")]
    pub network: Vec<String>,

    /// An allowlist rule (same as --network allow=RULE; repeatable).
    #[arg(long, value_name = "RULE")]
    pub allow_host: Vec<String>,

    /// Pin NAME to IP for the egress proxy's resolver (--network allow=).
    #[arg(long, value_name = "NAME:IP")]
    pub add_host: Vec<String>,

    /// Close the egress proxy's connections once this many bytes (both
    /// directions, all connections) went through it.
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub egress_bytes: Option<u64>,

    /// Reach a server inside the sandbox: the host listens on
    /// [HOSTIP:]HOSTPORT (127.0.0.1 unless given; HOSTPORT 0 picks one, see
    /// the verdict's or `husk inspect`'s `published`) and forwards each
    /// connection to 127.0.0.1:PORT inside. Repeatable.
    #[arg(long, value_name = "[HOSTIP:]HOSTPORT:PORT")]
    pub publish: Vec<String>,

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
    /// Refused when it overlaps host users, groups or other users'
    /// /etc/subuid ranges, or starts below SUB_UID_MIN (/etc/login.defs).
    #[arg(long, value_name = "BASE:COUNT", env = "HUSK_ID_RANGE")]
    pub id_range: Option<String>,

    /// Accept an --id-range that overlaps the host's own users and groups.
    #[arg(long, requires = "id_range")]
    pub id_range_force: bool,

    /// Isolation backend: native, runsc (gVisor), or auto (native where the
    /// host supports it, else runsc; refuses if neither works).
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
    #[arg(long, value_name = "SIZE", allow_negative_numbers = true)]
    pub memory: Option<String>,

    /// Memory + swap limit (Docker's meaning); default: equal to --memory
    /// (no swap). "unlimited" allows any swap.
    #[arg(long, value_name = "SIZE", allow_negative_numbers = true)]
    pub memory_swap: Option<String>,

    /// CPU quota in cpus, fractional (0.5, 2); default: none.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub cpus: Option<String>,

    /// Task limit (processes + threads, the sandbox init included);
    /// default 1024 (256 under --runtime runsc), "unlimited" to lift it.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub pids: Option<String>,

    /// Run without a cgroup: no memory/cpu/pids limits, no accounting
    /// (the verdict says limits: "none").
    //
    // Checked against the limit flags in `cli::spec::limit_spec`,
    // not by clap: clap counts any value of the env var (even "0") as
    // given, so `conflicts_with` would refuse `HUSK_NO_CGROUP=0 --memory`.
    #[arg(long, env = "HUSK_NO_CGROUP", value_parser = clap::builder::BoolishValueParser::new())]
    pub no_cgroup: bool,

    /// Parent cgroup, relative to each cgroup mount (default: husk; as an
    /// unprivileged user: husk in the delegated subtree).
    #[arg(long, value_name = "PATH")]
    pub cgroup_parent: Option<String>,

    /// The runsc binary (default: runsc in PATH).
    #[arg(long, value_name = "PATH")]
    pub runsc_path: Option<PathBuf>,

    /// gVisor platform for runsc (default: systrap where the installed runsc
    /// has it, else ptrace; kvm only when asked).
    #[arg(long, value_name = "NAME")]
    pub runsc_platform: Option<String>,
}

/// How one command is run and reported (shared by run and exec).
#[derive(Args, Debug, Clone)]
pub struct ProcessArgs {
    /// Wall-clock limit (500ms, 30s, 2m); on expiry every process dies, exit 124.
    #[arg(long, value_name = "DURATION", value_parser = timeout)]
    pub timeout: Option<Duration>,

    /// On timeout, send SIGTERM and wait this long before SIGKILL.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub kill_grace: Option<Duration>,

    /// Print one JSON verdict on stdout, with the command's output captured.
    #[arg(long)]
    pub json: bool,

    /// NDJSON events on stdout: the command's output as it happens
    /// ({"stream","seq","data"|"data_b64"}), then one {"verdict": ...}
    /// carrying what --json would print.
    #[arg(long, conflicts_with = "json")]
    pub json_stream: bool,

    /// Keep stdio passthrough and write the verdict (without output) to PATH.
    #[arg(long, value_name = "PATH")]
    pub verdict_file: Option<PathBuf>,

    /// Bound on captured bytes per stream (head and tail kept); at most 16M.
    #[arg(long, value_name = "BYTES", value_parser = output_limit, default_value = "1M")]
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

    /// Give the command a terminal of its own (a pty made inside the
    /// sandbox): husk's terminal goes raw and keys, Ctrl-C included, reach
    /// the sandbox's foreground job; window size follows. Native runtime
    /// only. With --json the terminal's output (stdout and stderr merged)
    /// is captured as stdout.
    #[arg(long, short = 't')]
    pub tty: bool,

    #[command(flatten)]
    pub secrets: secret::SecretArgs,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,

    #[command(flatten)]
    pub process: ProcessArgs,

    /// Copy a host file or directory into the sandbox before the command
    /// starts (repeatable): HOST:PATH, PATH named as `husk cp` names it
    /// (an existing directory receives it under its own name; relative to
    /// the workdir). Native runtime only.
    #[arg(long, value_name = "HOST:PATH", value_parser = cp::copy_in)]
    pub copy_in: Vec<cp::CopyIn>,

    /// Copy a file or directory out of the sandbox after the command ended,
    /// before the sandbox is torn down (repeatable): PATH:HOST. Done whether
    /// the command succeeded or not. Native runtime only.
    #[arg(long, value_name = "PATH:HOST", value_parser = cp::copy_out)]
    pub copy_out: Vec<cp::CopyOut>,

    /// Keep stdin open for the command. It always is: husk run passes its
    /// stdin to the command; the flag is accepted as docker's is (`-it`).
    #[arg(long, short = 'i')]
    pub interactive: bool,

    /// The command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `husk create`: the sandbox flags of `run`, the execs' defaults, the lease.
#[derive(Args, Debug)]
pub struct CreateArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,

    /// Environment of every exec: KEY=VALUE (or KEY, copied from husk's
    /// environment); an exec's own --env wins.
    #[arg(long, short = 'e', value_name = "KEY=VALUE")]
    pub env: Vec<String>,

    /// Read KEY=VALUE lines from a file (for every exec).
    #[arg(long, value_name = "FILE")]
    pub env_file: Vec<PathBuf>,

    /// Default user of the execs: UID[:GID] or a name from the root's
    /// /etc/passwd (rootless: the only user the sandbox maps).
    #[arg(long, short = 'u', value_name = "UID[:GID]")]
    pub user: Option<String>,

    /// Lease: the sandbox is destroyed this long after its creation, its
    /// last exec or `husk renew` (every exec renews it).
    #[arg(long, value_name = "DURATION", value_parser = lease, default_value = "10m")]
    pub ttl: Duration,

    /// Absolute maximum lifetime: the sandbox is destroyed this long after
    /// its creation, however often it is used (execs and `husk renew` never
    /// extend the lease past it; a running exec ends with it). The default
    /// bounds a sandbox whose exec never ends (its lease cannot run out
    /// under it); give a longer one to keep it longer.
    #[arg(long, value_name = "DURATION", value_parser = lifetime, allow_negative_numbers = true, default_value = "24h")]
    pub max_lifetime: Option<Duration>,

    /// A name to use instead of the id (unique per state dir).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    /// A label KEY=VALUE (repeatable), for `ls --label` and `rm --label`.
    #[arg(long, value_name = "KEY=VALUE")]
    pub label: Vec<String>,

    /// Allow execs to run in parallel (default: one at a time).
    #[arg(long)]
    pub concurrent: bool,

    /// Secrets of every exec (held in the supervisor's memory, never in
    /// state.json or `inspect`, which lists their names only).
    #[command(flatten)]
    pub secrets: secret::SecretArgs,

    /// A warm interpreter: python[:MOD1,MOD2] waits inside the sandbox with
    /// MODULES imported, and each `husk exec --code` forks a fresh child of
    /// it (clean state per call; docs/warm.md).
    #[arg(long, value_name = "LANG[:MODULES]", conflicts_with = "session")]
    pub warm: Option<String>,

    /// A session: one python or bash interpreter whose state (variables,
    /// imports; cwd, exports) carries from one `husk exec --code` to the
    /// next (docs/warm.md).
    #[arg(long, value_name = "LANG")]
    pub session: Option<String>,

    /// A readiness check: this shell command (run by /bin/sh -c inside the
    /// sandbox, as its execs run, stdin empty) must exit 0 before the
    /// sandbox is READY and create returns; until then the sandbox is
    /// CREATING and takes no other exec. A failing or timed-out check
    /// destroys the sandbox and is reported (with --json: a setup_failed
    /// object, step ready_check, carrying the check's own verdict).
    #[arg(long, value_name = "CMD", conflicts_with = "pool")]
    pub ready_cmd: Option<String>,

    /// How long the --ready-cmd check may run (then it is killed and the
    /// sandbox destroyed).
    #[arg(long, value_name = "DURATION", value_parser = timeout, default_value = "60s", requires = "ready_cmd")]
    pub ready_timeout: Duration,

    /// Print the sandbox's record as JSON instead of its id.
    #[arg(long)]
    pub json: bool,

    /// Claim a READY sandbox from this pool of the running `husk serve`
    /// (see --server) instead of making one; the pool's spec is the
    /// sandbox's, so only --name, --label, --ttl and --json go with it.
    #[arg(long, value_name = "NAME")]
    pub pool: Option<String>,

    /// The husk serve that holds the pools: unix:PATH (default: the state
    /// dir's api.sock).
    #[arg(long, value_name = "unix:PATH", env = "HUSK_SERVER")]
    pub server: Option<String>,

    /// With --pool: when no husk serve answers or it has no such pool,
    /// create the sandbox cold from this command's own flags instead of
    /// failing.
    #[arg(long, requires = "pool")]
    pub pool_fallback: bool,

    /// Start from a live sandbox's current filesystem (id or name): its
    /// changes are read with it frozen and stored as the image
    /// snapshot/ID:TAG, which this sandbox runs on (docs/build.md, Fork).
    #[arg(long, value_name = "SANDBOX", conflicts_with_all = ["image", "rootfs", "pool"])]
    pub from_snapshot: Option<String>,
}

/// `husk exec`: the per-command flags of `run`.
#[derive(Args, Debug)]
pub struct ExecArgs {
    /// The sandbox: id, name, or a unique prefix of the id.
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,

    #[command(flatten)]
    pub process: ProcessArgs,

    /// Working directory inside the sandbox (default: the sandbox's workdir).
    #[arg(long, short = 'w', value_name = "PATH")]
    pub workdir: Option<String>,

    /// If another exec runs, wait for it instead of failing with "busy".
    #[arg(long)]
    pub wait: bool,

    /// Run code in the sandbox's warm interpreter or session (`create
    /// --warm` / `--session`) instead of a command: a file, or - for stdin.
    #[arg(long, value_name = "FILE|-", conflicts_with = "command")]
    pub code: Option<PathBuf>,

    /// The language of --code; must be the warm interpreter's (default: it).
    #[arg(long, value_name = "LANG", requires = "code")]
    pub language: Option<String>,

    /// Keep stdin open for the command. It always is: husk exec streams
    /// its stdin to the command, any size (the way to pass code: `husk exec
    /// ID -i -- python3 -`); the flag is accepted as docker's is.
    #[arg(long, short = 'i')]
    pub interactive: bool,

    /// The command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct LsArgs {
    /// Print the sandboxes as a JSON array (one record each, as `inspect`).
    #[arg(long)]
    pub json: bool,
    /// Only sandboxes with this label (repeatable: all must match).
    #[arg(long, value_name = "KEY=VALUE")]
    pub label: Vec<String>,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
    /// Show the values of the sandbox's environment (--env of create, the
    /// image's): hidden by default, as they often hold secrets.
    #[arg(long)]
    pub show_env: bool,
}

#[derive(Args, Debug)]
pub struct RmArgs {
    /// Sandboxes by id, name or unique id prefix.
    #[arg(value_name = "SANDBOX")]
    pub sandboxes: Vec<String>,
    /// Every sandbox with this label (repeatable: all must match).
    #[arg(long, value_name = "KEY=VALUE")]
    pub label: Vec<String>,
    /// Every sandbox.
    #[arg(long)]
    pub all: bool,
    /// Kill the supervisor if it does not finish the removal in time.
    #[arg(long)]
    pub force: bool,
    /// Print what was removed (and what was not) as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// unix:PATH (mode 0600) or a loopback IP:PORT (needs --token-file).
    /// Default: unix:<state dir>/api.sock.
    #[arg(long, value_name = "unix:PATH|IP:PORT", env = "HUSK_SOCKET")]
    pub listen: Option<String>,
    /// File holding the bearer token every TCP request must carry
    /// (Authorization: Bearer TOKEN; at least 16 characters).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// On SIGTERM/SIGINT/SIGHUP, remove the sandboxes created through this
    /// address (by default they keep running; a restarted serve finds them).
    #[arg(long)]
    pub destroy_on_exit: bool,
    /// Largest request body accepted (413 beyond).
    #[arg(long, value_name = "SIZE", value_parser = size, default_value = "64M")]
    pub max_body: u64,
    /// Requests served at once (429 beyond).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_concurrent: u32,
    /// The timeout of an exec of code (`{"code": ...}`) that gives none of
    /// its own; a request's `timeout` overrides it.
    #[arg(long, value_name = "DURATION", value_parser = timeout, default_value = "10m")]
    pub code_timeout: Duration,
    /// Keep SIZE sandboxes of this spec READY to be claimed (`husk create
    /// --pool NAME`, POST /v1/sandboxes {"pool": NAME}); repeatable.
    /// SOURCE is an image reference or rootfs=DIR; KEYs: memory, cpus,
    /// pids, network, runtime, warm, max_lifetime (docs/warm.md).
    #[arg(long, value_name = "NAME=SOURCE[,KEY=VALUE...]:SIZE")]
    pub pool: Vec<String>,
    /// Pools from a JSON file: {"pools": [{"name", "image" | "rootfs",
    /// "size", "memory", ...}]} (docs/warm.md).
    #[arg(long, value_name = "FILE")]
    pub pool_file: Option<PathBuf>,
    /// Memory the pools' unclaimed members may reserve together (each
    /// counts its memory limit); refills stop short of it. Default: half
    /// of MemAvailable when serve starts.
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub pool_memory_budget: Option<u64>,
}

#[derive(Args, Debug)]
pub struct PauseArgs {
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
    /// Then push its memory out (cgroup v2's memory.reclaim; refused where
    /// the memory controller is cgroup v1).
    #[arg(long)]
    pub memory_reclaim: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ResumeArgs {
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RenewArgs {
    #[arg(value_name = "SANDBOX")]
    pub sandbox: String,
    /// New lease length from now (default: the sandbox's --ttl); also the
    /// length every later exec renews to.
    #[arg(long, value_name = "DURATION", value_parser = lease)]
    pub ttl: Option<Duration>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
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

    /// Also sweep this OCI-runtime state root (the `--root` an engine gives
    /// husk as its runtime, e.g. /run/containerd/runc/k8s.io); the default
    /// one (/run/husk/oci as root) always is.
    #[arg(long, value_name = "DIR")]
    pub oci_root: Vec<std::path::PathBuf>,
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Machine-readable report.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ImageArgs {
    #[command(subcommand)]
    pub command: ImageCommand,
}

#[derive(Subcommand, Debug)]
pub enum ImageCommand {
    /// Import an OCI layout directory, oci-archive or `docker save` tarball.
    Import(ImageImportArgs),
    /// List stored images.
    Ls(JsonArgs),
    /// Show an image's record, config defaults and layers (JSON).
    Inspect(ImageNameArgs),
    /// Remove images' names (each refused while a sandbox uses it; the
    /// others are still removed).
    Rm(images::ImageRmArgs),
    /// Remove layers and blobs no image references.
    Prune(JsonArgs),
    /// Check stored images: blobs against their digests, unpacked layers
    /// against the file manifest recorded at unpack (every file hashed).
    /// Exit 0: intact (or repaired), 1: damage found, 125: could not check.
    Verify(ImageVerifyArgs),
    /// Write a stored image as an OCI layout, oci-archive or `docker save`
    /// archive (for `docker load`, skopeo, other runtimes).
    Export(images::ImageExportArgs),
}

#[derive(Args, Debug)]
pub struct ImageVerifyArgs {
    /// NAME[:TAG] (default: every stored image).
    pub name: Option<String>,
    /// Import damaged images again from their source: damaged blobs are
    /// rewritten, damaged layers unpacked again and exchanged.
    #[arg(long)]
    pub repair: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Host id range the layers were unpacked for (as root): BASE:COUNT.
    #[arg(long, value_name = "BASE:COUNT", env = "HUSK_ID_RANGE")]
    pub id_range: Option<String>,
}

#[derive(Args, Debug)]
pub struct ImageImportArgs {
    /// PATH or PATH:TAG (TAG selects by org.opencontainers.image.ref.name).
    pub path: String,
    /// Name to store it under, NAME[:TAG] (default: from the source).
    #[arg(long, value_name = "NAME[:TAG]")]
    pub name: Option<String>,
    /// Print the imported image as JSON.
    #[arg(long)]
    pub json: bool,
    /// Bound on one layer's uncompressed size (decompression bombs).
    #[arg(long, value_name = "SIZE", value_parser = size, env = "HUSK_MAX_LAYER_SIZE", default_value = "16G")]
    pub max_layer_size: u64,
    /// Bound on a layer's uncompressed/compressed size ratio above 1 GiB
    /// (0: none).
    #[arg(long, value_name = "N", default_value_t = 250)]
    pub max_ratio: u64,
    /// Bound on one layer's number of entries.
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub max_entries: u64,
    /// Host id range the layers are unpacked for (as root): BASE:COUNT,
    /// checked like `run --id-range`.
    #[arg(long, value_name = "BASE:COUNT", env = "HUSK_ID_RANGE")]
    pub id_range: Option<String>,
    /// Accept an --id-range that overlaps the host's own users and groups.
    #[arg(long, requires = "id_range")]
    pub id_range_force: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullArg {
    Missing,
    Always,
    Never,
}

impl From<PullArg> for crate::spec::PullPolicy {
    fn from(p: PullArg) -> Self {
        match p {
            PullArg::Missing => crate::spec::PullPolicy::Missing,
            PullArg::Always => crate::spec::PullPolicy::Always,
            PullArg::Never => crate::spec::PullPolicy::Never,
        }
    }
}

/// Where and how to reach registries (pull, and run --image).
#[derive(Args, Debug, Clone, Default)]
pub struct RegistryArgs {
    /// Allow plain HTTP to this registry, HOST:PORT (repeatable;
    /// loopback registries never need it).
    #[arg(long, value_name = "HOST:PORT", env = "HUSK_INSECURE_REGISTRY", value_delimiter = ',')]
    pub insecure_registry: Vec<String>,
    /// Extra root CA certificates for registries (PEM file; repeatable).
    #[arg(long, value_name = "FILE", env = "HUSK_REGISTRY_CA", value_delimiter = ',')]
    pub registry_ca: Vec<PathBuf>,
    /// Fetch images from this mirror first, then from their registry:
    /// URL mirrors Docker Hub, REGISTRY=URL another registry (repeatable;
    /// also `<store root>/registries.json`).
    #[arg(long, value_name = "[REGISTRY=]URL", env = "HUSK_REGISTRY_MIRROR", value_delimiter = ',')]
    pub registry_mirror: Vec<String>,
}

#[derive(Args, Debug)]
pub struct BuildArgs {
    /// The build context: the directory COPY and ADD read from.
    pub context: std::path::PathBuf,
    /// The Dockerfile (default: CONTEXT/Dockerfile).
    #[arg(long, short = 'f', value_name = "PATH")]
    pub file: Option<std::path::PathBuf>,
    /// Name of the image: NAME[:TAG].
    #[arg(long, short = 't', value_name = "NAME[:TAG]")]
    pub tag: String,
    /// A build argument (ARG): KEY=VALUE; repeatable.
    #[arg(long = "build-arg", value_name = "KEY=VALUE")]
    pub build_arg: Vec<String>,
    /// Build up to this stage (name or index) and make it the image.
    #[arg(long, value_name = "STAGE")]
    pub target: Option<String>,
    /// Run every step again (layers with the same content are still shared).
    #[arg(long)]
    pub no_cache: bool,
    /// Network of RUN steps: none (the default: only loopback), or
    /// allow=RULE[,RULE...]: only through husk's egress proxy, to what the
    /// rules allow (the rules of `husk run --network allow=`). Repeatable.
    #[arg(long, value_name = "none|allow=RULE,...")]
    pub network: Vec<String>,
    /// RUN steps' output: auto (streamed to stderr when it is a terminal,
    /// else only a failing step's tail), plain (always streamed: a log).
    #[arg(long, default_value = "auto", value_name = "auto|plain", value_parser = ["auto", "plain"])]
    pub progress: String,
    /// Steps and the result as JSON lines on stdout.
    #[arg(long)]
    pub json: bool,
    /// How FROM images that are not stored are pulled.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Args, Debug)]
pub struct PullArgs {
    /// Image reference: NAME[:TAG], NAME@sha256:..., or
    /// REGISTRY[:PORT]/PATH/NAME[:TAG][@DIGEST] (Docker Hub by default).
    pub reference: String,
    /// Platform to pick from a multi-platform image: OS/ARCH[/VARIANT].
    #[arg(long, value_name = "OS/ARCH", default_value = "linux/amd64")]
    pub platform: String,
    /// Progress events and the result as JSON lines on stdout.
    #[arg(long)]
    pub json: bool,
    /// Print only the stored name.
    #[arg(long, short = 'q', conflicts_with = "json")]
    pub quiet: bool,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Bound on one layer's uncompressed size (decompression bombs).
    #[arg(long, value_name = "SIZE", value_parser = size, env = "HUSK_MAX_LAYER_SIZE", default_value = "16G")]
    pub max_layer_size: u64,
    /// Host id range the layers are unpacked for (as root): BASE:COUNT.
    #[arg(long, value_name = "BASE:COUNT", env = "HUSK_ID_RANGE")]
    pub id_range: Option<String>,
}

#[derive(Args, Debug)]
pub struct LoginArgs {
    /// Registry HOST[:PORT] (docker.io for Docker Hub).
    pub registry: String,
    /// User name.
    #[arg(long, short = 'u')]
    pub username: String,
    /// Read the password (or token) from stdin.
    #[arg(long)]
    pub password_stdin: bool,
    /// Store the credentials without checking them against the registry.
    #[arg(long)]
    pub no_verify: bool,
    #[command(flatten)]
    pub registry_args: RegistryArgs,
}

#[derive(Args, Debug)]
pub struct LogoutArgs {
    /// Registry HOST[:PORT].
    pub registry: String,
}

#[derive(Args, Debug)]
pub struct ImageNameArgs {
    /// NAME[:TAG] (`:latest` when omitted).
    pub name: String,
    /// A failure as JSON too (the record always is).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct JsonArgs {
    /// Print the result as JSON.
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

/// `husk mcp`: what the tools' sandboxes are made of. The model chooses
/// none of it: root, limits and network are the operator's.
#[derive(Args, Debug)]
pub struct McpArgs {
    /// Root of every sandbox (run_code and create_sandbox): an image.
    #[arg(long, value_name = "REF", conflicts_with = "rootfs")]
    pub image: Option<String>,

    /// Root of every sandbox: a directory, read-only.
    #[arg(long, value_name = "DIR")]
    pub rootfs: Option<PathBuf>,

    /// Memory limit of every sandbox (default: husk run's). A tool call
    /// may ask for less, never more.
    #[arg(long, value_name = "SIZE", allow_negative_numbers = true)]
    pub memory: Option<String>,

    /// CPU limit of every sandbox, e.g. 0.5 (default: none). A tool call
    /// may ask for less, never more.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub cpus: Option<String>,

    /// Task limit of every sandbox (default: husk run's). A tool call may
    /// ask for less, never more.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub pids: Option<String>,

    /// Network of every sandbox: none (default), host, or
    /// allow=RULE,... (repeatable, as husk run --network). Not the model's
    /// to change.
    #[arg(long, value_name = "none|host|allow=RULE,...")]
    pub network: Vec<String>,

    /// Timeout of a tool's command when the call gives none.
    #[arg(long, value_name = "DURATION", value_parser = timeout, default_value = "60s")]
    pub timeout: Duration,

    /// Longest timeout a call may ask for.
    #[arg(long, value_name = "DURATION", value_parser = timeout, default_value = "10m")]
    pub max_timeout: Duration,

    /// Lease of sandboxes made by create_sandbox (renewed by every exec).
    #[arg(long, value_name = "DURATION", value_parser = lease, default_value = "10m")]
    pub ttl: Duration,

    /// Output a tool shows the model, per stream, and the largest file
    /// read_file returns (head and tail kept, the cut said plainly).
    #[arg(long, value_name = "BYTES", value_parser = output_limit, default_value = "64K")]
    pub output_limit: u64,

    /// Sandboxes this server keeps alive at once.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub max_sandboxes: usize,

    /// A pool of the husk serve on this state dir that create_sandbox may
    /// claim from (repeatable; the model names it). Only these: the
    /// operator, not the model, decides what a sandbox may be.
    #[arg(long, value_name = "NAME")]
    pub pool: Vec<String>,
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

    /// When to fetch --image from its registry (once, before the probes):
    /// missing, always, never.
    #[arg(long, value_enum, value_name = "POLICY", default_value = "missing")]
    pub pull: PullArg,

    /// Platform of --image to pull: OS/ARCH[/VARIANT] (default: the host's).
    #[arg(long, value_name = "OS/ARCH")]
    pub platform: Option<String>,

    #[command(flatten)]
    pub registry: RegistryArgs,

    /// One JSON report on stdout instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Only these probes or categories (comma-separated; see --list).
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub only: Vec<String>,

    /// List the probes and exit.
    #[arg(long)]
    pub list: bool,

    /// A static in-sandbox probe to use instead of the one built into husk.
    #[arg(long, value_name = "PATH", env = "HUSK_PROBE")]
    pub probe: Option<PathBuf>,

    /// Test only: add a `husk run` argument to every sandbox (e.g.
    /// --network=host) to prove the selftest reports what gets through.
    #[arg(long = "unsafe-weaken", value_name = "RUN-ARG", hide = true, allow_hyphen_values = true)]
    pub weaken: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<std::ffi::OsString> {
        args.iter().map(Into::into).collect()
    }

    /// The `run`-only tree must read every argument exactly as the full
    /// tree does; what it does not accept must reach the full tree (whose
    /// error or help is the one users see).
    #[test]
    fn run_only_parser_agrees_with_the_full_tree() {
        let same = [
            vec!["husk", "run", "--", "/bin/true"],
            vec!["husk", "run", "--root", "/tmp/r", "--image", "busybox", "--memory", "64M", "--", "sh", "-c", "x"],
            vec!["husk", "run", "--json", "--timeout", "2s", "--env", "A=1", "-e", "B", "--pids", "9", "--", "a"],
            vec!["husk", "run", "--state-dir", "/tmp/s", "--no-cgroup", "--seccomp", "unconfined", "--", "a"],
            vec!["husk", "run", "-i", "--", "cat"],
        ];
        for args in same {
            let fast = Cli::parse_run_only(&os(&args)).unwrap_or_else(|| panic!("run-only refused {args:?}"));
            let full = Cli::try_parse_from(os(&args)).unwrap();
            assert_eq!(format!("{fast:?}"), format!("{full:?}"), "{args:?}");
        }
        for args in [
            vec!["husk", "run", "--help"],
            vec!["husk", "run", "--timeout", "lots", "--", "a"],
            vec!["husk", "--root", "/tmp/r", "run", "--", "a"],
            vec!["husk", "run", "--no-such-flag"],
        ] {
            assert!(Cli::parse_run_only(&os(&args)).is_none(), "{args:?}");
        }
        // ... and the full tree still parses what only it knows.
        assert!(Cli::parse_from_args(os(&["husk", "--root", "/tmp/r", "run", "--", "a"])).is_ok());
    }

    /// `--help` says what every flag does (`husk ls --help` showed
    /// `--json` with nothing beside it).
    #[test]
    fn every_flag_is_described() {
        fn walk(cmd: &clap::Command, path: &str, bare: &mut Vec<String>) {
            for a in cmd.get_arguments().filter(|a| !a.is_hide_set() && !a.is_positional()) {
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    bare.push(format!("{path} --{}", a.get_long().unwrap_or(a.get_id().as_str())));
                }
            }
            for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
                walk(sub, &format!("{path} {}", sub.get_name()), bare);
            }
        }
        let mut cmd = <Cli as clap::CommandFactory>::command();
        cmd.build();
        let mut bare = Vec::new();
        walk(&cmd, "husk", &mut bare);
        assert!(bare.is_empty(), "flags without help: {bare:#?}");
    }

    /// `--help` is for users: a doc comment meant for contributors (module
    /// paths, parser internals) must not leak into any command's help.
    #[test]
    fn help_shows_no_developer_notes() {
        fn walk(cmd: &mut clap::Command, path: &str) {
            let help = cmd.render_long_help().to_string();
            for word in ["::", "clap", "spec_from_args"] {
                assert!(!help.contains(word), "`{path} --help` shows a developer note ({word:?}):\n{help}");
            }
            for sub in cmd.get_subcommands_mut() {
                let name = format!("{path} {}", sub.get_name());
                walk(sub, &name);
            }
        }
        let mut cmd = <Cli as clap::CommandFactory>::command();
        cmd.build();
        walk(&mut cmd, "husk");
    }
}
