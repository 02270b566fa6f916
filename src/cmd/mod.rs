//! One file per subcommand: arguments -> Spec -> library calls -> exit code.

pub mod doctor;
pub mod gc;
pub mod image;
pub mod run;
pub mod seccomp;

use crate::cli::{Cli, Command};
use crate::paths::Paths;

/// Runs the parsed command line; returns the process exit code.
pub fn dispatch(cli: Cli, t_start: u64) -> i32 {
    // Resolved once; only commands that touch the store or state fail on it.
    let paths = Paths::from_cli(cli.root.as_deref(), cli.state_dir.as_deref());
    match cli.command {
        Command::Run(args) => run::run(*args, &paths, cli.state_dir.as_deref(), t_start),
        Command::Seccomp(args) => seccomp::seccomp(args),
        Command::Doctor(args) => doctor::doctor(args),
        Command::Gc(args) => gc::gc(args, cli.state_dir.as_deref()),
        Command::Image(args) => image::image(args, &paths),
    }
}
