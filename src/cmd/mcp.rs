//! `husk mcp`: the Model Context Protocol server on stdio (src/mcp/).

use crate::cli::{Globals, McpArgs};
use crate::mcp::operator::Operator;
use crate::mcp::tools::{Config, Tools};
use crate::outcome::EXIT_HUSK_FAILED;
use crate::request::SandboxOptions;

pub fn mcp(args: McpArgs, globals: &Globals) -> i32 {
    if args.max_sandboxes == 0 {
        crate::errln!("husk mcp: --max-sandboxes 0 would refuse every create_sandbox; give at least 1");
        return EXIT_HUSK_FAILED;
    }
    // Checked once, as husk run checks them: a value husk would refuse
    // stops the server here rather than failing every tool call.
    let operator = match Operator::new(operator_options(&args)) {
        Ok(o) => o,
        Err(e) => {
            crate::errln!("husk mcp: {e}");
            return EXIT_HUSK_FAILED;
        }
    };
    let config = Config {
        operator,
        timeout: args.timeout,
        max_timeout: args.max_timeout,
        ttl: args.ttl,
        output_limit: args.output_limit,
        max_sandboxes: args.max_sandboxes,
        pools: args.pool,
    };
    let mut tools = Tools {
        config,
        paths: crate::paths::Paths::from_cli(globals.root.as_deref(), globals.state_dir.as_deref()),
        state_dir: globals.state_dir.clone(),
        sandboxes: Default::default(),
    };
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

/// What every sandbox of the server is made of: the operator's flags, and
/// what `husk run`'s sandbox flags read from the environment when not
/// given (HUSK_NO_CGROUP, HUSK_ID_RANGE, HUSK_INSECURE_REGISTRY,
/// HUSK_REGISTRY_CA, HUSK_REGISTRY_MIRROR), as `husk run` would read them.
fn operator_options(args: &McpArgs) -> SandboxOptions {
    let list = |name: &str| -> Vec<String> {
        std::env::var(name)
            .map(|v| v.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect())
            .unwrap_or_default()
    };
    SandboxOptions {
        image: args.image.clone(),
        rootfs: args.rootfs.clone(),
        memory: args.memory.clone(),
        cpus: args.cpus.clone(),
        pids: args.pids.clone(),
        network: args.network.clone(),
        no_cgroup: crate::host::no_cgroup_opt_out(),
        id_range: std::env::var("HUSK_ID_RANGE").ok().filter(|v| !v.is_empty()),
        insecure_registries: list("HUSK_INSECURE_REGISTRY"),
        registry_ca: list("HUSK_REGISTRY_CA").into_iter().map(Into::into).collect(),
        registry_mirrors: list("HUSK_REGISTRY_MIRROR"),
        ..SandboxOptions::default()
    }
}
