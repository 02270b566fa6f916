//! A warm python call's notebook-style results (docs/warm.md, Results):
//! the value of its last expression, display() calls, MIME bundles,
//! matplotlib figures as PNG, and its exception as `{name, value,
//! traceback}` without husk's own frames. Host-mode sandboxes: the host's
//! python3 (and Debian's python3-matplotlib, which scripts/test.sh
//! installs) is the sandbox's.
mod common;
mod sandboxkit;

use sandboxkit::*;

#[test]
fn last_expression_and_display_come_back_as_results_in_both_modes() {
    require_root!();
    python3();
    let s = Sbx::new();
    for mode in [["--warm", "python"], ["--session", "python"]] {
        let id = s.create_with(&mode);
        let (v, code) = code_json(&s, &id, &[], "x = 40\nprint('out')\ndisplay({'k': [1, 2]})\nx + 2");
        assert_eq!((code, stdout_text(&v)), (0, "out\n"), "{mode:?}: {v:#}");
        let r = v["results"].as_array().expect("results");
        assert_eq!(r.len(), 2, "{mode:?}: {v:#}");
        assert_eq!((r[0]["type"].as_str(), r[0]["is_main_result"].as_bool()), (Some("display"), Some(false)));
        assert_eq!(r[0]["data"]["text/plain"], "{'k': [1, 2]}", "{v:#}");
        assert_eq!((r[1]["type"].as_str(), r[1]["is_main_result"].as_bool()), (Some("result"), Some(true)));
        assert_eq!(r[1]["data"]["text/plain"], "42", "{v:#}");
        assert!(v["exception"].is_null(), "{v:#}");
        // A statement last (an assignment, a call returning None) is no result.
        let (v, _) = code_json(&s, &id, &[], "y = 1\nprint('p')");
        assert_eq!(v["results"], serde_json::json!([]), "{mode:?}: {v:#}");
        s.rm(&id);
    }
}

#[test]
fn rich_reprs_become_a_mime_bundle() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--session", "python"]);
    let code = "class T:\n    def _repr_html_(self): return '<b>t</b>'\n    def _repr_json_(self): return {'a': 1}\n    def _repr_svg_(self): return '<svg/>'\n    def __repr__(self): return 'T()'\nT()";
    let (v, code) = code_json(&s, &id, &[], code);
    assert_eq!(code, 0, "{v:#}");
    let d = &v["results"][0]["data"];
    assert_eq!(d["text/html"], "<b>t</b>", "{v:#}");
    assert_eq!(d["application/json"], serde_json::json!({"a": 1}), "{v:#}");
    assert_eq!(d["image/svg+xml"], "<svg/>", "{v:#}");
    assert_eq!(d["text/plain"], "T()", "{v:#}");
}

#[test]
fn exception_is_structured_and_shows_no_shim_frames() {
    require_root!();
    python3();
    let s = Sbx::new();
    for mode in [["--warm", "python"], ["--session", "python"]] {
        let id = s.create_with(&mode);
        let (v, code) = code_json(&s, &id, &[], "def f():\n    raise ValueError('bad input')\nf()");
        assert_eq!(code, 1, "{v:#}");
        let e = &v["exception"];
        assert_eq!((e["name"].as_str(), e["value"].as_str()), (Some("ValueError"), Some("bad input")), "{v:#}");
        let tb = e["traceback"].as_str().unwrap();
        assert!(tb.starts_with("Traceback (most recent call last):\n  File \"<code>\", line 3"), "{mode:?}: {tb}");
        assert!(!tb.contains("husk-warm-shim"), "the shim's frames show: {tb}");
        let stderr = v["stderr"]["text"].as_str().unwrap();
        assert!(!stderr.contains("husk-warm-shim") && stderr.contains("ValueError: bad input"), "{stderr}");
        // A syntax error has no frame of the code's: just the error.
        let (v, _) = code_json(&s, &id, &[], "1 +");
        assert_eq!(v["exception"]["name"], "SyntaxError", "{v:#}");
        assert!(!v["exception"]["traceback"].as_str().unwrap().contains("husk-warm-shim"), "{v:#}");
        s.rm(&id);
    }
}

#[test]
fn matplotlib_figure_comes_back_as_png_without_savefig() {
    require_root!();
    python3();
    let ok = std::process::Command::new("/usr/bin/python3").args(["-c", "import matplotlib"]).status().unwrap();
    assert!(ok.success(), "SKIP: python3-matplotlib missing (scripts/test.sh installs it)");
    let s = Sbx::new();
    let id = s.create_with(&["--session", "python"]);
    let (v, code) =
        code_json(&s, &id, &[], "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.show()");
    assert_eq!(code, 0, "{v:#}");
    let r = v["results"].as_array().expect("results");
    assert_eq!(r.len(), 1, "{v:#}");
    use base64::Engine;
    let png = base64::engine::general_purpose::STANDARD.decode(r[0]["data"]["image/png"].as_str().unwrap()).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(!v["stderr"]["text"].as_str().unwrap().contains("non-interactive"), "{v:#}");
    // Shown once: the figure was closed with the call.
    let (v, _) = code_json(&s, &id, &[], "len(plt.get_fignums())");
    assert_eq!(v["results"][0]["data"]["text/plain"], "0", "{v:#}");
}

#[test]
fn secret_in_a_result_value_is_redacted() {
    require_root!();
    python3();
    let s = Sbx::new();
    let out = s
        .husk(&["create", "--session", "python", "--secret-env", "TOKEN"])
        .env("TOKEN", "s3cr3t-v4lue-xyz")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let (v, _) =
        code_json(&s, &id, &[], "import os\ndisplay(os.environ['TOKEN'])\nraise RuntimeError(os.environ['TOKEN'])");
    let text = v.to_string();
    assert!(!text.contains("s3cr3t-v4lue-xyz"), "the secret reached the verdict: {v:#}");
    assert_eq!(v["exception"]["name"], "RuntimeError", "{v:#}");
}

#[test]
fn results_past_the_output_limit_are_dropped_and_said() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--warm", "python"]);
    let (v, code) = code_json(&s, &id, &["--output-limit", "4096"], "for i in range(100):\n    display('x' * 1000)");
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["results_truncated"], true, "{v:#}");
    assert!(v["results"].as_array().unwrap().len() < 5, "{v:#}");
}
