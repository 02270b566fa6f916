//! `husk cp` and the copy flags of `husk run` (`--copy-in`, `--copy-out`).

use clap::Args;

/// `husk cp SRC DST`: one side `SANDBOX:PATH`, the other a host path or `-`.
#[derive(Args, Debug)]
pub struct CpArgs {
    /// `SANDBOX:PATH`, a host path, or `-` (a tar stream on stdin).
    #[arg(value_name = "SRC")]
    pub src: String,
    /// `SANDBOX:PATH`, a host path, or `-` (a tar stream on stdout).
    #[arg(value_name = "DST")]
    pub dst: String,
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
