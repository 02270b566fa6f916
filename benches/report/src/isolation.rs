//! What a runtime applied, read from the probe scripts/bench.sh runs inside
//! each one (busybox sh: /proc/self/uid_map, /proc/self/status, /proc/net/dev,
//! a write to /), so the table shows what was observed, not what a config
//! file promised. Limits and namespace lists come from the script
//! (`declared`), because a busybox shell cannot see them from inside.

use std::collections::BTreeMap;

/// The probe's `key=value` lines.
pub fn parse(text: &str) -> BTreeMap<String, String> {
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect()
}

/// The observed columns, in table order.
pub struct Observed {
    pub user_ns: String,
    pub pid_ns: String,
    pub network: String,
    pub root: String,
    pub caps: String,
    pub seccomp: String,
    pub no_new_privs: String,
}

/// `gvisor`: the probe ran on gVisor's kernel, whose uid_map is its own
/// (the host side is in the runtime's notes).
pub fn observe(probe: &BTreeMap<String, String>, gvisor: bool) -> Observed {
    let get = |k: &str| probe.get(k).map(String::as_str).unwrap_or("");
    Observed {
        user_ns: if gvisor { "gVisor's own (see notes)".into() } else { user_ns(get("uid_map")) },
        pid_ns: match get("pid").parse::<u32>() {
            Ok(p) if p <= 2 => format!("yes (sh is pid {p})"),
            Ok(p) => format!("no (sh is pid {p})"),
            Err(_) => "?".into(),
        },
        network: network(get("ifaces")),
        root: match get("root") {
            "ro" => "read-only".into(),
            "rw" => "**writable**".into(),
            _ => "?".into(),
        },
        caps: caps(get("CapEff")),
        seccomp: match (get("Seccomp"), get("Seccomp_filters")) {
            ("0", _) => "**none**".into(),
            ("2", "") => "filter".into(),
            ("2", n) => format!("filter ({n})"),
            ("", _) => "?".into(),
            (m, _) => format!("mode {m}"),
        },
        no_new_privs: match get("NoNewPrivs") {
            "1" => "yes".into(),
            "0" => "**no**".into(),
            "" if gvisor => "not shown by gVisor".into(),
            _ => "?".into(),
        },
    }
}

/// `0 1000000000 65536` -> remapped; `0 0 4294967295` -> the host's own.
fn user_ns(map: &str) -> String {
    let f: Vec<u64> = map.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    match f.as_slice() {
        [0, 0, 4294967295] => "**no** (root is host root)".into(),
        [0, 0, n] => format!("yes, root is host root ({n} id)"),
        [0, host, n] => format!("yes, root is host {host} ({n} ids)"),
        [inner, host, n] => format!("yes, {inner} is host {host} ({n} ids)"),
        _ => "?".into(),
    }
}

fn network(ifaces: &str) -> String {
    let names: Vec<&str> = ifaces.split(',').filter(|s| !s.is_empty()).collect();
    match names.as_slice() {
        [] => "?".into(),
        ["lo"] => "none (lo only)".into(),
        more => format!("**{}**", more.join(", ")),
    }
}

fn caps(hex: &str) -> String {
    match u64::from_str_radix(hex, 16) {
        Ok(0) => "none".into(),
        Ok(v) if v.count_ones() >= 38 => format!("**all** ({})", v.count_ones()),
        Ok(v) => format!("{} effective", v.count_ones()),
        Err(_) => "?".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_lines_become_columns() {
        let p = parse(
            "uid_map=0 1000000000 65536\npid=2\nifaces=lo,\nroot=ro\nCapEff=0000000000000000\n\
             Seccomp=2\nSeccomp_filters=1\nNoNewPrivs=1\n",
        );
        let o = observe(&p, false);
        assert_eq!(o.user_ns, "yes, root is host 1000000000 (65536 ids)");
        assert_eq!(o.pid_ns, "yes (sh is pid 2)");
        assert_eq!(o.network, "none (lo only)");
        assert_eq!(o.root, "read-only");
        assert_eq!(o.caps, "none");
        assert_eq!(o.seccomp, "filter (1)");
        assert_eq!(o.no_new_privs, "yes");
    }

    #[test]
    fn host_like_values_are_flagged() {
        let p = parse(
            "uid_map=0 0 4294967295\npid=4242\nifaces=lo,eth0,\nroot=rw\nCapEff=000001ffffffffff\nSeccomp=0\nNoNewPrivs=0\n",
        );
        let o = observe(&p, false);
        assert!(o.user_ns.starts_with("**no**"));
        assert!(o.pid_ns.starts_with("no"));
        assert_eq!(o.network, "**lo, eth0**");
        assert_eq!(o.root, "**writable**");
        assert!(o.caps.starts_with("**all**"));
        assert_eq!(o.seccomp, "**none**");
        assert_eq!(o.no_new_privs, "**no**");
    }
}
