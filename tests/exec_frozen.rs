//! An exec asked for while its sandbox is frozen for a reader (`husk
//! commit`, `husk fork`) waits for the thaw; the threat is that wait
//! outliving the exec's own `--timeout` (a freeze may be held for minutes),
//! so a caller that asked for a bound gets none. Root pass (a freeze needs
//! the sandbox's cgroup).
mod imagekit;
use imagekit::*;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The schema with every object that lists its properties closed to
/// others (as tests/verdict_schema.rs checks every verdict).
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

#[test]
fn exec_timeout_bounds_its_wait_on_a_frozen_sandbox() {
    let t = TempDir::new("exec-frozen");
    let live = Live::new(&t, busybox_data_store(&t));
    let src = live.create(&["--image", "bb", "--ttl", "5m"]);
    // A reader holding the freeze for 10 minutes, as a stopped `husk
    // commit` would.
    let sock = Freezer::hold(&live, &src);

    let out_file = t.join("exec.out");
    let mut exec = Command::new(husk_bin())
        .args(["exec", "--json", "--timeout", "1s", &src, "--", "echo", "ran"])
        .env("HUSK_ROOT", &live.store)
        .env("HUSK_STATE_DIR", &live.state)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // A bound on a hang (the freeze is held for 10 minutes), not a speed
    // claim.
    let start = Instant::now();
    let mut status = None;
    while start.elapsed() < Duration::from_secs(120) {
        status = exec.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if status.is_none() {
        let _ = exec.kill();
    }
    let waited = exec.wait().unwrap();
    let status =
        status.map(|_| waited).expect("husk exec --timeout 1s waited on the frozen sandbox past its own timeout");
    let text = std::fs::read_to_string(&out_file).unwrap();
    assert_eq!(status.code(), Some(124), "{text}");
    let v: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(v["termination"], "wall_timeout", "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("never started") && msg.contains("frozen"), "the verdict says why: {v}");
    assert!(v["stdout"]["text"].as_str().unwrap_or_default().is_empty(), "nothing ran: {v}");

    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/verdict.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let strict = jsonschema::draft202012::new(&closed(&schema)).unwrap();
    let errors: Vec<String> = strict.iter_errors(&v).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "the verdict breaks docs/verdict.schema.json: {errors:?}\n{v}");

    // The reader is done: the sandbox thaws and takes execs again.
    sock.thaw();
    assert_eq!(live.sh(&src, "echo ran"), "ran\n");
}

/// An exec that waited behind a freeze and then started: the wait counts
/// against its `--timeout`, so the command gets only what is left and the
/// exec still ends at its own deadline (without it, `--timeout 5s` could
/// mean the freeze's minutes plus 5 s).
#[test]
fn exec_waiting_on_a_freeze_keeps_its_own_deadline() {
    let t = TempDir::new("exec-frozen-deadline");
    let live = Live::new(&t, busybox_data_store(&t));
    let src = live.create(&["--image", "bb", "--ttl", "5m"]);
    let sock = Freezer::hold(&live, &src);

    // Queued behind the freeze for about 5 s of its 6 s (less the time
    // husk exec takes to reach the queue), then a command of 5 s: it cannot
    // finish in what is left unless reaching the queue took over 4 s, and
    // it would with a fresh 6 s after the thaw.
    let out_file = t.join("exec.out");
    let exec = Command::new(husk_bin())
        .args(["exec", "--json", "--timeout", "6s", &src, "--", "sh", "-c", "sleep 5; echo finished"])
        .env("HUSK_ROOT", &live.store)
        .env("HUSK_STATE_DIR", &live.state)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(5));
    sock.thaw();
    let status = exec.wait_with_output().unwrap().status;
    let text = std::fs::read_to_string(&out_file).unwrap();
    let v: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!((status.code(), v["termination"].clone()), (Some(124), Value::from("wall_timeout")), "{v}");
    assert!(!v["stdout"]["text"].as_str().unwrap_or_default().contains("finished"), "{v}");
    assert_eq!(live.sh(&src, "echo ran"), "ran\n");
}
