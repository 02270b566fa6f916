//! What the user asked for, before any validation against the host: the
//! output of the CLI layer and the input of `Plan::build`. Serializable, so
//! a long-lived sandbox can record the spec it was created from.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// Where `/` comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode", content = "source")]
pub enum RootSpec {
    /// The host's /usr, /bin, /lib*, /etc (secrets masked), read-only.
    Host,
    /// A directory that becomes `/`.
    Rootfs(PathBuf),
    /// An image reference: a stored name or a path to import.
    Image(String),
}

/// `--pull`: when an image reference is fetched from its registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PullPolicy {
    /// Only when the store has no image by that name.
    #[default]
    Missing,
    /// Every time (the tag may have moved).
    Always,
    /// Never: a missing image is an error.
    Never,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NetworkMode {
    /// A fresh network namespace with only `lo`, up.
    #[default]
    None,
    /// The host's network namespace (explicit opt-out).
    Host,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    #[default]
    ReadOnly,
    ReadWrite,
}

/// `--bind SRC:DST[:ro|rw]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindSpec {
    pub source: PathBuf,
    pub target: String,
    pub access: Access,
}

/// `--tmpfs DST[:SIZE]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TmpfsSpec {
    pub target: String,
    pub size: u64,
}

/// `--rlimit NAME=SOFT[:HARD]`; `None` means unlimited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RlimitSpec {
    pub name: String,
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// Output handling for the command's stdout/stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum OutputSpec {
    /// The command writes straight to husk's own stdout/stderr.
    Passthrough,
    /// Captured into the verdict, each stream bounded to `limit` bytes.
    Capture { limit: u64 },
}

/// A host uid/gid range the sandbox's ids map onto when husk runs as root.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdRange {
    pub base: u32,
    pub count: u32,
}

/// Resource limits (enforced by the cgroup facility).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct LimitSpec {
    pub memory: Option<u64>,
    pub memory_swap: Option<u64>,
    /// CPU quota in millicores (1.5 cpus = 1500).
    pub cpus_milli: Option<u64>,
    pub pids: Option<u64>,
    /// `--no-cgroup`: run without any cgroup (the verdict says `limits: none`).
    pub no_cgroup: bool,
    pub cgroup_parent: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum SeccompSpec {
    /// A profile shipped with husk (`default`, `strict`).
    Named(String),
    /// A Docker/OCI-format profile file.
    File(PathBuf),
    Unconfined,
}

impl Default for SeccompSpec {
    fn default() -> Self {
        SeccompSpec::Named("default".into())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeChoice {
    #[default]
    Native,
    Runsc,
    Auto,
}

/// `--runsc-path` / `--runsc-platform` (for `--runtime runsc|auto`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RunscSpec {
    /// The runsc binary; `None`: `runsc` in PATH.
    pub path: Option<PathBuf>,
    /// gVisor platform; `None`: systrap where available, else ptrace.
    pub platform: Option<String>,
}

/// How an image reference is fetched from its registry (`--platform`,
/// `--insecure-registry`, `--registry-ca`, `--registry-mirror`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RegistrySpec {
    /// `OS/ARCH[/VARIANT]`; `None`: the host's.
    pub platform: Option<String>,
    pub insecure: Vec<String>,
    pub ca_files: Vec<PathBuf>,
    /// `URL` (a Docker Hub mirror) or `REGISTRY=URL`.
    pub mirrors: Vec<String>,
}

/// Everything one sandboxed run needs, as the user gave it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    pub root: RootSpec,
    #[serde(default)]
    pub pull: PullPolicy,
    #[serde(default)]
    pub registry: RegistrySpec,
    /// `--writable`: a tmpfs upper layer over the image, discarded at exit.
    pub writable: bool,
    /// A host directory kept as the root's upper layer after the run
    /// (`husk build`'s RUN steps; no CLI option sets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upper_dir: Option<std::path::PathBuf>,
    /// The command; empty means the image's Entrypoint/Cmd.
    pub command: Vec<String>,
    /// Explicit `KEY=VALUE` pairs in order; later ones win.
    pub env: Vec<(String, String)>,
    /// `None`: the image's WorkingDir, else `/workspace`.
    pub workdir: Option<String>,
    pub workdir_size: u64,
    pub tmp_size: u64,
    pub binds: Vec<BindSpec>,
    pub tmpfs: Vec<TmpfsSpec>,
    pub network: NetworkMode,
    /// `--network allow=...`: the egress allowlist (the namespace stays
    /// private, `network` is `None`).
    #[serde(default)]
    pub egress: Option<crate::net::EgressSpec>,
    /// `--publish`: host ports forwarded to ports inside the sandbox.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub publish: Vec<crate::net::publish::PublishSpec>,
    pub hostname: String,
    /// `UID[:GID]` or a user name resolved inside the root.
    pub user: Option<String>,
    pub cap_add: Vec<String>,
    pub rlimits: Vec<RlimitSpec>,
    pub timeout: Option<Duration>,
    pub kill_grace: Option<Duration>,
    pub output: OutputSpec,
    /// `-t`: the command gets a pty of its own as its controlling terminal
    /// and stdio (src/tty/). Never part of a held sandbox's spec: each
    /// exec asks for its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,
    /// `None`: from /etc/subuid (`husk` entry) or the built-in default.
    pub id_range: Option<IdRange>,
    pub limits: LimitSpec,
    pub seccomp: SeccompSpec,
    pub seccomp_report: bool,
    pub runtime: RuntimeChoice,
    #[serde(default)]
    pub runsc: RunscSpec,
    /// `husk create --warm` / `--session`: an interpreter that waits inside
    /// the sandbox for `husk exec --code` (docs/warm.md). Never part of a
    /// `run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<WarmSpec>,
}

pub const DEFAULT_TMP_SIZE: u64 = 64 << 20;
pub const DEFAULT_WORKDIR_SIZE: u64 = 256 << 20;
pub const DEFAULT_WORKDIR: &str = "/workspace";
pub const DEFAULT_HOSTNAME: &str = "husk";
pub const DEFAULT_OUTPUT_LIMIT: u64 = 1 << 20;

impl Spec {
    /// A spec with every default, running `command` in host mode.
    pub fn new(command: Vec<String>) -> Self {
        Spec {
            root: RootSpec::Host,
            pull: PullPolicy::Missing,
            registry: RegistrySpec::default(),
            writable: false,
            upper_dir: None,
            command,
            env: Vec::new(),
            workdir: None,
            workdir_size: DEFAULT_WORKDIR_SIZE,
            tmp_size: DEFAULT_TMP_SIZE,
            binds: Vec::new(),
            tmpfs: Vec::new(),
            network: NetworkMode::None,
            egress: None,
            publish: Vec::new(),
            hostname: DEFAULT_HOSTNAME.into(),
            user: None,
            cap_add: Vec::new(),
            rlimits: Vec::new(),
            timeout: None,
            kill_grace: None,
            output: OutputSpec::Passthrough,
            tty: false,
            id_range: None,
            limits: LimitSpec::default(),
            seccomp: SeccompSpec::default(),
            seccomp_report: false,
            runtime: RuntimeChoice::Native,
            runsc: RunscSpec::default(),
            warm: None,
        }
    }
}

/// What one `husk exec` asks for, beyond the sandbox's own spec.
#[derive(Clone, Debug, Default)]
pub struct ExecSpec {
    pub argv: Vec<String>,
    /// Added after the sandbox's own (later ones win).
    pub env: Vec<(String, String)>,
    pub user: Option<String>,
    /// Default: the sandbox's workdir.
    pub workdir: Option<String>,
    pub timeout: Option<Duration>,
    pub kill_grace: Option<Duration>,
    /// Capture stdout/stderr into the verdict, each bounded to this many bytes.
    pub capture: Option<u64>,
    /// `-t`: a pty of its own (see `Spec::tty`).
    pub tty: bool,
}

/// The languages a warm interpreter or a session speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Language {
    Python,
    Bash,
}

impl Language {
    pub fn name(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Bash => "bash",
        }
    }

    fn parse(s: &str, flag: &'static str) -> Result<Language, WarmSpecError> {
        match s {
            "python" | "python3" => Ok(Language::Python),
            "bash" => Ok(Language::Bash),
            other => Err(WarmSpecError::UnknownLanguage { flag, given: other.to_string() }),
        }
    }
}

/// A `--warm` / `--session` value husk cannot run (the user's own words,
/// quoted back).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WarmSpecError {
    #[error("{flag}: unknown language {given:?}; husk knows python and bash")]
    UnknownLanguage { flag: &'static str, given: String },
    #[error("--warm {0}: only python has a warm interpreter; use --session {0} for a stateful one")]
    NoZygote(String),
    #[error("--session bash takes no modules (python:MOD,... does)")]
    BashModules,
    #[error("{flag}: {given:?} is not a module name (dotted identifiers, e.g. numpy or os.path)")]
    BadModule { flag: &'static str, given: String },
    #[error("{0}: at most 64 modules")]
    TooManyModules(&'static str),
}

/// Fresh per call (a zygote forks a child for each) or one stateful
/// interpreter whose variables carry from call to call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WarmMode {
    Fork,
    Session,
}

/// `--warm python[:MOD,...]` or `--session python|bash`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmSpec {
    pub mode: WarmMode,
    pub language: Language,
    /// Imported before the first call (the zygote's, or the session's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modules: Vec<String>,
}

impl WarmSpec {
    /// `--warm LANG[:MOD1,MOD2]`: only Python has a zygote (a shell's
    /// state is its cwd and exports, which a session keeps instead).
    pub fn parse_warm(s: &str) -> Result<WarmSpec, WarmSpecError> {
        let (lang, mods) = s.split_once(':').unwrap_or((s, ""));
        let language = Language::parse(lang, "--warm")?;
        if language != Language::Python {
            return Err(WarmSpecError::NoZygote(lang.to_string()));
        }
        let modules = parse_modules(mods, "--warm")?;
        Ok(WarmSpec { mode: WarmMode::Fork, language, modules })
    }

    /// `--session LANG[:MOD1,MOD2]` (modules: python only).
    pub fn parse_session(s: &str) -> Result<WarmSpec, WarmSpecError> {
        let (lang, mods) = s.split_once(':').unwrap_or((s, ""));
        let language = Language::parse(lang, "--session")?;
        let modules = parse_modules(mods, "--session")?;
        if language == Language::Bash && !modules.is_empty() {
            return Err(WarmSpecError::BashModules);
        }
        Ok(WarmSpec { mode: WarmMode::Session, language, modules })
    }

    /// The spelling `parse_warm` / `parse_session` read.
    pub fn arg(&self) -> String {
        let mut s = self.language.name().to_string();
        if !self.modules.is_empty() {
            s.push(':');
            s.push_str(&self.modules.join(","));
        }
        s
    }
}

/// Dotted Python module names, each part an identifier: they are imported
/// by name inside the sandbox, never evaluated.
fn parse_modules(s: &str, flag: &'static str) -> Result<Vec<String>, WarmSpecError> {
    let mut out = Vec::new();
    for m in s.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        let ok = m.split('.').all(|part| {
            let mut c = part.chars();
            c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
                && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
        });
        if !ok || m.len() > 200 {
            return Err(WarmSpecError::BadModule { flag, given: m.to_string() });
        }
        out.push(m.to_string());
    }
    if out.len() > 64 {
        return Err(WarmSpecError::TooManyModules(flag));
    }
    Ok(out)
}

#[cfg(test)]
mod warm_tests {
    use super::*;

    #[test]
    fn warm_specs_parse_and_refuse_what_cannot_run() {
        let w = WarmSpec::parse_warm("python:numpy,os.path").unwrap();
        assert_eq!((w.mode, w.language), (WarmMode::Fork, Language::Python));
        assert_eq!(w.modules, ["numpy", "os.path"]);
        assert_eq!(w.arg(), "python:numpy,os.path");
        assert!(WarmSpec::parse_warm("python").unwrap().modules.is_empty());
        assert!(WarmSpec::parse_warm("bash").unwrap_err().to_string().contains("--session bash"));
        assert!(WarmSpec::parse_warm("ruby").is_err());
        assert!(WarmSpec::parse_warm("python:os;import x").is_err());
        assert!(WarmSpec::parse_warm("python:1abc").is_err());
        assert_eq!(WarmSpec::parse_session("bash").unwrap().mode, WarmMode::Session);
        assert!(WarmSpec::parse_session("bash:os").is_err());
    }
}
