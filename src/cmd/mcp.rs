//! `husk mcp`: the Model Context Protocol server on stdio (src/mcp/).

use crate::cli::{Globals, McpArgs};
use crate::mcp::operator::Operator;
use crate::mcp::runner::Runner;
use crate::mcp::tools::{Config, Tools};
use crate::outcome::EXIT_HUSK_FAILED;
use std::ffi::OsString;

pub fn mcp(args: McpArgs, globals: &Globals) -> i32 {
    if args.max_sandboxes == 0 {
        crate::errln!("husk mcp: --max-sandboxes 0 would refuse every create_sandbox; give at least 1");
        return EXIT_HUSK_FAILED;
    }
    // Checked once, as husk run checks them: a value husk would refuse
    // stops the server here rather than failing every tool call.
    let operator = match Operator::new(args.memory, args.cpus, args.pids, args.network) {
        Ok(o) => o,
        Err(e) => {
            crate::errln!("husk mcp: {e}");
            return EXIT_HUSK_FAILED;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            crate::errln!("husk mcp: finding husk's own binary (/proc/self/exe): {e}");
            return EXIT_HUSK_FAILED;
        }
    };
    let mut pass: Vec<OsString> = Vec::new();
    if let Some(r) = &globals.root {
        pass.extend([OsString::from("--root"), r.into()]);
    }
    if let Some(s) = &globals.state_dir {
        pass.extend([OsString::from("--state-dir"), s.into()]);
    }
    let config = Config {
        image: args.image,
        rootfs: args.rootfs,
        operator,
        timeout: args.timeout,
        max_timeout: args.max_timeout,
        ttl: args.ttl,
        output_limit: args.output_limit,
        max_sandboxes: args.max_sandboxes,
        pools: args.pool,
    };
    let paths = crate::paths::Paths::from_cli(globals.root.as_deref(), globals.state_dir.as_deref());
    let mut tools = Tools { config, runner: Runner { exe, globals: pass }, sandboxes: Default::default(), paths };
    let mut input = std::io::stdin().lock();
    let mut output = std::io::stdout().lock();
    match crate::mcp::serve(&mut tools, &mut input, &mut output) {
        Ok(()) => 0,
        Err(e) => {
            crate::errln!("husk mcp: {e}");
            EXIT_HUSK_FAILED
        }
    }
}
