//! What the proxy saw, bounded: per destination connections and bytes, per
//! denied target the reason and a count, and totals. A scanner in the
//! sandbox can try a million targets; the proxy tracks at most
//! `MAX_TRACKED` of each kind (the rest only in the totals) and the
//! verdict shows the top `TOP_N`.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

pub const MAX_TRACKED: usize = 1024;
pub const TOP_N: usize = 20;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Destination {
    pub host: String,
    pub port: u16,
    pub connections: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Denied {
    pub host: String,
    pub port: u16,
    pub reason: String,
    pub count: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub connections: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub denied: u64,
    /// Distinct destinations / denied targets seen (capped at MAX_TRACKED
    /// each; the lists show the top TOP_N).
    pub destinations: u64,
    pub denied_targets: u64,
}

/// The verdict's `network` for an allowlist run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkReport {
    /// Always "allowlist".
    pub mode: String,
    pub rules: Vec<String>,
    /// Where the sandbox reaches the proxy (HTTP_PROXY / ALL_PROXY).
    pub http_proxy: String,
    pub socks_proxy: String,
    pub destinations: Vec<Destination>,
    pub denied: Vec<Denied>,
    pub totals: Totals,
    /// `--egress-bytes`, and whether it cut connections.
    pub egress_bytes_limit: Option<u64>,
    pub egress_bytes_exceeded: bool,
    pub max_connections: u64,
    /// The proxy failed or gave no report (the sandbox was cut off, not
    /// opened: its listeners died with the proxy).
    pub error: Option<String>,
}

#[derive(Default)]
pub struct Ledger {
    dest: HashMap<(String, u16), Destination>,
    denied: HashMap<(String, u16, &'static str), u64>,
    pub totals: Totals,
    pub exceeded: bool,
}

impl Ledger {
    pub fn connected(&mut self, host: &str, port: u16) {
        self.totals.connections += 1;
        let key = (host.to_string(), port);
        if let Some(d) = self.dest.get_mut(&key) {
            d.connections += 1;
        } else if self.dest.len() < MAX_TRACKED {
            self.totals.destinations += 1;
            self.dest.insert(key, Destination { host: host.into(), port, connections: 1, ..Default::default() });
        }
    }

    pub fn bytes(&mut self, host: &str, port: u16, up: u64, down: u64) {
        self.totals.bytes_up += up;
        self.totals.bytes_down += down;
        if let Some(d) = self.dest.get_mut(&(host.to_string(), port)) {
            d.bytes_up += up;
            d.bytes_down += down;
        }
    }

    pub fn denied(&mut self, host: &str, port: u16, reason: &'static str) {
        self.totals.denied += 1;
        let key = (host.to_string(), port, reason);
        if let Some(n) = self.denied.get_mut(&key) {
            *n += 1;
        } else if self.denied.len() < MAX_TRACKED {
            self.totals.denied_targets += 1;
            self.denied.insert(key, 1);
        }
    }

    /// The bounded report: destinations by bytes then connections, denials
    /// by count (ties by name, so the report is stable).
    pub fn report(&self, base: NetworkReport) -> NetworkReport {
        let mut dest: Vec<Destination> = self.dest.values().cloned().collect();
        dest.sort_by(|a, b| {
            (b.bytes_up + b.bytes_down, b.connections, &a.host, a.port).cmp(&(
                a.bytes_up + a.bytes_down,
                a.connections,
                &b.host,
                b.port,
            ))
        });
        dest.truncate(TOP_N);
        let mut denied: Vec<Denied> = self
            .denied
            .iter()
            .map(|((h, p, r), c)| Denied { host: h.clone(), port: *p, reason: (*r).into(), count: *c })
            .collect();
        denied.sort_by(|a, b| (b.count, &a.host, a.port, &a.reason).cmp(&(a.count, &b.host, b.port, &b.reason)));
        denied.truncate(TOP_N);
        NetworkReport {
            destinations: dest,
            denied,
            totals: self.totals.clone(),
            egress_bytes_exceeded: self.exceeded,
            ..base
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scanner_cannot_grow_the_ledger_or_the_report_without_bound() {
        let mut l = Ledger::default();
        for i in 0..5000u32 {
            l.denied(&format!("h{i}.test"), 443, "not_allowed");
            l.connected(&format!("d{i}.test"), 80);
        }
        assert!(l.denied.len() <= MAX_TRACKED && l.dest.len() <= MAX_TRACKED);
        let r = l.report(NetworkReport::default());
        assert_eq!((r.denied.len(), r.destinations.len()), (TOP_N, TOP_N));
        assert_eq!((r.totals.denied, r.totals.connections), (5000, 5000));
        assert_eq!(r.totals.denied_targets, MAX_TRACKED as u64);
    }
}
