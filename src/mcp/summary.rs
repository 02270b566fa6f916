//! A verdict told to a model: how the command ended, its output (head and
//! tail, the cut said in words), and nothing a model would misread.

use serde_json::Value;

/// One stream of a verdict (`stdout` / `stderr`).
struct Stream<'a> {
    name: &'a str,
    text: String,
    bytes: u64,
    truncated: bool,
    binary: bool,
}

impl<'a> Stream<'a> {
    fn of(verdict: &Value, name: &'a str) -> Stream<'a> {
        let s = &verdict[name];
        Stream {
            name,
            text: s["text"].as_str().unwrap_or("").to_string(),
            bytes: s["bytes"].as_u64().unwrap_or(0),
            truncated: s["truncated"].as_bool().unwrap_or(false),
            binary: !s["base64"].is_null(),
        }
    }

    fn describe(&self, out: &mut String) {
        if self.bytes == 0 {
            out.push_str(&format!("{}: (empty)\n", self.name));
            return;
        }
        let mut notes = Vec::new();
        if self.truncated {
            notes.push(format!(
                "TRUNCATED: the command wrote {} bytes; only the beginning and the end are shown, the cut is marked [husk: N bytes truncated]",
                self.bytes
            ));
        } else {
            notes.push(format!("{} bytes", self.bytes));
        }
        if self.binary {
            notes.push("not valid UTF-8: undecodable bytes are shown as \u{fffd}".to_string());
        }
        out.push_str(&format!("{} ({}):\n", self.name, notes.join("; ")));
        out.push_str(&self.text);
        if !self.text.ends_with('\n') {
            out.push('\n');
        }
    }
}

/// How the command ended, in one line.
pub fn ending(verdict: &Value) -> String {
    let code = verdict["exit_code"].as_i64().unwrap_or(125);
    let ms = verdict["duration_ms"].as_f64().unwrap_or(0.0);
    match verdict["termination"].as_str().unwrap_or("") {
        "exited" => format!("exited with code {code} after {ms:.0} ms"),
        "wall_timeout" => format!("TIMED OUT: killed after {ms:.0} ms (exit code {code}); it did not finish"),
        "oom_killed" => format!("KILLED: out of memory (the sandbox's memory limit; exit code {code})"),
        "signaled" => format!(
            "killed by signal {} (exit code {code})",
            verdict["signal_name"].as_str().map(str::to_string).unwrap_or_else(|| verdict["signal"].to_string())
        ),
        "setup_failed" => {
            let e = &verdict["error"];
            let mut s = format!(
                "husk could not run it (step {}): {}",
                e["step"].as_str().unwrap_or("?"),
                e["message"].as_str().unwrap_or("unknown error")
            );
            if let Some(h) = e["hint"].as_str() {
                s.push_str(&format!(" (hint: {h})"));
            }
            s
        }
        other => format!("ended: {other} (exit code {code})"),
    }
}

/// The whole summary: ending, then stdout and stderr.
pub fn summarize(verdict: &Value) -> String {
    let mut out = ending(verdict);
    out.push('\n');
    // A session call past its timeout: what the model must know about the
    // state its next call will find.
    let warm = &verdict["warm"];
    if warm["restarted"] == true {
        out.push_str("the session was RESTARTED: variables, imports, cwd and exports of earlier calls are gone\n");
    } else if warm["interrupted"] == true {
        out.push_str("the session was interrupted and kept its state\n");
    }
    if verdict["termination"] != "setup_failed" {
        Stream::of(verdict, "stdout").describe(&mut out);
        Stream::of(verdict, "stderr").describe(&mut out);
    }
    results(verdict, &mut out);
    out
}

/// A warm python call's results (docs/warm.md, Results) in words: the
/// value of its last expression and what it displayed as text, what else
/// each offers named (an image is not text a model can read here), and the
/// exception by name and value (its traceback is on stderr above).
fn results(verdict: &Value, out: &mut String) {
    for r in verdict["results"].as_array().into_iter().flatten() {
        let what = if r["is_main_result"] == true { "result" } else { "display" };
        let data = &r["data"];
        out.push_str(&format!("{what}: {}\n", data["text/plain"].as_str().unwrap_or("")));
        let other: Vec<&str> = data
            .as_object()
            .into_iter()
            .flat_map(|o| o.keys())
            .map(String::as_str)
            .filter(|k| *k != "text/plain")
            .collect();
        if !other.is_empty() {
            out.push_str(&format!("  (also as {}: in the structured result)\n", other.join(", ")));
        }
    }
    if verdict["results_truncated"] == true {
        out.push_str("results TRUNCATED: more than the output limit; later ones were dropped\n");
    }
    let e = &verdict["exception"];
    if let (Some(name), Some(value)) = (e["name"].as_str(), e["value"].as_str()) {
        out.push_str(&format!("exception: {name}: {value}\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn out(text: &str, bytes: u64, truncated: bool) -> Value {
        json!({"text": text, "base64": null, "bytes": bytes, "truncated": truncated})
    }

    #[test]
    fn a_truncated_stream_says_so_in_words() {
        let v = json!({"termination": "exited", "exit_code": 0, "duration_ms": 3.2,
            "stdout": out("aaa\n[husk: 99 bytes truncated]\nzzz\n", 107, true), "stderr": out("", 0, false)});
        let s = summarize(&v);
        assert!(s.starts_with("exited with code 0 after 3 ms\n"), "{s}");
        assert!(s.contains("stdout (TRUNCATED: the command wrote 107 bytes;"), "{s}");
        assert!(s.contains("stderr: (empty)"), "{s}");
    }

    #[test]
    fn results_and_exception_are_told_in_words() {
        let v = json!({"termination": "exited", "exit_code": 1, "duration_ms": 3.0,
            "stdout": out("", 0, false), "stderr": out("", 0, false),
            "results": [{"type": "result", "is_main_result": true, "data": {"text/plain": "42", "text/html": "<b>42</b>"}}],
            "exception": {"name": "ValueError", "value": "bad", "traceback": "..."}});
        let s = summarize(&v);
        assert!(s.contains("result: 42\n  (also as text/html: in the structured result)\n"), "{s}");
        assert!(s.contains("exception: ValueError: bad\n"), "{s}");
    }

    #[test]
    fn timeouts_kills_and_setup_failures_are_named() {
        let t = json!({"termination": "wall_timeout", "exit_code": 124, "duration_ms": 500.0});
        assert!(ending(&t).starts_with("TIMED OUT"));
        let k = json!({"termination": "signaled", "exit_code": 137, "signal": 9, "signal_name": "SIGKILL"});
        assert_eq!(ending(&k), "killed by signal SIGKILL (exit code 137)");
        let f = json!({"termination": "setup_failed", "exit_code": 125,
            "error": {"step": "sandbox", "message": "no sandbox \"x\"", "hint": null}});
        assert_eq!(summarize(&f), "husk could not run it (step sandbox): no sandbox \"x\"\n");
    }
}
