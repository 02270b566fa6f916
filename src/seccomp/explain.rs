//! What a profile does with each x86_64 syscall, in words: the output of
//! `husk seccomp check`.

use super::compile::decisions;
use super::profile::{Act, Cond, Policy};
use serde_json::json;
use std::collections::BTreeMap;
use std::fmt::Write;

fn rules_text(rules: &[Vec<Cond>]) -> String {
    rules
        .iter()
        .map(|r| r.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" && "))
        .collect::<Vec<_>>()
        .join(" || ")
}

fn name(nr: u32) -> String {
    super::syscall_name(nr as i64)
}

/// Facts shown beside the decisions.
pub struct Header<'a> {
    pub profile: &'a str,
    pub sha256: &'a str,
    pub instructions: usize,
}

pub fn text(h: &Header<'_>, policy: &Policy) -> String {
    let d = decisions(policy);
    let mut s = String::new();
    let _ = writeln!(s, "profile: {}\nsha256: {}", h.profile, h.sha256);
    let _ = writeln!(s, "compiled: {} BPF instructions (kernel limit 4096)", h.instructions);
    let _ = writeln!(s, "default action: {}", policy.default);
    let _ = writeln!(s, "foreign ABIs (i386 int 0x80, x32): kill process, always");
    if !policy.foreign_arches.is_empty() {
        let _ =
            writeln!(s, "ignored architectures (husk never lets them through): {}", policy.foreign_arches.join(", "));
    }
    if !policy.ignored_names.is_empty() {
        let _ = writeln!(s, "ignored names (not x86_64 syscalls): {}", policy.ignored_names.join(" "));
    }
    let mut by_action: BTreeMap<(bool, Act), Vec<String>> = BTreeMap::new();
    let mut conditional = Vec::new();
    for (nr, steps) in &d {
        match steps.as_slice() {
            [only] => by_action.entry((only.by_default, only.action)).or_default().push(name(*nr)),
            steps => conditional.push((*nr, steps)),
        }
    }
    for ((by_default, act), names) in &by_action {
        let how = if *by_default { " (by default: not listed)" } else { "" };
        let _ = writeln!(s, "\n{act}{how} — {} syscalls:", names.len());
        let _ = writeln!(s, "{}", wrap(names, 100));
    }
    if !conditional.is_empty() {
        let _ = writeln!(s, "\ndepending on arguments — {} syscalls:", conditional.len());
        for (nr, steps) in conditional {
            let parts: Vec<String> = steps
                .iter()
                .map(|st| {
                    if st.rules.is_empty() {
                        format!("otherwise {}", st.action)
                    } else {
                        format!("{} if {}", st.action, rules_text(&st.rules))
                    }
                })
                .collect();
            let _ = writeln!(s, "  {}: {}", name(nr), parts.join("; "));
        }
    }
    s
}

fn wrap(words: &[String], width: usize) -> String {
    let mut lines: Vec<String> = Vec::new();
    for w in words {
        match lines.last_mut() {
            Some(l) if l.len() + 1 + w.len() <= width => {
                l.push(' ');
                l.push_str(w);
            }
            _ => lines.push(format!("  {w}")),
        }
    }
    lines.join("\n")
}

pub fn json(h: &Header<'_>, policy: &Policy) -> serde_json::Value {
    let syscalls: serde_json::Map<String, serde_json::Value> = decisions(policy)
        .into_iter()
        .map(|(nr, steps)| {
            let v = match steps.as_slice() {
                [only] => json!(only.action.to_string()),
                steps => json!(
                    steps
                        .iter()
                        .map(|st| if st.rules.is_empty() {
                            json!({"action": st.action.to_string()})
                        } else {
                            json!({"if": rules_text(&st.rules), "action": st.action.to_string()})
                        })
                        .collect::<Vec<_>>()
                ),
            };
            (name(nr), v)
        })
        .collect();
    json!({
        "profile": h.profile,
        "sha256": h.sha256,
        "instructions": h.instructions,
        "default_action": policy.default.to_string(),
        "foreign_abi": "kill_process",
        "ignored_arches": policy.foreign_arches,
        "ignored_names": policy.ignored_names,
        "syscalls": syscalls,
    })
}
