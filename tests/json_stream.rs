//! `--json-stream` is a published contract (docs/stream.schema.json): a
//! harness reads a command's output as it happens and the verdict at the
//! end, without parsing text. The threats: an event that breaks the schema
//! on some path (binary output, a timeout, a failed setup, an exec in a
//! live sandbox), output that is lost, reordered or altered on the way
//! (a character cut between two reads turned into U+FFFD), more than one
//! verdict or none, and a reader that stops reading keeping a command
//! alive past its --timeout.
mod common;
mod sandboxkit;

use base64::Engine;
use common::*;
use sandboxkit::Sbx;
use serde_json::Value;
use std::time::Duration;

fn schema_of(name: &str) -> Value {
    let path = format!("{}/docs/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("read schema")).expect("schema is JSON")
}

/// The stream schema with the verdict schema embedded where it refers to
/// it (the same document, by its `$id`).
fn stream_schema() -> Value {
    let mut s = schema_of("stream.schema.json");
    let verdict = schema_of("verdict.schema.json");
    let slot = s["oneOf"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|b| b["properties"].get("verdict").is_some())
        .expect("a verdict event");
    assert_eq!(slot["properties"]["verdict"]["$ref"], verdict["$id"], "the verdict event refers to the verdict schema");
    slot["properties"]["verdict"] = verdict;
    s
}

/// A stream as read: the events before the verdict, and the verdict.
struct Streamed {
    what: String,
    chunks: Vec<Value>,
    verdict: Value,
    code: i32,
}

impl Streamed {
    /// The bytes of one stream, every chunk decoded in order.
    fn bytes(&self, stream: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for c in self.chunks.iter().filter(|c| c["stream"] == stream) {
            match (c["data"].as_str(), c["data_b64"].as_str()) {
                (Some(s), None) => out.extend_from_slice(s.as_bytes()),
                (None, Some(b)) => out.extend(base64::engine::general_purpose::STANDARD.decode(b).unwrap()),
                _ => panic!("{}: a chunk with neither or both of data, data_b64: {c}", self.what),
            }
        }
        out
    }
}

/// Parses NDJSON output; checks it is chunks then exactly one verdict,
/// each line valid against the stream schema.
fn parse(what: &str, out: &std::process::Output, validator: &jsonschema::Validator) -> Streamed {
    let text = String::from_utf8(out.stdout.clone()).expect("the stream is UTF-8");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{what}: a line that is not JSON ({e}): {l}")))
        .collect();
    for (n, l) in lines.iter().enumerate() {
        let errors: Vec<String> = validator.iter_errors(l).map(|e| format!("at {}: {e}", e.instance_path())).collect();
        assert!(errors.is_empty(), "{what}: line {n} breaks docs/stream.schema.json: {errors:?}\n{l}");
    }
    let (last, chunks) = lines.split_last().unwrap_or_else(|| panic!("{what}: no events at all"));
    assert!(last.get("verdict").is_some(), "{what}: the last line is not the verdict: {last}");
    assert!(chunks.iter().all(|c| c.get("verdict").is_none()), "{what}: more than one verdict");
    let seqs: Vec<u64> = chunks.iter().map(|c| c["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..chunks.len() as u64).collect::<Vec<_>>(), "{what}: seq is 0, 1, 2, ... without gaps");
    Streamed {
        what: what.to_string(),
        chunks: chunks.to_vec(),
        verdict: last["verdict"].clone(),
        code: out.status.code().unwrap_or(-1),
    }
}

fn run_stream(extra: &[&str], cmd: &[&str]) -> std::process::Output {
    let mut args = vec!["run", "--json-stream"];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(cmd);
    husk(&args).output().expect("spawn husk")
}

#[test]
fn json_stream_events_then_verdict_schema() {
    require_root!();
    let schema = stream_schema();
    jsonschema::meta::validate(&schema).expect("docs/stream.schema.json is a valid JSON Schema");
    let v = jsonschema::draft202012::new(&schema).expect("compile the stream schema");

    // Text: 300 000 bytes of a 3-byte character in one go, so pipe reads
    // (64 KiB) cut characters; they must still arrive as text, whole.
    let euros = "€".repeat(100_000);
    let script = "i=0; while [ $i -lt 100000 ]; do printf '€'; i=$((i+1)); done > /tmp/t; cat /tmp/t; echo err >&2";
    let s = parse("text", &run_stream(&[], &["sh", "-c", script]), &v);
    assert_eq!(s.code, 0, "{}", s.verdict);
    assert_eq!(String::from_utf8(s.bytes("stdout")).unwrap(), euros);
    assert_eq!(s.bytes("stderr"), b"err\n");
    assert!(s.chunks.iter().all(|c| c.get("data_b64").is_none()), "text output became base64");
    assert!(s.chunks.len() > 2, "300 KB arrived in {} chunk(s): not streamed", s.chunks.len());
    // The verdict carries --json's capture of the same output.
    assert_eq!(s.verdict["stdout"]["text"], Value::String(euros.clone()));
    assert_eq!(s.verdict["stdout"]["bytes"], 300_000);

    // Binary: a host binary, byte for byte; the verdict's capture is bounded.
    let dash = std::fs::read("/bin/dash").expect("read /bin/dash");
    let s = parse("binary", &run_stream(&["--output-limit", "4K"], &["cat", "/bin/dash"]), &v);
    assert_eq!(s.code, 0, "{}", s.verdict);
    assert!(
        s.bytes("stdout") == dash,
        "binary output is not byte-exact ({} of {} bytes)",
        s.bytes("stdout").len(),
        dash.len()
    );
    assert!(s.chunks.iter().any(|c| c.get("data_b64").is_some()), "binary output as text");
    assert_eq!(s.verdict["stdout"]["truncated"], true, "{}", s.verdict["stdout"]);
    assert_eq!(s.verdict["stdout"]["bytes"], dash.len() as u64);

    // Timeout: what was written before the kill, then the timeout verdict.
    let s = parse("timeout", &run_stream(&["--timeout", "1s"], &["sh", "-c", "echo started; exec sleep 100"]), &v);
    assert_eq!((s.code, s.verdict["termination"].as_str()), (124, Some("wall_timeout")));
    assert_eq!(s.bytes("stdout"), b"started\n");

    // A failed setup: the verdict alone.
    let s = parse("setup failure", &run_stream(&["--bind", "/husk-no-such-path:/x"], &["true"]), &v);
    assert_eq!((s.code, s.verdict["termination"].as_str()), (125, Some("setup_failed")));
    assert!(s.chunks.is_empty());

    // An exec in a live sandbox, and its busy-free failure path.
    let sbx = Sbx::new();
    let id = sbx.create_with(&["--ttl", "5m"]);
    let out = sbx.out(&["exec", "--json-stream", &id, "--", "sh", "-c", "echo one; echo two >&2; exit 3"]);
    let s = parse("exec", &out, &v);
    assert_eq!((s.code, s.bytes("stdout"), s.bytes("stderr")), (3, b"one\n".to_vec(), b"two\n".to_vec()));
    assert_eq!(s.verdict["sandbox_id"], Value::String(id.clone()));
    let out = sbx.out(&["exec", "--json-stream", "husk-no-such-sandbox", "--", "true"]);
    let s = parse("exec of an unknown sandbox", &out, &v);
    assert_eq!((s.code, s.verdict["termination"].as_str()), (125, Some("setup_failed")));
    sbx.rm(&id);
}

/// A reader that stops reading holds the command's output back (bounded
/// memory), but never the deadline: the command dies at --timeout while
/// the reader still has not read a byte.
#[test]
fn stalled_stream_reader_cannot_keep_a_command_past_its_timeout() {
    require_root!();
    let marker = unique("stall");
    let mut child = husk(&["run", "--json-stream", "--timeout", "2s", "--", "sh", "-c", "exec yes \"$0\"", &marker])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn husk");
    // The command ran (it is writing); the reader reads nothing ...
    let running =
        wait_until(Duration::from_secs(20), || host_pids_with(&marker).into_iter().any(|p| p != child.id() as i32));
    assert!(running, "the command never started");
    // ... and the command is gone all the same.
    let gone =
        wait_until(Duration::from_secs(60), || host_pids_with(&marker).into_iter().all(|p| p == child.id() as i32));
    assert!(gone, "the command outlived its --timeout while the stream's reader stalled");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut text).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(124));
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["verdict"]["termination"], "wall_timeout");
}
