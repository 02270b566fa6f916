//! One file per subcommand: arguments -> Spec -> library calls -> exit code.

pub mod doctor;
pub mod gc;
pub mod run;
pub mod seccomp;
pub mod selftest;

use crate::cli::{Cli, Command};

/// Runs the parsed command line; returns the process exit code.
pub fn dispatch(cli: Cli, t_start: u64) -> i32 {
    match cli.command {
        Command::Run(args) => run::run(*args, cli.root, t_start),
        Command::Seccomp(args) => seccomp::seccomp(args),
        Command::Doctor(args) => doctor::doctor(args),
        Command::Gc(args) => gc::gc(args),
        Command::Selftest(args) => selftest::selftest(args, cli.root),
    }
}
