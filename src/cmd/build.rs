//! `husk build`: arguments -> BuildOptions -> build::stages, printing one
//! line per step (or `--json` events) and the result.

use crate::build::run::StepOutput;
use crate::build::stages::{BuildOptions, StepEvent, build as run_build};
use crate::cli::BuildArgs;
use crate::outcome::EXIT_HUSK_FAILED;
use crate::paths::{Paths, PathsError};
use serde_json::json;

pub fn build(a: BuildArgs, paths: &Result<Paths, PathsError>) -> i32 {
    let json = a.json;
    let fail = |e: &dyn std::fmt::Display, code: i32| {
        if json {
            // The one JSON failure shape, tagged as the event stream's
            // error event (as `pull --json`'s); exit_code is build's own (1
            // when a RUN step failed, as `docker build`).
            let r = crate::outcome::ErrorReport::new(crate::step::Phase::Build, e.to_string());
            let outcome = crate::outcome::Outcome::setup_failed(r);
            let mut v = serde_json::to_value(crate::outcome::Verdict::new(
                "",
                "none",
                &outcome,
                None,
                true,
                &crate::redact::Redaction::none(),
            ))
            .unwrap_or_default();
            v["event"] = json!("error");
            v["exit_code"] = json!(code);
            crate::outln!("{v}");
        }
        crate::errln!("husk build: {e}");
        code
    };
    let paths = match paths {
        Ok(p) => p,
        Err(e) => return fail(e, EXIT_HUSK_FAILED),
    };
    let egress = match build_network(&a.network) {
        Ok(e) => e,
        Err(e) => return fail(&e, EXIT_HUSK_FAILED),
    };
    let mut build_args = Vec::new();
    for kv in &a.build_arg {
        match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => build_args.push((k.to_string(), v.to_string())),
            // `--build-arg NAME`: the value from husk's environment, as Docker.
            _ => match std::env::var(kv) {
                Ok(v) => build_args.push((kv.clone(), v)),
                Err(_) => {
                    return fail(
                        &format!("--build-arg {kv}: expected KEY=VALUE (or a KEY set in the environment)"),
                        EXIT_HUSK_FAILED,
                    );
                }
            },
        }
    }
    for m in &a.registry.registry_mirror {
        if let Err(e) = crate::image::registry::mirror::parse_flag(m) {
            return fail(&e, EXIT_HUSK_FAILED);
        }
    }
    let registry = crate::spec::RegistrySpec {
        platform: None,
        insecure: a.registry.insecure_registry.clone(),
        ca_files: a.registry.registry_ca.clone(),
        mirrors: a.registry.registry_mirror.clone(),
    };
    let opts = BuildOptions {
        registry,
        context: a.context.clone(),
        dockerfile: a.file.clone(),
        tag: a.tag.clone(),
        build_args,
        target: a.target.clone(),
        no_cache: a.no_cache,
        store_root: paths.root.clone(),
        egress,
        step_output: step_output(&a.progress, json),
    };
    let mut progress = |e: &StepEvent| {
        if json {
            let mut v = serde_json::to_value(e).unwrap_or_default();
            v["event"] = json!("step");
            crate::outln!("{v}");
        } else {
            let status = if e.cached { "(cached)".to_string() } else { format!("{:.2}s", e.seconds) };
            crate::errln!("[{}/{}] {} {status}", e.step, e.total, e.instruction);
            if let Some(w) = &e.warning {
                crate::errln!("warning: {w}");
            }
        }
    };
    match run_build(&opts, &mut progress) {
        Ok(r) => {
            if json {
                let mut v = serde_json::to_value(&r).unwrap_or_default();
                v["event"] = json!("result");
                crate::outln!("{v}");
            } else {
                crate::outln!("{} {} ({} steps, {} cached, {:.2}s)", r.name, r.id, r.steps, r.cached, r.seconds);
            }
            0
        }
        Err(e) => {
            let code = e.exit_code();
            fail(&e, code)
        }
    }
}

/// `--network` of `husk build`: none (the default), or allow= rules for
/// RUN steps' egress proxy. `host` is refused: a step on the host's network
/// could reach anything the host can, and its layer would not say so.
fn build_network(values: &[String]) -> Result<Option<crate::net::EgressSpec>, String> {
    let mut rules = Vec::new();
    let mut none = false;
    for v in values {
        match v.as_str() {
            "none" => none = true,
            "host" => {
                return Err("--network host: RUN steps never use the host's network; give the hosts a step may \
                            reach with --network allow=HOST[,HOST...] (e.g. allow=pypi.org,files.pythonhosted.org)"
                    .into());
            }
            other => match other.strip_prefix("allow=") {
                Some(list) => rules.extend(list.split(',').map(str::trim).filter(|r| !r.is_empty()).map(String::from)),
                None => return Err(format!("invalid --network {other:?}: expected none or allow=RULE[,RULE...]")),
            },
        }
    }
    if rules.is_empty() {
        if values.iter().any(|v| v.starts_with("allow=")) {
            return Err("--network allow= needs at least one rule, e.g. allow=pypi.org".into());
        }
        return Ok(None);
    }
    if none {
        return Err("--network none cannot be combined with allow= rules".into());
    }
    let spec = crate::net::EgressSpec { rules, add_hosts: Vec::new(), egress_bytes: None };
    spec.validate().map_err(|e| format!("--network allow=: {e}"))?;
    Ok(Some(spec))
}

/// `--progress`: plain streams RUN output always; auto only to a terminal
/// (a `--json` build's stderr is a log reader's, not a person's).
fn step_output(progress: &str, json: bool) -> StepOutput {
    use std::io::IsTerminal;
    match progress {
        "plain" => StepOutput::Streamed,
        _ if !json && std::io::stderr().is_terminal() => StepOutput::Streamed,
        _ => StepOutput::Captured,
    }
}
