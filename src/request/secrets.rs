//! Secrets of a request: checked once, whichever door they came through
//! (`--secret-env` / `--secret-file` of the CLI, `secret_env` of the API).

use crate::redact::Secret;

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

/// Secrets being gathered: each checked as it is added.
#[derive(Default)]
pub struct Gathered(Vec<Secret>);

impl Gathered {
    pub fn add(&mut self, name: &str, value: Vec<u8>) -> Result<(), SecretError> {
        if !valid_name(name) {
            return Err(SecretError::BadName(name.into()));
        }
        if value.contains(&0) || std::str::from_utf8(&value).is_err() {
            return Err(SecretError::BadValue(name.into()));
        }
        if self.0.iter().any(|s| s.name == name) {
            return Err(SecretError::Twice(name.into()));
        }
        if value.len() as u64 > MAX_SECRET {
            return Err(SecretError::TooLarge(name.into()));
        }
        self.0.push(Secret { name: name.into(), value });
        Ok(())
    }

    pub fn done(self) -> Result<Vec<Secret>, SecretError> {
        if self.0.iter().map(|s| s.name.len() + s.value.len()).sum::<usize>() > MAX_SECRETS {
            return Err(SecretError::TooMany);
        }
        Ok(self.0)
    }
}

/// Secrets given as they are (an API body's `secret_env`), checked as the
/// CLI's are.
pub fn check(secrets: Vec<Secret>) -> Result<Vec<Secret>, SecretError> {
    let mut g = Gathered::default();
    for s in secrets {
        g.add(&s.name, s.value)?;
    }
    g.done()
}
