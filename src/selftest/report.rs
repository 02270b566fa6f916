//! How a selftest is shown: a table, one line per probe as it finishes,
//! framed by what the defaults were and a summary; or one JSON document.

use super::{ProbeResult, Report, Summary};
use serde_json::Value;

pub const COLUMNS: &str = "CATEGORY      PROBE                        VERDICT         DETAIL";

/// One table line.
pub fn line(r: &ProbeResult) -> String {
    format!("{:<13} {:<28} {:<15} {}", r.category.label(), r.name, r.verdict.label(), r.detail)
}

/// What the defaults applied, from the preflight verdict, in one line.
pub fn sandbox_line(isolation: &Value, limits: &Value) -> String {
    let list = |v: &Value| {
        v.as_array().map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(",")).unwrap_or_default()
    };
    let size = |v: &Value| v.as_u64().map(crate::units::format_size).unwrap_or_else(|| "none".into());
    let mut parts = vec![
        format!("namespaces {}", list(&isolation["namespaces"])),
        format!("seccomp {}", isolation["seccomp"]["profile"].as_str().unwrap_or("none")),
        format!("network {}", isolation["network"].as_str().unwrap_or("?")),
        format!("memory {}", size(&limits["memory"]["applied"])),
        format!("pids {}", limits["pids"]["applied"].as_u64().map(|p| p.to_string()).unwrap_or_else(|| "none".into())),
    ];
    if let Some(uid) = isolation["user_mapping"]["sandbox_root_host_uid"].as_u64() {
        parts.push(format!("sandbox root = host uid {uid}"));
    }
    let downgrades = list(&isolation["downgrades"]);
    if !downgrades.is_empty() {
        parts.push(format!("DOWNGRADES {downgrades}"));
    }
    parts.join("; ")
}

pub fn summary_line(s: &Summary) -> String {
    format!(
        "{} probes: {} contained, {} ESCAPED, {} not applicable, {} error{}",
        s.total,
        s.contained,
        s.escaped,
        s.not_applicable,
        s.error,
        if s.error == 1 { "" } else { "s" }
    )
}

/// The closing lines of the text output.
pub fn footer(r: &Report) -> Vec<String> {
    let mut out = vec![String::new(), summary_line(&r.summary)];
    if r.interrupted {
        out.push("interrupted: the remaining probes did not run; fixtures were removed".into());
    }
    if !r.weakened.is_empty() {
        out.push(format!("WEAKENED RUN (test only): every sandbox had {}", r.weakened.join(" ")));
    }
    // Worded from the exit code, whose precedence `exit_code` owns.
    let verdict = match r.exit_code {
        super::EXIT_ESCAPED => "FAIL: something escaped (exit 1)",
        super::EXIT_INTERRUPTED => "INTERRUPTED (exit 130)",
        super::EXIT_INCONCLUSIVE => "INCONCLUSIVE: some probes proved nothing (exit 2)",
        _ => "PASS: everything tried was contained (exit 0)",
    };
    out.push(verdict.into());
    out
}

/// `husk selftest --list`.
pub fn list() -> Vec<String> {
    let mut out = vec![format!("{:<13} {:<28} {}", "CATEGORY", "PROBE", "ATTEMPT")];
    for p in super::probes::PROBES {
        out.push(format!("{:<13} {:<28} {}", p.category.label(), p.name, p.about));
    }
    out
}
