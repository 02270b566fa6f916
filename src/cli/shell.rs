//! `husk completions SHELL` and `husk man DIR`: what every CLI ships,
//! generated from the clap tree that parses husk's own command line.

use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for: bash, zsh or fish.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Directory to write the pages into (husk.1, husk-run.1, husk-image-ls.1, ...),
    /// e.g. /usr/local/share/man/man1; made when missing.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}
