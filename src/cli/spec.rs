//! The command line as typed requests (`request::SandboxOptions`,
//! `ProcessOptions`, `CreateOptions`, `ExecOptions`): clap's structs in,
//! the library's requests out. Every check and message is the request's
//! (`request::lower`), shared with `husk serve` and MCP.

use super::{CreateArgs, ExecArgs, ProcessArgs, RuntimeArg, SandboxArgs};
use crate::request::{CreateOptions, ExecOptions, ProcessOptions, SandboxOptions};
use crate::spec::{LimitSpec, NetworkMode, RuntimeChoice};

pub use crate::request::lower::{ArgsError, ENV_FILE_LIMIT, parse_bind, parse_tmpfs};

impl From<RuntimeArg> for RuntimeChoice {
    fn from(r: RuntimeArg) -> Self {
        match r {
            RuntimeArg::Native => RuntimeChoice::Native,
            RuntimeArg::Runsc => RuntimeChoice::Runsc,
            RuntimeArg::Auto => RuntimeChoice::Auto,
        }
    }
}

pub fn sandbox_options(a: &SandboxArgs) -> SandboxOptions {
    SandboxOptions {
        image: a.image.clone(),
        rootfs: a.rootfs.clone(),
        pull: a.pull.into(),
        platform: a.platform.clone(),
        insecure_registries: a.registry.insecure_registry.clone(),
        registry_ca: a.registry.registry_ca.clone(),
        registry_mirrors: a.registry.registry_mirror.clone(),
        writable: a.writable,
        workdir: a.workdir.clone(),
        workdir_size: Some(a.workdir_size),
        tmp_size: Some(a.tmp_size),
        binds: a.bind.clone(),
        tmpfs: a.tmpfs.clone(),
        network: a.network.clone(),
        allow_hosts: a.allow_host.clone(),
        add_hosts: a.add_host.clone(),
        egress_bytes: a.egress_bytes,
        publish: a.publish.clone(),
        hostname: Some(a.hostname.clone()),
        cap_add: a.cap_add.clone(),
        rlimits: a.rlimit.clone(),
        id_range: a.id_range.clone(),
        id_range_force: a.id_range_force,
        runtime: a.runtime.into(),
        seccomp: Some(a.seccomp.clone()),
        seccomp_report: a.seccomp_report,
        memory: a.memory.clone(),
        memory_swap: a.memory_swap.clone(),
        cpus: a.cpus.clone(),
        pids: a.pids.clone(),
        no_cgroup: a.no_cgroup,
        cgroup_parent: a.cgroup_parent.clone(),
        runsc_path: a.runsc_path.clone(),
        runsc_platform: a.runsc_platform.clone(),
    }
}

/// The per-command flags; the secrets are read here (husk's environment,
/// the files), in the caller's process.
pub fn process_options(p: &ProcessArgs) -> Result<ProcessOptions, ArgsError> {
    Ok(ProcessOptions {
        env: p.env.clone(),
        env_files: p.env_file.clone(),
        user: p.user.clone(),
        timeout: p.timeout,
        kill_grace: p.kill_grace,
        capture: (p.json || p.json_stream).then_some(p.output_limit),
        stream: p.json_stream,
        tty: p.tty,
        secrets: p.secrets.resolve()?,
        redact_host: p.secrets.redact,
    })
}

/// `husk create`'s flags (`--pool` and `--from-snapshot` are the CLI's own
/// routes, not part of the request). `labels` is left empty: `--label` is
/// parsed by the library's rule (`sandbox::state::parse_label`) in cmd/.
pub fn create_options(a: &CreateArgs) -> Result<CreateOptions, ArgsError> {
    Ok(CreateOptions {
        sandbox: sandbox_options(&a.sandbox),
        process: ProcessOptions {
            env: a.env.clone(),
            env_files: a.env_file.clone(),
            user: a.user.clone(),
            secrets: a.secrets.resolve()?,
            redact_host: a.secrets.redact,
            ..ProcessOptions::default()
        },
        ttl: a.ttl,
        max_lifetime: a.max_lifetime,
        name: a.name.clone(),
        labels: Default::default(),
        concurrent: a.concurrent,
        warm: a.warm.clone(),
        session: a.session.clone(),
        ready_cmd: a.ready_cmd.clone(),
        ready_timeout: a.ready_timeout,
    })
}

/// `husk exec`'s flags; `--code FILE|-` is read by the caller (cmd/).
pub fn exec_options(a: &ExecArgs) -> Result<ExecOptions, ArgsError> {
    Ok(ExecOptions {
        sandbox: a.sandbox.clone(),
        argv: a.command.clone(),
        code: None,
        language: a.language.clone(),
        process: process_options(&a.process)?,
        workdir: a.workdir.clone(),
        wait: a.wait,
    })
}

/// `--memory`.. `--cgroup-parent` as a `LimitSpec` (the request's check).
pub fn limit_spec(a: &SandboxArgs) -> Result<LimitSpec, ArgsError> {
    crate::request::lower::limits(&sandbox_options(a))
}

/// `--network`, `--allow-host`, `--add-host`, `--egress-bytes` (the
/// request's check).
pub fn network_args(a: &SandboxArgs) -> Result<(NetworkMode, Option<crate::net::EgressSpec>), ArgsError> {
    crate::request::lower::network(&sandbox_options(a))
}

/// The sandbox flags' defaults as `husk create` has them, with husk's
/// environment applied (HUSK_NO_CGROUP, HUSK_ID_RANGE, HUSK_INSECURE_REGISTRY,
/// ...): what `husk serve` starts every request from, so a request that
/// names no option gets what the CLI would give it on the same host.
pub fn sandbox_defaults() -> Result<SandboxOptions, clap::Error> {
    use clap::{Args, FromArgMatches};
    let cmd = SandboxArgs::augment_args(clap::Command::new("husk")).no_binary_name(true);
    let m = cmd.try_get_matches_from(Vec::<String>::new())?;
    Ok(sandbox_options(&SandboxArgs::from_arg_matches(&m)?))
}

/// `husk create`'s flags as clap gives them when none is given (husk's
/// environment applied): what `create --pool` compares against to tell
/// which flags the caller set.
pub fn create_defaults() -> Result<CreateArgs, clap::Error> {
    use clap::{Args, FromArgMatches};
    let cmd = CreateArgs::augment_args(clap::Command::new("husk")).no_binary_name(true);
    let m = cmd.try_get_matches_from(Vec::<String>::new())?;
    CreateArgs::from_arg_matches(&m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_naming_nothing_gets_the_cli_defaults() {
        // What serve starts a body from must lower to what `husk create`
        // with no flags gives (a drift here would make the API's sandbox
        // differ from the CLI's for the same request).
        let o = crate::request::CreateOptions { sandbox: sandbox_defaults().unwrap(), ..Default::default() };
        let (spec, secrets) = crate::request::lower::create_spec(&o).unwrap();
        let cli = create_options(&create_defaults().unwrap()).unwrap();
        let (cli_spec, _) = crate::request::lower::create_spec(&cli).unwrap();
        assert_eq!(serde_json::to_value(&spec).unwrap(), serde_json::to_value(&cli_spec).unwrap());
        assert_eq!((o.ttl, o.max_lifetime, o.ready_timeout), (cli.ttl, cli.max_lifetime, cli.ready_timeout));
        assert!(secrets.is_empty());
        assert_eq!(spec.hostname, crate::spec::DEFAULT_HOSTNAME);
        assert_eq!(spec.workdir_size, crate::spec::DEFAULT_WORKDIR_SIZE);
        assert_eq!(spec.tmp_size, crate::spec::DEFAULT_TMP_SIZE);
    }

    #[test]
    fn a_flag_value_is_refused_naming_the_flag() {
        let mut a = create_defaults().unwrap();
        a.sandbox.bind = vec!["/nonexistent-husk-src:/x".into()];
        let e = crate::request::lower::create_spec(&create_options(&a).unwrap()).unwrap_err();
        assert!(e.to_string().contains("--bind source"), "{e}");
        let mut a = create_defaults().unwrap();
        a.sandbox.tmpfs = vec!["/t:0".into()];
        let e = crate::request::lower::create_spec(&create_options(&a).unwrap()).unwrap_err();
        assert!(e.to_string().contains("size 0"), "{e}");
    }
}
