//! Secrets an agent's command needs (an API token) and a model must not
//! see: `--secret-env NAME` / `--secret-file NAME=PATH` give the command the
//! value, and husk never writes it down (argv, state.json, `inspect`, a
//! verdict) and replaces it by `[husk: secret NAME]` in captured output,
//! also when the value is split between two reads of the command's pipe.
//! `--redact` keeps host paths out of a verdict's error text.
mod common;
mod sandboxkit;

mod rootless {
    use super::common::*;
    use super::sandboxkit::*;
    use serde_json::Value;

    const TOKEN: &str = "tok-5f1c9e2a-husk-secret";
    const FILED: &str = "filed-77ab31-secret";

    fn text(v: &Value, stream: &str) -> String {
        v[stream]["text"].as_str().unwrap_or_default().to_string()
    }

    #[test]
    fn secret_env_never_in_state_inspect_or_output() {
        let s = Sbx::new();
        let t = TempDir::new("secrets");
        let file = t.join("filed");
        std::fs::write(&file, format!("{FILED}\n")).unwrap();
        let file_arg = format!("FILED={}", file.display());
        let out = s
            .husk(&["create", "--name", "vault", "--secret-env", "TOKEN", "--secret-file", &file_arg])
            .env("TOKEN", TOKEN)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();

        // On disk and in inspect: the names, never the values.
        let state = std::fs::read_to_string(s.dir(&id).join("state.json")).unwrap();
        assert!(!state.contains(TOKEN) && !state.contains(FILED), "a secret value is in state.json");
        let inspect = s.out(&["inspect", "--show-env", "vault"]);
        let shown = String::from_utf8_lossy(&inspect.stdout);
        assert!(!shown.contains(TOKEN) && !shown.contains(FILED), "inspect --show-env shows a secret: {shown}");
        let rec: Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(rec["secret_names"], serde_json::json!(["TOKEN", "FILED"]), "{rec:#}");

        // The command gets the values; the captured output never holds them.
        let script = r#"[ "$TOKEN" = "tok-5f1c9e2a-husk-secret" ] && [ "$FILED" = "filed-77ab31-secret" ] && echo received; echo "$TOKEN"; echo "$FILED" >&2"#;
        let (v, code) = s.exec_json("vault", &[], &["sh", "-c", script]);
        assert_eq!(code, 0, "{v:#}");
        assert_eq!(text(&v, "stdout"), "received\n[husk: secret TOKEN]\n", "{v:#}");
        assert_eq!(text(&v, "stderr"), "[husk: secret FILED]\n", "{v:#}");

        // Streamed: the value written in two pieces, 200 ms apart, so the
        // pipe delivers it in two reads.
        let (a, b) = TOKEN.split_at(9);
        let split = format!("printf '{a}'; sleep 0.2; printf '{b} end\\n'");
        let out = s.out(&["exec", "--json-stream", "vault", "--", "sh", "-c", &split]);
        let all = String::from_utf8_lossy(&out.stdout);
        assert!(!all.contains(TOKEN) && !all.contains(a), "the value leaked in the stream: {all}");
        let mut streamed = String::new();
        let mut verdict = Value::Null;
        for line in all.lines() {
            let e: Value = serde_json::from_str(line).unwrap();
            if let Some(d) = e["data"].as_str() {
                streamed.push_str(d);
            }
            if e.get("verdict").is_some() {
                verdict = e["verdict"].clone();
            }
        }
        assert_eq!(streamed, "[husk: secret TOKEN] end\n");
        assert_eq!(text(&verdict, "stdout"), "[husk: secret TOKEN] end\n", "{verdict:#}");

        // An exec's own secret, and one in husk's own error text.
        let out = s
            .husk(&["exec", "--json", "--secret-env", "EXTRA", "vault", "--", "sh", "-c", "echo $EXTRA $TOKEN"])
            .env("EXTRA", "extra-9d8c7b")
            .output()
            .unwrap();
        let v = verdict_of(&out);
        assert_eq!(text(&v, "stdout"), "[husk: secret EXTRA] [husk: secret TOKEN]\n", "{v:#}");
        let missing = format!("/no/such/{TOKEN}");
        let (v, _) = s.exec_json("vault", &[], &[&missing]);
        let shown = v.to_string();
        assert!(!shown.contains(TOKEN) && shown.contains("[husk: secret TOKEN]"), "{v:#}");
        s.rm("vault");

        // husk run: the same.
        let out = husk(&["run", "--json", "--secret-env", "TOKEN", "--", "sh", "-c", "echo $TOKEN"])
            .env("TOKEN", TOKEN)
            .output()
            .unwrap();
        let v = verdict_of(&out);
        assert_eq!(text(&v, "stdout"), "[husk: secret TOKEN]\n", "{v:#}");

        // A secret that is not there is refused, never given empty.
        let out = husk(&["run", "--json", "--secret-env", "HUSK_TEST_UNSET_SECRET", "--", "true"])
            .env_remove("HUSK_TEST_UNSET_SECRET")
            .output()
            .unwrap();
        let v = verdict_of(&out);
        assert_eq!(out.status.code(), Some(125), "{v:#}");
        assert!(v["error"]["message"].as_str().unwrap().contains("HUSK_TEST_UNSET_SECRET"), "{v:#}");
    }

    /// `--redact`: what a model may see of husk's own failure holds no host
    /// path (here, one naming a user's home).
    #[test]
    fn redact_keeps_host_paths_out_of_verdict_error() {
        let t = TempDir::new("redact");
        let missing = t.join("alice-home/project");
        let m = missing.to_str().unwrap();
        let plain = verdict_of(&husk(&["run", "--json", "--rootfs", m, "--", "true"]).output().unwrap());
        assert!(plain["error"]["message"].as_str().unwrap().contains(m), "{plain:#}");
        let out = husk(&["run", "--json", "--redact", "--rootfs", m, "--", "true"]).output().unwrap();
        let v = verdict_of(&out);
        assert_eq!(out.status.code(), Some(125));
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(!v.to_string().contains(m) && msg.contains("[path]"), "{v:#}");
        assert_eq!(v["error"]["step"], plain["error"]["step"]);
    }
}

/// Two sandboxes with different secrets behind one `husk serve`: each
/// exec's answer hides its own sandbox's (and its own request's) values
/// and no other's; a value of one sandbox is never the other's secret,
/// and a request's own secret does not outlive the request.
#[test]
fn serve_keeps_each_sandboxs_secrets_to_its_own_answers() {
    use common::*;
    use sandboxkit::*;
    use serde_json::{Value, json};
    use std::io::{BufRead, BufReader, Read, Write};
    use std::os::unix::net::UnixStream;
    use std::process::Stdio;
    require_root!();
    const ALPHA: &str = "alpha-4c1d-secret";
    const BRAVO: &str = "bravo-93e0-secret";
    const OWN: &str = "own-51aa-secret";

    let sbx = Sbx::new();
    let mut serve = sbx.husk(&["serve"]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(serve.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let socket = line.trim().strip_prefix("husk serve: listening on unix:").map(str::to_string);
    let stop = |serve: &mut std::process::Child| {
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(serve.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let _ = serve.wait();
    };
    let Some(socket) = socket else {
        stop(&mut serve);
        panic!("husk serve did not start: {line}");
    };
    let request = |method: &str, path: &str, body: &Value| -> (u16, Value) {
        let body = body.to_string();
        let mut s = UnixStream::connect(&socket).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: husk\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).unwrap();
        let status: u16 = String::from_utf8_lossy(&resp[9..12]).parse().unwrap();
        let end = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        (status, serde_json::from_slice(&resp[end..]).unwrap_or(Value::Null))
    };
    let create = |secrets: Value| {
        let (status, v) = request("POST", "/v1/sandboxes", &json!({"secret_env": secrets}));
        assert_eq!(status, 201, "{v}");
        v["id"].as_str().unwrap().to_string()
    };
    let a = create(json!({"TOKEN": ALPHA}));
    let b = create(json!({"TOKEN": BRAVO}));
    let exec = |id: &str, body: Value| {
        let (status, v) = request("POST", &format!("/v1/sandboxes/{id}/exec"), &body);
        assert_eq!(status, 200, "{v}");
        stdout_of(&v)
    };
    let script = format!("echo $TOKEN; echo {ALPHA}; echo {BRAVO}; echo {OWN}");
    let in_a = exec(&a, json!({"argv": ["sh", "-c", &script], "secret_env": {"OWN": OWN}}));
    let in_b = exec(&b, json!({"argv": ["sh", "-c", &script]}));
    let again_a = exec(&a, json!({"argv": ["sh", "-c", &script]}));
    for id in [&a, &b] {
        request("DELETE", &format!("/v1/sandboxes/{id}"), &Value::Null);
    }
    stop(&mut serve);
    assert_eq!(
        in_a,
        format!("[husk: secret TOKEN]\n[husk: secret TOKEN]\n{BRAVO}\n[husk: secret OWN]\n"),
        "sandbox a's answer: its own secret and its request's hidden, b's value is no secret of a's"
    );
    assert_eq!(in_b, format!("[husk: secret TOKEN]\n{ALPHA}\n[husk: secret TOKEN]\n{OWN}\n"), "sandbox b's answer");
    assert_eq!(
        again_a,
        format!("[husk: secret TOKEN]\n[husk: secret TOKEN]\n{BRAVO}\n{OWN}\n"),
        "an earlier request's own secret is not hidden in a later request"
    );
}
