//! One failure shape for machines: whatever a command with `--json` fails
//! at (a flag value clap refuses, an unknown sandbox, a missing image, a
//! busy sandbox, a bad reference), stdout holds one verdict-shaped object
//! (`termination: "setup_failed"`, `error{step, errno, message, hint}`,
//! `exit_code` 125), valid against docs/verdict.schema.json, and husk exits
//! 125. The threat is a caller that handles `husk exec`'s failures and then
//! meets `create`'s (or clap's) in another shape and takes it for success.
mod common;
mod sandboxkit;

use common::*;
use sandboxkit::Sbx;
use serde_json::Value;
use std::time::Duration;

fn verdict_schema() -> jsonschema::Validator {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/verdict.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::draft202012::new(&schema).expect("compile docs/verdict.schema.json")
}

struct Failure {
    what: &'static str,
    step: &'static str,
    out: std::process::Output,
}

fn check(f: &Failure, schema: &jsonschema::Validator, problems: &mut Vec<String>) {
    let text = String::from_utf8_lossy(&f.out.stdout);
    let stderr = String::from_utf8_lossy(&f.out.stderr);
    let Some(line) = text.lines().last() else {
        problems.push(format!("{}: nothing on stdout; stderr: {stderr}", f.what));
        return;
    };
    let v: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return problems.push(format!("{}: not JSON ({e}): {line}", f.what)),
    };
    // `--json-stream`: the verdict is the one event.
    let v = v.get("verdict").cloned().unwrap_or(v);
    for e in schema.iter_errors(&v) {
        problems.push(format!("{}: schema: at {}: {e}", f.what, e.instance_path()));
    }
    if f.out.status.code() != Some(125) || v["exit_code"] != 125 {
        problems.push(format!("{}: exit {:?}, verdict exit_code {}", f.what, f.out.status.code(), v["exit_code"]));
    }
    if v["termination"] != "setup_failed" || v["error"]["step"] != f.step {
        problems.push(format!("{}: expected setup_failed at step {}, got {v}", f.what, f.step));
    }
    if v["error"]["message"].as_str().is_none_or(str::is_empty) {
        problems.push(format!("{}: no message: {v}", f.what));
    }
}

#[test]
fn every_json_error_is_verdict_shaped() {
    require_root!();
    let schema = verdict_schema();
    let sbx = Sbx::new();
    let store = TempDir::new("json-errors-store");
    let store_arg = store.path().to_str().unwrap();
    let fail = |what, step, args: &[&str]| Failure { what, step, out: sbx.out(args) };
    let mut cases = vec![
        fail("run: a flag value clap refuses", "arguments", &["run", "--json", "--timeout", "lots", "--", "true"]),
        fail("run: an unknown flag", "arguments", &["run", "--json", "--no-such-flag", "--", "true"]),
        fail(
            "run --json-stream: a refused value",
            "arguments",
            &["run", "--json-stream", "--timeout", "0", "--", "true"],
        ),
        fail("run: a bad --memory", "arguments", &["run", "--json", "--memory", "lots", "--", "true"]),
        fail(
            "run: a missing image",
            "root",
            &["--root", store_arg, "run", "--json", "--pull", "never", "--image", "husk-no-such-image", "--", "true"],
        ),
        fail("exec: an unknown sandbox", "sandbox", &["exec", "--json", "husk-no-such-sandbox", "--", "true"]),
        fail("exec: a refused flag value", "arguments", &["exec", "--json", "--timeout", "0", "x", "--", "true"]),
        fail("create: a bad label", "arguments", &["create", "--json", "--label", "no-equals-sign"]),
        fail("create: a zero --ttl", "arguments", &["create", "--json", "--ttl", "0"]),
        fail(
            "create: a missing image",
            "root",
            &["--root", store_arg, "create", "--json", "--pull", "never", "--image", "husk-no-such-image"],
        ),
        fail("create: a bind of a missing path", "arguments", &["create", "--json", "--bind", "/husk-no-such-path:/x"]),
        fail("rm: an unknown sandbox", "sandbox", &["rm", "--json", "husk-no-such-sandbox"]),
        fail("inspect: an unknown sandbox", "sandbox", &["inspect", "husk-no-such-sandbox"]),
        fail("renew: an unknown sandbox", "sandbox", &["renew", "--json", "husk-no-such-sandbox"]),
        fail("pause: an unknown sandbox", "sandbox", &["pause", "--json", "husk-no-such-sandbox"]),
        fail("resume: an unknown sandbox", "sandbox", &["resume", "--json", "husk-no-such-sandbox"]),
        fail("ls: a bad label", "arguments", &["ls", "--json", "--label", "no-equals-sign"]),
        fail("pull: a bad reference", "pull", &["--root", store_arg, "pull", "--json", "UPPER/Case::bad"]),
        fail("image inspect: no such image", "image", &["--root", store_arg, "image", "inspect", "nope", "--json"]),
        fail("image rm: no such image", "image", &["--root", store_arg, "image", "rm", "nope", "--json"]),
        fail(
            "image import: no such path",
            "image",
            &["--root", store_arg, "image", "import", "--json", "/husk-no-such-layout"],
        ),
        fail("gc: a bad --cgroup-parent", "arguments", &["gc", "--json", "--cgroup-parent", "/../x"]),
        fail("doctor: an unknown flag", "arguments", &["doctor", "--json", "--no-such-flag"]),
        fail("seccomp check: no such profile", "seccomp", &["seccomp", "check", "--json", "/husk-no-such-profile"]),
        fail("cp --list: an unknown sandbox", "sandbox", &["cp", "--list", "husk-no-such-sandbox:/"]),
        fail("selftest: an unknown probe", "arguments", &["selftest", "--json", "--only", "husk-no-such-probe"]),
        // The sandbox's own step, as fork, cp and exec name it (serve answers
        // it 404 from the same library error).
        fail(
            "commit: an unknown sandbox",
            "sandbox",
            &["--root", store_arg, "commit", "--json", "husk-no-such-sandbox", "img:1"],
        ),
        fail(
            "build: no such context",
            "build",
            &["--root", store_arg, "build", "--json", "-t", "x", "/husk-no-such-context"],
        ),
    ];

    // Busy: a sandbox that runs one exec at a time, running one.
    let id = sbx.create_with(&["--ttl", "5m"]);
    let mut long = sbx
        .husk(&["exec", &id, "--", "sleep", "600"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the long exec");
    assert!(wait_until(Duration::from_secs(60), || sbx.inspect(&id)["active_execs"] == 1), "the long exec never ran");
    let mut busy = None;
    let mut last = String::new();
    let seen = wait_until(Duration::from_secs(60), || {
        let out = sbx.out(&["exec", "--json", &id, "--", "true"]);
        last = String::from_utf8_lossy(&out.stdout).into_owned();
        let hit = last.contains("\"busy\"");
        if hit {
            busy = Some(out);
        }
        hit
    });
    if !seen {
        let _ = long.kill();
        let out = long.wait_with_output().unwrap();
        panic!("the second exec never met the busy sandbox ({}): {last}", String::from_utf8_lossy(&out.stderr));
    }
    cases.push(Failure { what: "exec: a busy sandbox", step: "busy", out: busy.unwrap() });
    let _ = long.kill();
    let _ = long.wait();
    sbx.rm(&id);

    let mut problems = Vec::new();
    for c in &cases {
        check(c, &schema, &mut problems);
    }
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
}
