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

pub use crate::request::secrets::{MAX_SECRET, MAX_SECRETS, SecretError, valid_name};

impl SecretArgs {
    /// The command's redaction before its secrets are read: `--redact`
    /// from the start, so a refused secret's own error is redacted too;
    /// `cli::spec::apply_secrets` adds the values.
    pub fn redaction(&self) -> crate::redact::Redaction {
        crate::redact::Redaction::new([], self.redact)
    }
}

impl SecretArgs {
    /// The secrets named, with their values (from husk's environment or
    /// the files); an unset variable or unreadable file is an error, never
    /// an empty secret.
    pub fn resolve(&self) -> Result<Vec<Secret>, SecretError> {
        let mut out = crate::request::secrets::Gathered::default();
        for name in &self.secret_env {
            if !valid_name(name) {
                return Err(SecretError::BadName(name.clone()));
            }
            let v = std::env::var_os(name).ok_or_else(|| SecretError::Unset(name.clone()))?;
            out.add(name, std::os::unix::ffi::OsStringExt::into_vec(v))?;
        }
        for spec in &self.secret_file {
            let (name, path) = spec.split_once('=').ok_or_else(|| SecretError::NoPath(spec.clone()))?;
            let mut v = crate::userfile::read("--secret-file", &PathBuf::from(path), MAX_SECRET)?;
            if v.ends_with(b"\n") {
                v.pop();
            }
            out.add(name, v)?;
        }
        out.done()
    }
}

pub use crate::redact::env_pairs;
