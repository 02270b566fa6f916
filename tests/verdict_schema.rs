//! The verdict is a published contract (docs/verdict.schema.json, JSON
//! Schema draft 2020-12): programs parse it to decide what happened to a
//! run. The threat is a verdict that breaks the contract on some path a
//! consumer meets only in production (a timeout, a failed setup, an exec
//! in a live sandbox, gVisor): a key of the wrong type, a value outside its
//! enum, a key the schema does not document. Every verdict here is a real
//! one, printed by the husk binary; each is validated twice with the
//! `jsonschema` crate: against the schema as published (what consumers
//! rely on), and against the same schema closed (`additionalProperties:
//! false` wherever it lists `properties`), so an undocumented key fails too.
mod common;
mod sandboxkit;

use common::*;
use sandboxkit::Sbx;
use serde_json::{Value, json};
use std::collections::BTreeSet;

fn published_schema() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/verdict.schema.json");
    let text = std::fs::read_to_string(path).expect("read docs/verdict.schema.json");
    serde_json::from_str(&text).expect("docs/verdict.schema.json is JSON")
}

/// The schema with every object that lists its properties closed to others.
fn closed(schema: &Value) -> Value {
    match schema {
        Value::Object(m) => {
            let mut out: serde_json::Map<String, Value> = m.iter().map(|(k, v)| (k.clone(), closed(v))).collect();
            if m.contains_key("properties") && !m.contains_key("additionalProperties") {
                out.insert("additionalProperties".into(), Value::Bool(false));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(closed).collect()),
        other => other.clone(),
    }
}

/// One verdict and what its path must have produced.
struct Case {
    what: &'static str,
    verdict: Value,
    backend: &'static str,
    termination: &'static str,
}

/// `husk run --json <args>`, expecting `backend` and `termination`.
fn run(what: &'static str, args: &[&str], backend: &'static str, termination: &'static str) -> Case {
    let mut all = vec!["run", "--json"];
    all.extend_from_slice(args);
    let out = husk(&all).output().expect("spawn husk");
    Case { what, verdict: verdict_of(&out), backend, termination }
}

/// A run whose caller's nofile hard limit is below husk's default: the
/// verdict's rlimit says it was lowered (`clamped_from`, `why`).
fn clamped_rlimit() -> Case {
    let husk_bin = husk_bin();
    let out = std::process::Command::new("prlimit")
        .arg("--nofile=512")
        .arg(&husk_bin)
        .args(["run", "--json", "--", "true"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("spawn prlimit (util-linux)");
    Case {
        what: "run: default rlimit clamped to the caller's",
        verdict: verdict_of(&out),
        backend: "native",
        termination: "exited",
    }
}

/// `husk exec --json <extra> ID -- cmd...` in `sbx`.
fn exec(
    what: &'static str,
    sbx: &Sbx,
    id: &str,
    extra: &[&str],
    cmd: &[&str],
    backend: &'static str,
    termination: &'static str,
) -> Case {
    let (verdict, _) = sbx.exec_json(id, extra, cmd);
    Case { what, verdict, backend, termination }
}

/// The verdicts of one live sandbox of `runtime`: a success, a timeout,
/// and failures to start the command.
fn exec_cases(runtime: &'static str, cases: &mut Vec<Case>) {
    let sbx = Sbx::new();
    let id = sbx.create_with(&["--runtime", runtime, "--ttl", "5m"]);
    cases.push(exec("exec: exit 0", &sbx, &id, &[], &["true"], runtime, "exited"));
    cases.push(exec(
        "exec: exit 3",
        &sbx,
        &id,
        &[],
        &["sh", "-c", "echo out; echo err >&2; exit 3"],
        runtime,
        "exited",
    ));
    cases.push(exec("exec: timeout", &sbx, &id, &["--timeout", "1s"], &["sleep", "100"], runtime, "wall_timeout"));
    let missing_workdir = &["--workdir", "/husk-no-such-dir"];
    cases.push(exec("exec: missing workdir", &sbx, &id, missing_workdir, &["true"], runtime, "setup_failed"));
    // Natively execve's ENOENT is a setup failure (127); runsc's own init
    // reports it as the command's exit code 127.
    let not_found = if runtime == "native" { "setup_failed" } else { "exited" };
    cases.push(exec("exec: command not found", &sbx, &id, &[], &["/husk-no-such-command"], runtime, not_found));
    sbx.rm(&id);
}

#[test]
fn verdicts_from_every_path_match_the_published_schema() {
    require_root!();
    require_runsc!();
    let schema = published_schema();
    jsonschema::meta::validate(&schema).expect("docs/verdict.schema.json is a valid JSON Schema");
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
    let published = jsonschema::draft202012::new(&schema).expect("compile the published schema");
    let strict = jsonschema::draft202012::new(&closed(&schema)).expect("compile the closed schema");

    let verdict_dir = TempDir::new("verdict-file");
    let verdict_file = verdict_dir.path().join("v.json");
    let verdict_file_arg = verdict_file.to_str().unwrap();
    let memhog = "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived";
    let mut cases = vec![
        run("run: exit 0", &["--", "true"], "native", "exited"),
        run("run: exit 3 with output", &["--", "sh", "-c", "echo out; echo err >&2; exit 3"], "native", "exited"),
        run("run: killed by a signal", &["--", "sh", "-c", "kill -TERM $$"], "native", "signaled"),
        run("run: timeout", &["--timeout", "1s", "--", "sleep", "100"], "native", "wall_timeout"),
        run("run: out of memory", &["--memory", "32M", "--", "sh", "-c", memhog], "native", "oom_killed"),
        run("run: bind of a missing path", &["--bind", "/husk-no-such-path:/x", "--", "true"], "none", "setup_failed"),
        run("run: command not found", &["--", "/husk-no-such-command"], "native", "setup_failed"),
        run("run: no cgroup", &["--no-cgroup", "--", "true"], "native", "exited"),
        run("run: seccomp unconfined", &["--seccomp", "unconfined", "--", "true"], "native", "exited"),
        run(
            "run: seccomp report with a denial",
            &["--seccomp-report", "--", "sh", "-c", "unshare -U true; exit 0"],
            "native",
            "exited",
        ),
        run("run: died of SIGSYS", &["--", "sh", "-c", "kill -SYS $$"], "native", "signaled"),
        run("run: rlimit flag", &["--rlimit", "nofile=100", "--", "true"], "native", "exited"),
        clamped_rlimit(),
        run("run: runtime auto", &["--runtime", "auto", "--", "true"], "native", "exited"),
        run(
            "run: egress allowlist with a denial",
            &["--network=allow=a.test", "--", "sh", "-c", "curl -s http://b.test/ > /dev/null; true"],
            "native",
            "exited",
        ),
        run("run: verdict file too", &["--verdict-file", verdict_file_arg, "--", "true"], "native", "exited"),
        run("runsc run: exit 0", &["--runtime", "runsc", "--", "true"], "runsc", "exited"),
        run(
            "runsc run: timeout",
            &["--runtime", "runsc", "--timeout", "1s", "--", "sleep", "100"],
            "runsc",
            "wall_timeout",
        ),
        run(
            "runsc run: bind of a missing path",
            &["--runtime", "runsc", "--bind", "/husk-no-such-path:/x", "--", "true"],
            "none",
            "setup_failed",
        ),
        run(
            "runsc run: seccomp unconfined",
            &["--runtime", "runsc", "--seccomp", "unconfined", "--", "true"],
            "runsc",
            "exited",
        ),
    ];
    let file_verdict = std::fs::read_to_string(&verdict_file).expect("--verdict-file was written");
    cases.push(Case {
        what: "run: the --verdict-file copy",
        verdict: serde_json::from_str(&file_verdict).expect("the verdict file is JSON"),
        backend: "native",
        termination: "exited",
    });
    exec_cases("native", &mut cases);
    exec_cases("runsc", &mut cases);

    let mut failures = Vec::new();
    for c in &cases {
        let v = &c.verdict;
        let path = (v["backend"].as_str(), v["termination"].as_str());
        if path != (Some(c.backend), Some(c.termination)) {
            failures.push(format!("{}: expected {} / {}, got {path:?}: {v}", c.what, c.backend, c.termination));
        }
        for (name, validator) in [("published", &published), ("closed", &strict)] {
            for e in validator.iter_errors(v) {
                failures.push(format!("{}: {name} schema: at {}: {e}", c.what, e.instance_path()));
            }
        }
    }
    assert!(failures.is_empty(), "{} problem(s):\n{}", failures.len(), failures.join("\n"));

    // The paths above must really have been walked: every termination and
    // both backends, for run and exec, with and without isolation.
    let seen = |key: &str| cases.iter().filter_map(|c| c.verdict[key].as_str()).collect::<BTreeSet<_>>();
    for t in ["exited", "signaled", "wall_timeout", "oom_killed", "setup_failed"] {
        assert!(seen("termination").contains(t), "no verdict ended {t}");
    }
    for b in ["native", "runsc", "none"] {
        assert!(seen("backend").contains(b), "no verdict from backend {b}");
    }
    let limits = |c: &Case| c.verdict["limits"].clone();
    assert!(cases.iter().any(|c| limits(c) == json!("none")), "no verdict without a cgroup");
    let rlimits = |c: &Case| c.verdict["isolation"]["rlimits"].as_array().cloned().unwrap_or_default();
    assert!(cases.iter().flat_map(rlimits).any(|r| r.get("clamped_from").is_some()), "no clamped rlimit");
    let execs = cases.iter().filter(|c| c.verdict.get("sandbox_id").is_some()).count();
    assert_eq!(execs, 10, "every exec verdict names its sandbox");
}
