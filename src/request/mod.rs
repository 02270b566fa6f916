//! Typed requests: what a caller asks of a sandbox, the same for every front
//! door. The CLI turns its flags into these (cli/spec.rs), `husk serve`
//! turns its JSON bodies into them (cmd/serve/body.rs), and the library
//! (src/sandbox/) takes them: `lower` is the one place they become a
//! `Spec`, with one set of checks and one set of messages.
//!
//! They sit below the library (next to `spec`) because the CLI's clap
//! structs convert into them and cli/ is a bottom layer; `sandbox` re-exports
//! them as its own API.
//!
//! Values keep the CLI's textual forms where the CLI parses them with a
//! message naming the flag (`memory: "256M"`, `binds: ["SRC:DST:rw"]`), so
//! a bad value fails with the same words whichever door it came through.

pub mod lower;
pub mod secrets;

use crate::redact::Secret;
use crate::spec::{PullPolicy, RuntimeChoice};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use lower::ArgsError;

/// What a sandbox is made of: root, mounts, network, identity, limits,
/// backend. `husk run`'s and `husk create`'s sandbox flags.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxOptions {
    /// A stored image name, an OCI layout/archive path or a registry reference.
    pub image: Option<String>,
    /// A directory used as the read-only root (wins over `image`).
    pub rootfs: Option<PathBuf>,
    pub pull: PullPolicy,
    /// `OS/ARCH[/VARIANT]` of `image` to pull.
    pub platform: Option<String>,
    pub insecure_registries: Vec<String>,
    pub registry_ca: Vec<PathBuf>,
    /// `URL` or `REGISTRY=URL`.
    pub registry_mirrors: Vec<String>,
    pub writable: bool,
    pub workdir: Option<String>,
    /// Bytes; `None`: `spec::DEFAULT_WORKDIR_SIZE`.
    pub workdir_size: Option<u64>,
    /// Bytes; `None`: `spec::DEFAULT_TMP_SIZE`.
    pub tmp_size: Option<u64>,
    /// `SRC:DST[:ro|rw]` each.
    pub binds: Vec<String>,
    /// `DST[:SIZE]` each.
    pub tmpfs: Vec<String>,
    /// `none`, `host` or `allow=RULE[,RULE...]` (repeatable for allow=).
    pub network: Vec<String>,
    pub allow_hosts: Vec<String>,
    /// `NAME:IP` each.
    pub add_hosts: Vec<String>,
    pub egress_bytes: Option<u64>,
    /// `[HOSTIP:]HOSTPORT:PORT` each.
    pub publish: Vec<String>,
    /// `None`: `spec::DEFAULT_HOSTNAME`.
    pub hostname: Option<String>,
    pub cap_add: Vec<String>,
    /// `NAME=SOFT[:HARD]` each.
    pub rlimits: Vec<String>,
    /// `BASE:COUNT`.
    pub id_range: Option<String>,
    pub id_range_force: bool,
    pub runtime: RuntimeChoice,
    /// `default`, `strict`, `unconfined` or a profile's path; `None`: default.
    pub seccomp: Option<String>,
    pub seccomp_report: bool,
    /// `256M`, `2G`, `unlimited`.
    pub memory: Option<String>,
    pub memory_swap: Option<String>,
    /// Fractional cpus: `0.5`, `2`.
    pub cpus: Option<String>,
    /// A count or `unlimited`.
    pub pids: Option<String>,
    pub no_cgroup: bool,
    pub cgroup_parent: Option<String>,
    pub runsc_path: Option<PathBuf>,
    pub runsc_platform: Option<String>,
}

/// How one command is run: the per-command options of `run` and `exec`
/// (and, for `create`, the defaults of every exec: env, user, secrets).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessOptions {
    /// `KEY=VALUE`, or `KEY`: copied from the caller's own environment when
    /// it has it (Docker's rule). A remote door sends only `KEY=VALUE`.
    pub env: Vec<String>,
    /// Files of `KEY=VALUE` lines, read by the caller's process.
    pub env_files: Vec<PathBuf>,
    /// `UID[:GID]` or a user name of the root's /etc/passwd.
    pub user: Option<String>,
    #[serde(with = "duration_text")]
    pub timeout: Option<Duration>,
    #[serde(with = "duration_text")]
    pub kill_grace: Option<Duration>,
    /// Capture output (head and tail, this many bytes per stream); `None`:
    /// passthrough on the caller's stdio.
    pub capture: Option<u64>,
    /// The output is streamed as events as it happens (`--json-stream`).
    pub stream: bool,
    pub tty: bool,
    /// Values the command gets in its environment and husk hides in its
    /// output; never serialized (a request that is written down or logged
    /// carries no secret).
    #[serde(skip)]
    pub secrets: Vec<Secret>,
    /// `--redact`: host paths, host name and users out of error text.
    pub redact_host: bool,
}

impl ProcessOptions {
    /// The request's redaction before its secrets are read: `--redact`
    /// from the start (a refused secret's own error is redacted too);
    /// `lower::apply_process` adds the values, the exec the sandbox's.
    pub fn redaction(&self) -> crate::redact::Redaction {
        crate::redact::Redaction::new([], self.redact_host)
    }
}

/// `husk create`: a sandbox that lives, and its lease.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CreateOptions {
    pub sandbox: SandboxOptions,
    /// The execs' defaults: env, env files, user, secrets (timeouts and
    /// capture are per exec and ignored here).
    pub process: ProcessOptions,
    #[serde(with = "duration_text::plain")]
    pub ttl: Duration,
    #[serde(with = "duration_text")]
    pub max_lifetime: Option<Duration>,
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub concurrent: bool,
    /// `python[:MOD,...]`: a warm interpreter (docs/warm.md).
    pub warm: Option<String>,
    /// `python` or `bash`: a session.
    pub session: Option<String>,
    /// A readiness check: a shell command (`/bin/sh -c`).
    pub ready_cmd: Option<String>,
    #[serde(with = "duration_text::plain")]
    pub ready_timeout: Duration,
}

/// `husk create`'s defaults (the CLI's clap defaults say the same).
pub const DEFAULT_TTL: Duration = Duration::from_secs(600);
pub const DEFAULT_MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            sandbox: SandboxOptions::default(),
            process: ProcessOptions::default(),
            ttl: DEFAULT_TTL,
            max_lifetime: Some(DEFAULT_MAX_LIFETIME),
            name: None,
            labels: BTreeMap::new(),
            concurrent: false,
            warm: None,
            session: None,
            ready_cmd: None,
            ready_timeout: DEFAULT_READY_TIMEOUT,
        }
    }
}

/// `husk exec`: one command (or code) in a live sandbox.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecOptions {
    /// The sandbox: id, name or unique id prefix.
    pub sandbox: String,
    pub argv: Vec<String>,
    /// Code for the sandbox's warm interpreter or session (or, without
    /// one, `python3 -` / `bash -s`); instead of `argv`. Bytes (a file of
    /// the CLI's need not be UTF-8); text in JSON.
    #[serde(with = "code_text")]
    pub code: Option<Vec<u8>>,
    /// The language of `code` (default: the interpreter's, else python).
    pub language: Option<String>,
    pub process: ProcessOptions,
    /// The command's cwd (default: the sandbox's workdir).
    pub workdir: Option<String>,
    /// Queue behind a running exec instead of failing with "busy".
    pub wait: bool,
}

/// Durations as text (`"30s"`, `"1500ms"`), read from text or a number of
/// seconds, as the CLI's flags and the API's bodies give them.
pub mod duration_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&format!("{}ms", d.as_millis())),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let v = Option::<serde_json::Value>::deserialize(d)?;
        v.map(|v| parse(&v).map_err(serde::de::Error::custom)).transpose()
    }

    /// Why a JSON value is not a duration.
    #[derive(Debug, thiserror::Error)]
    pub enum DurationError {
        #[error("expected a duration (\"30s\", \"10m\") or seconds, got {0}")]
        NotText(serde_json::Value),
        #[error(transparent)]
        Unit(#[from] crate::units::UnitError),
    }

    /// A string (`"10m"`) or a number of seconds.
    pub fn parse(v: &serde_json::Value) -> Result<Duration, DurationError> {
        let text = match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            other => return Err(DurationError::NotText(other.clone())),
        };
        Ok(crate::units::parse_duration(&text)?)
    }

    /// A duration that is always there.
    pub mod plain {
        use serde::{Deserialize, Deserializer, Serializer};
        use std::time::Duration;

        pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&format!("{}ms", d.as_millis()))
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
            super::parse(&serde_json::Value::deserialize(d)?).map_err(serde::de::Error::custom)
        }
    }
}

/// Code as JSON text (bytes that are not UTF-8 are written lossily: only
/// the CLI, which never serializes a request, reads such files).
mod code_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(c: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match c {
            Some(c) => s.serialize_str(&String::from_utf8_lossy(c)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Ok(Option::<String>::deserialize(d)?.map(String::into_bytes))
    }
}
