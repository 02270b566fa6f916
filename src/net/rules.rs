//! The egress allowlist: `--network allow=RULE` parsed into `Rule`s, the
//! match of a (host, port) target against them, and the address classes a
//! name may not resolve into unless a rule names the address itself.

use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// The ports a rule without one allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ports {
    /// `host` (80 and 443).
    Default,
    /// `host:*`.
    Any,
    /// `host:PORT`.
    One(u16),
}

impl Ports {
    fn allows(&self, port: u16) -> bool {
        match self {
            Ports::Default => DEFAULT_PORTS.contains(&port),
            Ports::Any => true,
            Ports::One(p) => *p == port,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Target {
    /// An exact host name (lower case, no trailing dot).
    Name(String),
    /// `*.suffix`: any name strictly below `suffix` (not `suffix` itself).
    Suffix(String),
    /// An address or a CIDR block.
    Net { addr: IpAddr, prefix: u8 },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    pub target: Target,
    pub ports: Ports,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "invalid --network allow rule {rule:?}: {why}; rules are host, *.host, host:port, host:*, IP, IP/CIDR, [IPv6]:port (e.g. pypi.org:443)"
)]
pub struct RuleError {
    pub rule: String,
    pub why: &'static str,
}

/// Lower case, without a trailing dot: how names are compared.
pub fn normalize_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// A host name as DNS allows it (letters, digits, '-', '_', dots; labels of
/// 1..63, 253 in all).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl Rule {
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let bad = |why| RuleError { rule: text.to_string(), why };
        let s = text.trim();
        if s.is_empty() {
            return Err(bad("empty rule"));
        }
        // Host part and optional port part; IPv6 needs brackets for a port.
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (h, after) = rest.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
            match after {
                "" => (h, None),
                p => (h, Some(p.strip_prefix(':').ok_or_else(|| bad("expected :PORT after ']'"))?)),
            }
        } else if s.matches(':').count() > 1 {
            (s, None) // a bare IPv6 address or CIDR
        } else {
            match s.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (s, None),
            }
        };
        let ports = match port {
            None => Ports::Default,
            Some("*") => Ports::Any,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => Ports::One(n),
                _ => return Err(bad("the port must be 1-65535 or *")),
            },
        };
        let target = if let Some((a, n)) = host.split_once('/') {
            let addr: IpAddr = a.parse().map_err(|_| bad("a CIDR needs an IP address before '/'"))?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix = n.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(|| bad("bad CIDR prefix length"))?;
            Target::Net { addr, prefix }
        } else if let Ok(addr) = host.parse::<IpAddr>() {
            Target::Net { addr, prefix: if addr.is_ipv4() { 32 } else { 128 } }
        } else if let Some(suffix) = host.strip_prefix("*.") {
            let suffix = normalize_name(suffix);
            if !valid_name(&suffix) {
                return Err(bad("not a valid host name after '*.'"));
            }
            Target::Suffix(suffix)
        } else {
            let name = normalize_name(host);
            if !valid_name(&name) || name.contains('*') {
                return Err(bad("not a valid host name"));
            }
            Target::Name(name)
        };
        Ok(Rule { target, ports })
    }

    /// Whether this rule allows a name target (already normalized).
    pub fn allows_name(&self, name: &str, port: u16) -> bool {
        let hit = match &self.target {
            Target::Name(n) => n == name,
            Target::Suffix(s) => {
                name.len() > s.len() + 1 && name.ends_with(s.as_str()) && {
                    name.as_bytes()[name.len() - s.len() - 1] == b'.'
                }
            }
            Target::Net { .. } => false,
        };
        hit && self.ports.allows(port)
    }

    /// Whether this rule names `addr` (an IP rule covering it) at `port`.
    pub fn allows_addr(&self, addr: IpAddr, port: u16) -> bool {
        match &self.target {
            Target::Net { addr: net, prefix } => in_net(addr, *net, *prefix) && self.ports.allows(port),
            _ => false,
        }
    }
}

fn in_net(addr: IpAddr, net: IpAddr, prefix: u8) -> bool {
    // An IPv4-mapped IPv6 address is the IPv4 address it maps.
    let addr = match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        a => a,
    };
    match (addr, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix)) };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// Addresses a name may not resolve into without an IP rule naming them:
/// the host itself, its LANs and the link (DNS rebinding onto internal
/// services). `own` are the host's own interface addresses.
pub fn is_internal(addr: IpAddr, own: &[IpAddr]) -> bool {
    let addr = match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        a => a,
    };
    if own.contains(&addr) {
        return true;
    }
    match addr {
        IpAddr::V4(a) => {
            a.is_loopback()
                || a.is_private()
                || a.is_link_local()
                || a.is_multicast()
                || a.is_unspecified()
                || a.is_broadcast()
                || in_net(addr, IpAddr::V4([100, 64, 0, 0].into()), 10) // carrier-grade NAT
                || in_net(addr, IpAddr::V4([0, 0, 0, 0].into()), 8)
                || in_net(addr, IpAddr::V4([240, 0, 0, 0].into()), 4)
        }
        IpAddr::V6(a) => {
            a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                || in_net(addr, IpAddr::V6("fc00::".parse().unwrap_or(a)), 7) // unique local
                || in_net(addr, IpAddr::V6("fe80::".parse().unwrap_or(a)), 10) // link local
        }
    }
}

/// The rules of one sandbox.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub rules: Vec<Rule>,
}

impl Policy {
    pub fn parse(texts: &[String]) -> Result<Policy, RuleError> {
        Ok(Policy { rules: texts.iter().map(|t| Rule::parse(t)).collect::<Result<_, _>>()? })
    }

    pub fn allows_name(&self, name: &str, port: u16) -> bool {
        self.rules.iter().any(|r| r.allows_name(name, port))
    }

    pub fn allows_addr(&self, addr: IpAddr, port: u16) -> bool {
        self.rules.iter().any(|r| r.allows_addr(addr, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(rules: &[&str]) -> Policy {
        Policy::parse(&rules.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn name_rules_match_exactly_with_default_ports() {
        let pol = p(&["PyPI.org."]);
        assert!(pol.allows_name("pypi.org", 443) && pol.allows_name("pypi.org", 80));
        assert!(!pol.allows_name("pypi.org", 8080));
        assert!(!pol.allows_name("evil-pypi.org", 443) && !pol.allows_name("files.pypi.org", 443));
    }

    #[test]
    fn wildcard_rules_match_subdomains_only() {
        let pol = p(&["*.example.com:*"]);
        assert!(pol.allows_name("a.example.com", 22) && pol.allows_name("a.b.example.com", 1));
        assert!(!pol.allows_name("example.com", 443));
        assert!(!pol.allows_name("badexample.com", 443));
    }

    #[test]
    fn ip_and_cidr_rules_with_ports() {
        let pol = p(&["10.0.0.0/8:5432", "[::1]:8080", "192.168.1.1", "fd00::/8"]);
        assert!(pol.allows_addr("10.1.2.3".parse().unwrap(), 5432));
        assert!(!pol.allows_addr("10.1.2.3".parse().unwrap(), 443));
        assert!(pol.allows_addr("::1".parse().unwrap(), 8080));
        assert!(pol.allows_addr("192.168.1.1".parse().unwrap(), 443));
        assert!(pol.allows_addr("::ffff:192.168.1.1".parse().unwrap(), 80));
        assert!(pol.allows_addr("fd12::1".parse().unwrap(), 80));
        assert!(!pol.allows_name("10.1.2.3", 5432), "an IP rule does not match names");
    }

    #[test]
    fn bad_rules_are_refused_with_the_grammar() {
        for bad in ["", "host:0", "host:99999", "a..b", "*.", "1.2.3.4/33", "[::1", "ho st", "x:y:z]"] {
            let e = Rule::parse(bad).unwrap_err();
            assert!(e.to_string().contains("rules are host"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn internal_addresses_are_recognized() {
        let own: Vec<IpAddr> = vec!["203.0.113.7".parse().unwrap()];
        for a in [
            "127.0.0.1",
            "10.0.0.1",
            "172.16.0.1",
            "192.168.0.1",
            "169.254.169.254",
            "224.0.0.1",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "203.0.113.7",
        ] {
            assert!(is_internal(a.parse().unwrap(), &own), "{a}");
        }
        for a in ["93.184.216.34", "2606:2800:220:1::1"] {
            assert!(!is_internal(a.parse().unwrap(), &own), "{a}");
        }
    }
}
