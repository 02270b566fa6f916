//! The `outputSchema` of each tool: the shape of its `structuredContent`
//! (MCP 2025-06-18), so a client can check and use the JSON without parsing
//! the text. A failed call's structuredContent is `{"error": MESSAGE,
//! "step": STEP}` (the step as the CLI's verdict names it: `arguments` for
//! a tool argument husk refuses, `sandbox` for a sandbox that is not
//! there), so every schema has both and requires nothing a failure lacks.

use serde_json::{Value, json};

fn object(mut props: Value) -> Value {
    props["error"] = json!({"type": "string", "description": "Why the call failed (with isError)"});
    props["step"] = json!({"type": "string", "description": "The step that failed (with isError; sandbox: no such live sandbox, arguments: a refused argument)"});
    json!({"type": "object", "properties": props})
}

fn maybe(t: &str, description: &str) -> Value {
    json!({"type": [t, "null"], "description": description})
}

/// run_code and exec: how the command ended (the verdict, in brief).
pub fn ran() -> Value {
    object(json!({
        "termination": maybe("string", "exited, wall_timeout, oom_killed, signaled or setup_failed"),
        "exit_code": maybe("integer", "The command's exit code (124: timed out, 125: husk could not run it)"),
        "stdout_truncated": maybe("boolean", "stdout was longer than the server's output limit"),
        "stderr_truncated": maybe("boolean", "stderr was longer than the server's output limit"),
        "stdout_bytes": maybe("integer", "Bytes the command wrote to stdout"),
        "stderr_bytes": maybe("integer", "Bytes the command wrote to stderr"),
        "duration_ms": maybe("number", "Wall-clock time of the command"),
        "warm": {"type": ["object", "null"], "description": "The warm interpreter or session that ran the code, if any"},
        "results": {"type": ["array", "null"], "description": "run_code in a warm python sandbox: the value of the last expression, display() calls and matplotlib figures, each {type, is_main_result, data: MIME bundle (text/plain, text/html, image/png base64, ...)}"},
        "exception": {"type": ["object", "null"], "description": "run_code in a warm python sandbox: the exception that ended the code: {name, value, traceback}"},
    }))
}

pub fn created() -> Value {
    object(json!({
        "sandbox_id": {"type": "string", "description": "Give it to exec, run_code, the file tools and destroy_sandbox"},
        "workdir": {"type": "string", "description": "The sandbox's working directory"},
    }))
}

pub fn written() -> Value {
    object(json!({"path": {"type": "string"}, "bytes": {"type": "integer", "description": "Bytes written"}}))
}

pub fn read() -> Value {
    object(json!({
        "path": {"type": "string"},
        "bytes": {"type": "integer", "description": "Size of the file"},
        "truncated": {"type": "boolean", "description": "Only the head and tail are in the text"},
        "binary": {"type": "boolean", "description": "Not valid UTF-8: undecodable bytes are shown as U+FFFD in the text"},
    }))
}

pub fn listed() -> Value {
    let entry = json!({"type": "object", "properties": {
        "name": {"type": "string"},
        "type": {"type": "string"},
        "size": {"type": "integer"},
        "mode": {"type": "integer"},
        "permissions": {"type": "string", "description": "As ls -l shows them, e.g. -rwxr-xr-x"},
    }});
    object(json!({"path": {"type": "string"}, "entries": {"type": "array", "items": entry}}))
}

/// pause_sandbox and resume_sandbox: whether the sandbox is paused now.
pub fn paused() -> Value {
    object(json!({"sandbox_id": {"type": "string"}, "paused": {"type": "boolean"}}))
}

pub fn sandboxes() -> Value {
    object(
        json!({"sandboxes": {"type": "array", "items": {"type": "object"}, "description": "Each: id, name, labels, state, backend, workdir, lease_remaining_ms, execs (as `husk ls --json`)"}}),
    )
}

pub fn inspected() -> Value {
    object(
        json!({"sandbox": {"type": "object", "description": "The record as `husk inspect` prints it (environment values hidden)"}}),
    )
}

pub fn renewed() -> Value {
    object(json!({
        "sandbox_id": {"type": "string"},
        "ttl_ms": {"type": "integer", "description": "The lease's length"},
        "expires_ms": {"type": "integer", "description": "When it runs out (ms since the epoch)"},
        "lease_remaining_ms": {"type": "integer"},
    }))
}

pub fn destroyed() -> Value {
    object(json!({"sandbox_id": {"type": "string"}, "destroyed": {"type": "boolean"}}))
}

/// fork_sandbox and commit_sandbox (every tool's failure names its step).
fn with_step(props: Value) -> Value {
    object(props)
}

pub fn forked() -> Value {
    with_step(json!({
        "sandbox_ids": {"type": "array", "items": {"type": "string"}, "description": "The new sandboxes"},
        "snapshot": {"type": "string", "description": "The snapshot image they run on"},
    }))
}

pub fn committed() -> Value {
    with_step(json!({
        "image": {"type": "string", "description": "The stored image's name"},
        "id": {"type": "string", "description": "Its image id (sha256:...)"},
        "bytes": {"type": "integer", "description": "Bytes of changed files stored"},
    }))
}
