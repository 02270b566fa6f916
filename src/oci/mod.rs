//! husk as an OCI runtime: the runc command-line contract that dockerd,
//! containerd's `io.containerd.runc.v2` shim and Kubernetes' RuntimeClass
//! drive (docs/oci-runtime.md).
//!
//! `main.rs` asks `invoked_as_runtime` first; when it says yes, `main`
//! here parses runc's global flags and verb and runs it. Layout:
//!
//! ```text
//! mod.rs      mode detection, runc's CLI (clap), dispatch, exit codes
//! channel.rs  create <-> intermediate/init messages (pid, go, hooks, state, ready, fail)
//! console.rs  --console-socket: a pty from the container's /dev/ptmx, master sent over SCM_RIGHTS
//! log.rs      --log / --log-format: JSON lines {"level","msg","time"}; errors also on stderr
//! state.rs    the state store under --root: <root>/<id>/state.json + exec.fifo (documented there)
//! spec.rs     the runtime-spec subset as serde reads it (unknown keys ignored)
//! config.rs   config.json -> a validated OciPlan (refusals name the field)
//! create.rs   create/run: clone init in its namespaces, hand it to the caller, wait on exec.fifo
//! init.rs     the container's init: the named setup steps, then exec.fifo, then execve
//! lifecycle.rs start/state/kill/delete/list
//! exec.rs     exec: join a running container's namespaces and cgroup
//! cgroups.rs  cgroupsPath + resources on cgroup v1 (this hybrid host) / v2
//! hooks.rs    runtime-spec hooks: path + args verbatim, state JSON on stdin
//! gc.rs       `husk gc` of this mode's state: stopped containers nobody deleted, empty parents
//! seal.rs     create/run/exec re-exec husk from a read-only or sealed copy (CVE-2019-5736)
//! verify.rs   /dev/null, the pty master and /proc writes opened by what they are, not by path
//! ```
//!
//! Nothing husk prints in this mode goes to stdout, which belongs to the
//! caller's protocol (state JSON, list) or to the container; diagnostics go
//! to --log, and errors to --log and stderr, as runc does.

pub mod cgroups;
pub mod channel;
pub mod config;
pub mod console;
pub mod create;
pub mod exec;
pub mod features;
pub mod gc;
pub mod hooks;
pub mod init;
pub mod lifecycle;
pub mod log;
pub mod mounts;
pub mod pause;
pub mod ps;
pub mod seal;
pub mod spec;
pub mod state;
pub mod template;
pub mod update;
pub mod verify;
pub mod version;

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;

/// runc's global flags: any of them before the verb means the caller speaks
/// runc (dockerd and the containerd shim always pass --log and --root).
/// `--root` alone is also husk's own (the store), so it counts only with a
/// verb husk's CLI does not have, or a runc-only flag after the verb.
const GLOBAL_FLAGS: &[&str] =
    &["--root", "--log", "--log-format", "--debug", "--systemd-cgroup", "--rootless", "--criu"];
/// Flags that take a value (so the word after them is not the verb).
const VALUED_GLOBALS: &[&str] = &["--root", "--log", "--log-format", "--rootless", "--criu", "--state-dir"];
/// Verbs that are the runtime's even without a flag: nobody types them
/// for anything else (`husk spec` writes a config.json as `runc spec`
/// does; containerd's shim asks `features` with no flags at all).
const ALWAYS_RUNTIME_VERBS: &[&str] = &["spec", "features"];
/// Verbs both CLIs have; a runc-only flag after them picks the runtime.
const SHARED_VERBS: &[&str] = &["create", "run", "exec"];
const RUNTIME_ONLY_FLAGS: &[&str] = &[
    "--bundle",
    "-b",
    "--pid-file",
    "--console-socket",
    "--process",
    "--no-pivot",
    "--preserve-fds",
    "--detach",
    "--ignore-paused",
];

/// Whether argv (with argv[0]) is a runc-style invocation. The rule keeps
/// husk's own verbs for people and runc's for engines:
///
/// - `husk oci ...`, or runc's global flags other than `--root` before
///   the verb (`--log`, `--log-format`, ...: the engines always pass
///   `--log`): the runtime, whatever the verb;
/// - `spec`, `features`: the runtime's;
/// - `--root DIR` before a verb husk's CLI does not have
///   (`cli::habits::RUNC_ONLY_VERBS`: `state`, `kill`, `delete`, `ps`,
///   ...): the runtime; without `--root` those get husk's answer, a line
///   naming husk's verb (`husk kill t43` -> `husk rm t43`);
/// - `create`/`run`/`exec` with a runc-only flag (`--bundle`, `--pid-file`,
///   ...; `-d` too after `--root`): the runtime.
///
/// A verb husk's own CLI has (`ls`, `rm`, `pause`, `resume`) is never
/// taken by `--root` alone: `husk --root S run ...` stays husk's `run`.
pub fn invoked_as_runtime(args: &[OsString]) -> bool {
    let words: Vec<&str> = args.iter().skip(1).map(|a| a.to_str().unwrap_or("")).collect();
    if words.first() == Some(&"oci") {
        return true;
    }
    let mut i = 0;
    let mut root = false;
    while i < words.len() && words[i].starts_with('-') {
        let flag = words[i].split('=').next().unwrap_or("");
        if GLOBAL_FLAGS.contains(&flag) && flag != "--root" {
            return true;
        }
        root |= flag == "--root";
        if VALUED_GLOBALS.contains(&flag) && !words[i].contains('=') {
            i += 1;
        }
        i += 1;
    }
    let Some(verb) = words.get(i) else { return false };
    if ALWAYS_RUNTIME_VERBS.contains(verb) || (root && crate::cli::habits::RUNC_ONLY_VERBS.contains(verb)) {
        return true;
    }
    let runtime_flag = |w: &&str| {
        let flag = w.split('=').next().unwrap_or("");
        // runc exec's `-p` is --process; Docker's `run -p` is a port (a
        // person's, answered by cli::habits).
        RUNTIME_ONLY_FLAGS.contains(&flag) || (root && flag == "-d") || (*verb == "exec" && flag == "-p")
    };
    SHARED_VERBS.contains(verb) && words[i + 1..].iter().take_while(|w| **w != "--").any(runtime_flag)
}

#[derive(Parser, Debug)]
#[command(name = "husk", disable_version_flag = true, about = "husk as an OCI runtime (runc's command line)")]
pub struct OciCli {
    /// Where container state lives (runc: /run/runc). Default: /run/husk/oci
    /// as root, $XDG_RUNTIME_DIR/husk/oci otherwise.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Diagnostics go here (never to the container's stdio).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    #[arg(long)]
    pub debug: bool,
    /// The systemd cgroup driver: refused (husk drives cgroupfs only).
    #[arg(long)]
    pub systemd_cgroup: bool,
    /// runc's rootless switch (true|false|auto); husk decides from its euid.
    #[arg(long, value_name = "BOOL")]
    pub rootless: Option<String>,
    /// Accepted for runc compatibility; checkpoint/restore is not supported.
    #[arg(long, hide = true)]
    pub criu: Option<String>,
    #[command(subcommand)]
    pub command: OciCommand,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum OciCommand {
    /// Create a container from a bundle; its init waits for `start`.
    Create(CreateArgs),
    /// Start a created container's process.
    Start(IdArg),
    /// create + start; without --detach, wait and exit with its status.
    Run(RunArgs),
    /// Print a container's state (JSON).
    State(IdArg),
    /// Send a signal to a container's init (or with --all to every process).
    Kill(KillArgs),
    /// Remove a container's state, cgroup and process.
    Delete(DeleteArgs),
    /// List containers.
    #[command(alias = "ls")]
    List(ListArgs),
    /// Run a process in a running container.
    Exec(Box<ExecArgs>),
    /// Freeze every process of a container (cgroup freezer).
    Pause(IdArg),
    /// Thaw a paused container.
    Resume(IdArg),
    /// List a container's processes.
    Ps(ps::PsArgs),
    /// Change a running container's cgroup limits.
    Update(Box<update::UpdateArgs>),
    /// Write a template config.json (runc spec's) into the bundle.
    Spec(SpecArgs),
    /// Print the runtime-spec features document (JSON).
    Features,
    /// Refused: husk has no CRIU integration (an error, not a usage error).
    Checkpoint(UnsupportedArgs),
    /// Refused: husk has no CRIU integration (an error, not a usage error).
    Restore(UnsupportedArgs),
}

/// The arguments of a verb husk answers with a runtime error whatever they
/// are (runc's `checkpoint`/`restore` flags are many; none is read).
#[derive(Args, Debug, Clone)]
pub struct UnsupportedArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

#[derive(Args, Debug, Clone)]
pub struct SpecArgs {
    /// Where config.json is written.
    #[arg(long, short = 'b', default_value = ".")]
    pub bundle: PathBuf,
    /// A template for an unprivileged caller (user namespace, no netns).
    #[arg(long)]
    pub rootless: bool,
}

#[derive(Args, Debug, Clone)]
pub struct IdArg {
    pub id: String,
}

#[derive(Args, Debug, Clone)]
pub struct CreateArgs {
    /// The bundle: config.json and the root filesystem.
    #[arg(long, short = 'b', default_value = ".")]
    pub bundle: PathBuf,
    /// A unix socket that receives the pty master (process.terminal).
    #[arg(long)]
    pub console_socket: Option<PathBuf>,
    /// Written with init's host pid (bare decimal, no newline).
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Accepted; husk always pivot_roots (refused: see docs).
    #[arg(long)]
    pub no_pivot: bool,
    /// Accepted: husk creates no session keyring either way.
    #[arg(long)]
    pub no_new_keyring: bool,
    /// Pass N extra fds (3..3+N) to the container.
    #[arg(long, default_value_t = 0)]
    pub preserve_fds: u32,
    pub id: String,
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub create: CreateArgs,
    /// Return once the container started (its init left to the caller).
    #[arg(long, short = 'd')]
    pub detach: bool,
    #[arg(long)]
    pub keep: bool,
}

#[derive(Args, Debug, Clone)]
pub struct KillArgs {
    /// Signal every process of the container (its cgroup), not only init.
    #[arg(long, short = 'a')]
    pub all: bool,
    pub id: String,
    /// A name (TERM, SIGTERM) or number; default SIGTERM.
    #[arg(default_value = "SIGTERM")]
    pub signal: String,
}

#[derive(Args, Debug, Clone)]
pub struct DeleteArgs {
    /// Kill a running container first.
    #[arg(long, short = 'f')]
    pub force: bool,
    pub id: String,
}

#[derive(Args, Debug, Clone)]
pub struct ListArgs {
    #[arg(long, short = 'f', default_value = "table")]
    pub format: String,
    /// Only ids.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ExecArgs {
    /// The process (runtime-spec `process` object) as a JSON file.
    #[arg(long, short = 'p')]
    pub process: Option<PathBuf>,
    #[arg(long, short = 'd')]
    pub detach: bool,
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    #[arg(long)]
    pub console_socket: Option<PathBuf>,
    #[arg(long, short = 't')]
    pub tty: bool,
    #[arg(long)]
    pub cwd: Option<String>,
    #[arg(long, short = 'e')]
    pub env: Vec<String>,
    /// UID[:GID]
    #[arg(long, short = 'u')]
    pub user: Option<String>,
    #[arg(long, short = 'g')]
    pub additional_gids: Vec<u32>,
    #[arg(long, short = 'c')]
    pub cap: Vec<String>,
    #[arg(long)]
    pub no_new_privs: bool,
    #[arg(long, default_value_t = 0)]
    pub preserve_fds: u32,
    /// Exec even when the container is paused (the process starts frozen).
    #[arg(long)]
    pub ignore_paused: bool,
    #[arg(long)]
    pub process_label: Option<String>,
    #[arg(long)]
    pub apparmor: Option<String>,
    pub id: String,
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// Everything that can end a runtime command with an error; printed once,
/// at the top, to --log and stderr.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("container {0} does not exist")]
    NotExist(String),
    #[error("container {0} already exists")]
    Exists(String),
    #[error("container not running")]
    NotRunning,
    #[error("container {id} is {status}: {what}")]
    WrongStatus { id: String, status: &'static str, what: &'static str },
    #[error("invalid container id {0:?}: use letters, digits, '_', '-', '.' (no '/', not '.' or '..')")]
    BadId(String),
    #[error("{0}")]
    Config(#[from] config::ConfigError),
    #[error("{0}")]
    State(#[from] state::StateError),
    #[error("{0}")]
    Cgroup(#[from] cgroups::OciCgroupError),
    #[error("{0}")]
    Hook(#[from] hooks::HookError),
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("{what}: {errno}")]
    Sys { what: String, errno: nix::errno::Errno },
    #[error("container init failed at {step}: {errno}{detail}")]
    Init { step: &'static str, errno: nix::errno::Errno, detail: String },
    #[error("{0}")]
    Template(#[from] template::TemplateError),
    #[error("{0}")]
    Refused(String),
}

impl OciError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> OciError {
        OciError::Io { what: what.into(), source }
    }
    pub fn sys(what: impl Into<String>, errno: nix::errno::Errno) -> OciError {
        OciError::Sys { what: what.into(), errno }
    }
}

/// Runs one runtime command; returns the process's exit code. Errors are
/// logged here, once.
pub fn main(args: Vec<OsString>) -> i32 {
    let mut args = args;
    if args.get(1).is_some_and(|a| a == "oci") {
        args.remove(1);
    }
    let cli = match OciCli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 1 } else { 0 };
        }
    };
    log::init(cli.log.as_deref(), cli.log_format, cli.debug);
    // The verbs whose processes enter the container run from a copy the
    // container cannot write (seal.rs); this returns in that copy.
    if matches!(cli.command, OciCommand::Create(_) | OciCommand::Run(_) | OciCommand::Exec(_))
        && let Err(e) = seal::ensure_sealed()
    {
        log::error(&e.to_string());
        return 1;
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            log::error(&e.to_string());
            1
        }
    }
}

fn run(cli: OciCli) -> Result<i32, OciError> {
    if cli.systemd_cgroup {
        return Err(OciError::Refused(
            "--systemd-cgroup: husk drives cgroups through cgroupfs only; configure the engine with the cgroupfs \
             driver (dockerd: --exec-opt native.cgroupdriver=cgroupfs; containerd: SystemdCgroup = false)"
                .into(),
        ));
    }
    // Neither touches --root (runc's do not either).
    match &cli.command {
        OciCommand::Spec(a) => return template::write_spec(&a.bundle, a.rootless).map(|_| 0).map_err(Into::into),
        OciCommand::Features => {
            let text = serde_json::to_string_pretty(&features::features_document()).expect("features serialize");
            crate::outln!("{text}");
            return Ok(0);
        }
        _ => {}
    }
    let store = state::Store::open(cli.root.clone())?;
    match cli.command {
        OciCommand::Create(a) => create::create(&store, &a).map(|()| 0),
        OciCommand::Run(a) => create::run(&store, &a),
        OciCommand::Start(a) => lifecycle::start(&store, &a.id).map(|()| 0),
        OciCommand::State(a) => lifecycle::state(&store, &a.id).map(|()| 0),
        OciCommand::Kill(a) => lifecycle::kill(&store, &a).map(|()| 0),
        OciCommand::Delete(a) => lifecycle::delete(&store, &a).map(|()| 0),
        OciCommand::List(a) => lifecycle::list(&store, &a).map(|()| 0),
        OciCommand::Exec(a) => exec::exec(&store, &a),
        OciCommand::Pause(a) => pause::pause(&store, &a.id).map(|()| 0),
        OciCommand::Resume(a) => pause::resume(&store, &a.id).map(|()| 0),
        OciCommand::Ps(a) => ps::ps(&store, &a).map(|()| 0),
        OciCommand::Update(a) => update::update(&store, &a).map(|()| 0),
        OciCommand::Checkpoint(_) | OciCommand::Restore(_) => Err(OciError::Refused(
            "checkpoint and restore are not supported by husk (it has no CRIU integration)".into(),
        )),
        OciCommand::Spec(_) | OciCommand::Features => unreachable!("answered above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<OsString> {
        std::iter::once("husk").chain(s.split_whitespace()).map(OsString::from).collect()
    }

    #[test]
    fn the_shims_command_lines_pick_the_runtime_and_husks_own_do_not() {
        for yes in [
            "--root /var/run/docker/runtime-runc/moby --log /x/log.json --log-format json create --bundle /b --pid-file /p id",
            "--root /run/containerd/runc/k8s.io --log /l --log-format json start id",
            "--root /r state id",
            "--root /r kill --all id 9",
            "--root /r delete id",
            "--root /r exec --process /p.json --detach --pid-file /p id",
            "oci list",
            "oci state id",
            "create --bundle . id",
            "--systemd-cgroup create id",
            "--root /r run -d id",
            "exec -p /p.json id",
            "--root=/r ps id",
            "features",
            "spec --rootless",
        ] {
            assert!(invoked_as_runtime(&argv(yes)), "{yes}");
        }
        for no in [
            "run -- true",
            "--root /store run --image x -- true",
            "create --name x",
            "exec x -- ls",
            "ls",
            "",
            // A person's Docker habits: husk's CLI answers them (cli::habits).
            "state t43",
            "kill t43",
            "delete t43",
            "ps",
            "list",
            "--state-dir /s ps",
            "run -d --image x -- sleep 1",
            "--root /store ls",
            "run --image x -- ls -p",
            "run -p 8080:80 --image x -- ls",
            "exec x -- cmd --pid-file f",
        ] {
            assert!(!invoked_as_runtime(&argv(no)), "{no}");
        }
    }
}
