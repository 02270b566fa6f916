//! `husk cp` and the copy flags of `husk run` (`--copy-in`, `--copy-out`).

use clap::Args;

/// `husk cp SRC DST`: one side `SANDBOX:PATH`, the other a host path or `-`.
#[derive(Args, Debug)]
pub struct CpArgs {
    /// `SANDBOX:PATH`, a host path, or `-` (a tar stream on stdin).
    #[arg(value_name = "SRC")]
    pub src: String,
    /// `SANDBOX:PATH`, a host path, or `-` (a tar stream on stdout).
    #[arg(value_name = "DST", required_unless_present = "list")]
    pub dst: Option<String>,
    /// Print the entries of the directory SRC (`SANDBOX:PATH`) as JSON
    /// (name, type, size, mode) instead of copying.
    #[arg(long, conflicts_with = "dst")]
    pub list: bool,
    #[command(flatten)]
    pub copy: CopyArgs,
    /// Read and write the sandbox's files as this user (name or uid[:gid];
    /// default: the sandbox's user).
    #[arg(long, short = 'u', value_name = "USER")]
    pub user: Option<String>,
    /// If an exec runs, wait for it instead of failing with "busy".
    #[arg(long)]
    pub wait: bool,
}

/// Bounds of one copy (both directions).
#[derive(Args, Debug, Clone, Copy)]
pub struct CopyArgs {
    /// Most bytes of file data one copy moves (e.g. 100M, 2G).
    #[arg(long, value_name = "SIZE", value_parser = super::size_of, default_value = "1G")]
    pub max_bytes: u64,
    /// Most entries (files, directories, links) one copy moves.
    #[arg(long, value_name = "N", default_value_t = crate::copy::DEFAULT_MAX_ENTRIES)]
    pub max_entries: u64,
}

impl CopyArgs {
    pub fn limits(&self) -> crate::copy::Limits {
        crate::copy::Limits { max_bytes: self.max_bytes, max_entries: self.max_entries }
    }
}

/// `husk run --copy-in HOST:PATH`: the sandbox's path is after the last
/// `:` (it may not hold one; the host path may).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyIn {
    pub host: String,
    pub path: String,
}

/// `husk run --copy-out PATH:HOST`: the sandbox's path is before the first
/// `:` (it may not hold one; the host path may).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyOut {
    pub path: String,
    pub host: String,
}

/// A `--copy-in` / `--copy-out` operand without its two halves (the
/// user's own text, quoted back).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CopyOperandError {
    #[error(
        "expected HOST:PATH (a host file or directory, then where it goes in the sandbox), e.g. ./src:/workspace/, not {0:?}"
    )]
    In(String),
    #[error(
        "expected PATH:HOST (a path in the sandbox, then where it goes on the host), e.g. /workspace/out:./out, not {0:?}"
    )]
    Out(String),
}

pub fn copy_in(s: &str) -> Result<CopyIn, CopyOperandError> {
    match s.rsplit_once(':') {
        Some((host, path)) if !host.is_empty() && !path.is_empty() => {
            Ok(CopyIn { host: host.into(), path: path.into() })
        }
        _ => Err(CopyOperandError::In(s.to_string())),
    }
}

pub fn copy_out(s: &str) -> Result<CopyOut, CopyOperandError> {
    match s.split_once(':') {
        Some((path, host)) if !path.is_empty() && !host.is_empty() => {
            Ok(CopyOut { path: path.into(), host: host.into() })
        }
        _ => Err(CopyOperandError::Out(s.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_operands_keep_colons_on_the_host_side_only() {
        assert_eq!(copy_in("./a:b:/w/"), Ok(CopyIn { host: "./a:b".into(), path: "/w/".into() }));
        assert_eq!(copy_out("/w/out:./x:y"), Ok(CopyOut { path: "/w/out".into(), host: "./x:y".into() }));
        assert!(copy_in("nocolon").is_err());
        assert!(copy_in(":/w").is_err());
        assert!(copy_out("/w:").is_err());
    }
}
