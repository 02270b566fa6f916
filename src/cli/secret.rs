//! `--secret-env` / `--secret-file` / `--redact` (run, create, exec): values
//! the command gets in its environment that husk never writes down (not
//! in argv, state.json, `inspect`, a verdict) and hides in captured output
//! (`redact`).

use crate::redact::Secret;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone, Default)]
pub struct SecretArgs {
    /// Give the command the environment variable NAME with its value from
    /// husk's own environment, as a secret: never in argv, state or a
    /// verdict, and replaced by `[husk: secret NAME]` in captured output
    /// (--json, --json-stream). Repeatable.
    #[arg(long, value_name = "NAME")]
    pub secret_env: Vec<String>,

    /// NAME=PATH: the secret NAME's value is the file PATH's content (one
    /// trailing newline dropped); otherwise as --secret-env. Repeatable.
    #[arg(long, value_name = "NAME=PATH")]
    pub secret_file: Vec<String>,

    /// Keep host paths, the host's name and user names out of the
    /// verdict's error text (what a model may see): each becomes [path],
    /// [host] or [user].
    #[arg(long)]
    pub redact: bool,
}

impl SecretArgs {
    /// The command's redaction before its secrets are read: `--redact`
    /// from the start, so a refused secret's own error is redacted too;
    /// `cli::spec::apply_secrets` adds the values.
    pub fn redaction(&self) -> crate::redact::Redaction {
        crate::redact::Redaction::new([], self.redact)
    }
}

/// Most bytes one secret may hold (an environment value, kept in memory by
/// the sandbox's supervisor).
pub const MAX_SECRET: u64 = 16 << 10;

/// Most bytes a sandbox's secrets may hold together (they travel to each
/// exec in one message of the supervisor's socket).
pub const MAX_SECRETS: usize = 32 << 10;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("--secret-env {0:?}: not an environment variable name (letters, digits, _; not starting with a digit)")]
    BadName(String),
    #[error("--secret-env {0}: husk's environment has no {0}; export it, or give --secret-file {0}=PATH")]
    Unset(String),
    #[error("--secret-file {0:?}: give NAME=PATH")]
    NoPath(String),
    #[error("{0}")]
    File(#[from] crate::userfile::UserFileError),
    #[error("secret {0}: its value holds a NUL byte or is not UTF-8, which an environment variable cannot carry")]
    BadValue(String),
    #[error("secret {0} is given twice")]
    Twice(String),
    #[error("--secret-file {0}: more than 16 KiB")]
    TooLarge(String),
    #[error("the secrets hold more than 32 KiB together")]
    TooMany,
}

/// A valid environment variable name.
pub fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && !n.starts_with(|c: char| c.is_ascii_digit())
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl SecretArgs {
    /// The secrets named, with their values (from husk's environment or
    /// the files); an unset variable or unreadable file is an error, never
    /// an empty secret.
    pub fn resolve(&self) -> Result<Vec<Secret>, SecretError> {
        let mut out: Vec<Secret> = Vec::new();
        let mut add = |name: &str, value: Vec<u8>| {
            if !valid_name(name) {
                return Err(SecretError::BadName(name.into()));
            }
            if value.contains(&0) || std::str::from_utf8(&value).is_err() {
                return Err(SecretError::BadValue(name.into()));
            }
            if out.iter().any(|s| s.name == name) {
                return Err(SecretError::Twice(name.into()));
            }
            if value.len() as u64 > MAX_SECRET {
                return Err(SecretError::TooLarge(name.into()));
            }
            out.push(Secret { name: name.into(), value });
            Ok(())
        };
        for name in &self.secret_env {
            if !valid_name(name) {
                return Err(SecretError::BadName(name.clone()));
            }
            let v = std::env::var_os(name).ok_or_else(|| SecretError::Unset(name.clone()))?;
            add(name, std::os::unix::ffi::OsStringExt::into_vec(v))?;
        }
        for spec in &self.secret_file {
            let (name, path) = spec.split_once('=').ok_or_else(|| SecretError::NoPath(spec.clone()))?;
            let mut v = crate::userfile::read("--secret-file", &PathBuf::from(path), MAX_SECRET)?;
            if v.ends_with(b"\n") {
                v.pop();
            }
            add(name, v)?;
        }
        if out.iter().map(|s| s.name.len() + s.value.len()).sum::<usize>() > MAX_SECRETS {
            return Err(SecretError::TooMany);
        }
        Ok(out)
    }
}

pub use crate::redact::env_pairs;
