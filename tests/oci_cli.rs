//! husk's runc-compatible command line (issue 22), driven directly the way
//! containerd's runc shim and go-runc drive it: a bundle, `create` with a
//! pid file, `start`, `state`, `kill`, `delete`, `pause`/`resume`,
//! `features`. The threat in every case is a caller (a shim) that acts on
//! a wrong answer: a pid file it cannot parse, an init it cannot reap, a
//! state it misreads, an error wording it does not recognise, a container
//! that is not frozen when it was told it is.
//!
//! This test process is a child subreaper, as the shim is: every
//! container's init, orphaned when `create` returns, is reparented here
//! and reaped by the test that made it.
//!
//! `HUSK_OCI_RUNTIME=/usr/sbin/runc` runs the same tests against runc.
mod dockerkit;
mod imagekit;
mod ocikit;

use ocikit::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;

fn require_root() {
    assert!(nix::unistd::Uid::effective().is_root(), "the OCI runtime tests create containers as root");
}

/// The errors the shim matches on: "does not exist" for an unknown id,
/// "container not running" for a kill of a stopped one.
#[test]
fn unknown_id_errors_match_runc_wording() {
    require_root();
    let rt = Runtime::new();
    let id = unique("nosuch");
    for args in [vec!["state", &id], vec!["delete", &id], vec!["kill", &id, "KILL"], vec!["start", &id]] {
        let o = rt.run(&args);
        assert!(!o.status.success(), "{args:?} of an unknown id succeeded: {}", show(&o));
        assert!(err(&o).contains("does not exist"), "{args:?}: {}", show(&o));
    }
    // The shim's delete --force of a container already gone is not an error.
    let o = rt.run(&["delete", "--force", &id]);
    assert!(o.status.success(), "delete --force of an unknown id: {}", show(&o));
}

/// `features` is a runtime-spec features document (validated against the
/// spec's schema, tests/data/oci-features.schema.json), and what it
/// claims about namespaces holds on this kernel.
#[test]
fn features_json_valid_against_the_spec_schema() {
    let rt = Runtime::new();
    let o = rt.run(&["features"]);
    assert!(o.status.success(), "{}", show(&o));
    let doc: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("features is not JSON ({e}): {}", show(&o)));
    let schema: Value = serde_json::from_str(include_str!("data/oci-features.schema.json")).unwrap();
    jsonschema::meta::validate(&schema).expect("the features schema is a valid JSON Schema");
    let v = jsonschema::draft202012::new(&schema).expect("compile the features schema");
    let errors: Vec<String> = v.iter_errors(&doc).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "features document against the spec: {errors:#?}\n{doc:#}");
    for ns in doc["linux"]["namespaces"].as_array().into_iter().flatten() {
        let file = match ns.as_str().unwrap() {
            "network" => "net",
            "mount" => "mnt",
            other => other,
        };
        assert!(
            Path::new("/proc/self/ns").join(file).exists(),
            "features claims the {ns} namespace, which this kernel lacks"
        );
    }
    assert!(doc["hooks"].as_array().is_some_and(|h| h.len() == 6), "hooks: {}", doc["hooks"]);
}

/// `--version` is read by dockerd (`<name> version X` and `commit:`) and
/// go-runc (`spec:`).
#[test]
fn version_has_version_commit_and_spec_lines() {
    let o = std::process::Command::new(runtime_bin()).arg("--version").stdin(Stdio::null()).output().unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let text = out(&o);
    let lines: Vec<&str> = text.lines().collect();
    let first: Vec<&str> = lines.first().copied().unwrap_or_default().split(' ').collect();
    assert!(first.len() == 3 && first[1] == "version" && !first[2].is_empty(), "first line: {text:?}");
    assert!(lines.iter().any(|l| l.strip_prefix("commit: ").is_some_and(|c| !c.is_empty())), "{text:?}");
    assert!(lines.iter().any(|l| l.strip_prefix("spec: ").is_some_and(|s| s.starts_with("1."))), "{text:?}");
}

/// `spec` writes a config.json runc runs as it is (after pointing the
/// process at a command with no terminal), and refuses to overwrite one.
#[test]
fn spec_writes_a_config_runc_runs() {
    require_root();
    become_subreaper();
    let rt = Runtime::new();
    let b = Bundle::new(&["true"]);
    std::fs::remove_file(b.dir.join("config.json")).unwrap();
    let o = rt.run(&["spec", "--bundle", b.path().to_str().unwrap()]);
    assert!(o.status.success(), "{}", show(&o));
    let mut config: Value = serde_json::from_slice(&std::fs::read(b.dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["root"]["path"], json!("rootfs"));
    assert_eq!(config["process"]["terminal"], json!(true));
    config["process"]["terminal"] = json!(false);
    config["process"]["args"] = json!(["sh", "-c", "exit 9"]);
    config["linux"]["cgroupsPath"] = json!(b.cgroup);
    std::fs::write(b.dir.join("config.json"), serde_json::to_vec(&config).unwrap()).unwrap();
    let o = rt.run(&["spec", "--bundle", b.path().to_str().unwrap()]);
    assert!(!o.status.success(), "spec overwrote config.json: {}", show(&o));
    let runc = Runtime::with_bin(RUNC.into());
    let id = unique("spec");
    let pid = runc.create(&b, &id);
    runc.start(&id);
    assert_eq!(reap(pid), 9);
    let _ = runc.run(&["delete", &id]);
}
