//! One file per subcommand: arguments -> Spec -> library calls -> exit code.

pub mod build;
pub mod claim;
pub mod cp;
pub mod doctor;
pub mod fork;
pub mod fork_memory;
pub mod gc;
pub mod image;
pub mod images;
pub mod mcp;
pub mod pause;
pub mod pull;
pub mod run;
pub mod run_copy;
pub mod sandbox;
pub mod seccomp;
pub mod selftest;
pub mod serve;
pub mod shell;

use crate::cli::{Cli, Command};
use crate::paths::Paths;

/// Runs the parsed command line; returns the process exit code.
pub fn dispatch(cli: Cli, t_start: u64) -> i32 {
    // Resolved once; only commands that touch the store or state fail on it.
    let paths = Paths::from_cli(cli.globals.root.as_deref(), cli.globals.state_dir.as_deref());
    match cli.command {
        // The CLI's own routes (no cmd/ file calls another: they meet here).
        Command::Run(args) if run_copy::wants_copies(&args) => run_copy::run(*args, &paths, t_start),
        Command::Run(args) => run::run(*args, &paths, cli.globals.state_dir.as_deref(), t_start),
        Command::Seccomp(args) => seccomp::seccomp(args),
        Command::Doctor(args) => doctor::doctor(args),
        Command::Gc(args) => gc::gc(args, cli.globals.state_dir.as_deref(), &paths),
        Command::Image(args) => image::image(args, &paths),
        Command::Pull(args) => pull::pull_cmd(args, &paths),
        Command::Build(args) => build::build(args, &paths),
        Command::Push(args) => images::push(args, &paths),
        Command::Commit(args) => images::commit(args, &paths),
        Command::Login(args) => pull::login_cmd(args, &paths),
        Command::Logout(args) => pull::logout_cmd(args, &paths),
        Command::Create(args) if args.pool.is_some() && args.from_snapshot.is_none() => {
            match claim::create_from_pool(&args, &paths) {
                Some(code) => code,
                None => sandbox::create_cold(*args, &paths),
            }
        }
        Command::Create(mut args) => match fork::snapshot_for_create(&mut args, &paths) {
            Ok(snap) => fork::create_done(snap, sandbox::create(*args, &paths)),
            Err(code) => code,
        },
        Command::Fork(args) if args.memory => fork_memory::fork(&args, &paths),
        Command::Fork(args) => fork::fork(args, &paths),
        Command::Exec(args) => sandbox::exec(*args, &paths, t_start),
        Command::Ls(args) => sandbox::ls(args, &paths),
        Command::Inspect(args) => sandbox::inspect(args, &paths),
        Command::Rm(args) => sandbox::rm(args, &paths),
        Command::Renew(args) => sandbox::renew(args, &paths),
        Command::Pause(args) => pause::pause(args, &paths),
        Command::Resume(args) => pause::resume(args, &paths),
        Command::Cp(args) => cp::cp(*args, &paths),
        Command::Serve(args) => serve::serve(args, cli.globals.root.clone(), cli.globals.state_dir.clone(), &paths),
        Command::Selftest(args) => selftest::selftest(args, cli.globals.root.clone()),
        Command::Mcp(args) => mcp::mcp(args, &cli.globals),
        Command::Completions(a) => shell::completions(a),
        Command::Man(a) => shell::man(a),
        Command::GvisorHelper(a) => crate::backend::runsc::helper::main(&a.role, &a.command),
        Command::EgressProxy => crate::net::proxy::main(),
        Command::PublishForwarder => crate::net::publish::main(),
    }
}
