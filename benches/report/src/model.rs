//! What scripts/bench.sh hands over: `meta.json` (host, versions, groups,
//! what each runtime applied, targets) and one hyperfine `--export-json`
//! file per hyperfine invocation, several of which may make up one group
//! (slow peers get fewer runs in their own invocation).

use serde::Deserialize;
use std::path::Path;

#[derive(Debug, Deserialize)]
pub struct Meta {
    /// When the run started, as the script printed it (UTC).
    pub date: String,
    /// The command line that produced the results.
    pub command: String,
    /// Ordered facts about the host: kernel, CPU, load average...
    pub host: Vec<(String, String)>,
    pub husk: Husk,
    /// Peer tools and their versions, in order.
    pub tools: Vec<(String, String)>,
    pub groups: Vec<GroupMeta>,
    #[serde(default)]
    pub runtimes: Vec<Runtime>,
    #[serde(default)]
    pub skipped: Vec<Skip>,
    #[serde(default)]
    pub targets: Vec<Target>,
    #[serde(default)]
    pub notes: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct Husk {
    pub version: String,
    pub commit: String,
}

#[derive(Debug, Deserialize)]
pub struct GroupMeta {
    pub id: String,
    pub title: String,
    /// The benchmark name ratios are taken against.
    pub baseline: String,
    /// hyperfine JSON files (relative to the results directory).
    pub files: Vec<String>,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// One runtime as the cold-start group ran it: what it was asked to apply
/// (`declared`) and what a probe saw from inside (`probe`, key=value lines).
#[derive(Debug, Deserialize)]
pub struct Runtime {
    pub name: String,
    pub kernel: String,
    pub namespaces: String,
    pub limits: String,
    #[serde(default)]
    pub probe: Option<String>,
    #[serde(default)]
    pub notes: String,
}

#[derive(Debug, Deserialize)]
pub struct Skip {
    pub group: String,
    pub name: String,
    pub why: String,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// `a` is faster than `b` (median).
    Faster { label: String, a: String, b: String },
    /// `b` takes at least `ratio` times as long as `a` (medians).
    RatioAtLeast { label: String, a: String, b: String, ratio: f64 },
    /// `a`'s median is at most `ms` above `b`'s.
    WithinMs { label: String, a: String, b: String, ms: f64 },
}

/// One hyperfine result (times in seconds).
#[derive(Clone, Debug, Deserialize)]
pub struct Bench {
    pub command: String,
    pub mean: f64,
    pub stddev: Option<f64>,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub times: Vec<f64>,
}

#[derive(Deserialize)]
struct HyperfineFile {
    results: Vec<Bench>,
}

/// A group with its results loaded.
pub struct Group<'m> {
    pub meta: &'m GroupMeta,
    pub benches: Vec<Bench>,
}

impl Group<'_> {
    pub fn get(&self, name: &str) -> Option<&Bench> {
        self.benches.iter().find(|b| b.command == name)
    }

    pub fn baseline(&self) -> Option<&Bench> {
        self.get(&self.meta.baseline)
    }
}

pub fn load_meta(dir: &Path) -> Result<Meta, String> {
    let path = dir.join("meta.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Loads every group's files; a missing file is an error (the script writes
/// a file only for what it ran, and lists only what it wrote).
pub fn load_groups<'m>(dir: &Path, meta: &'m Meta) -> Result<Vec<Group<'m>>, String> {
    let mut out = Vec::new();
    for g in &meta.groups {
        let mut benches = Vec::new();
        for f in &g.files {
            let path = dir.join(f);
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let file: HyperfineFile =
                serde_json::from_str(&text).map_err(|e| format!("{}: not hyperfine JSON: {e}", path.display()))?;
            benches.extend(file.results);
        }
        out.push(Group { meta: g, benches: merge(benches) });
    }
    Ok(out)
}

/// One entry per command, in first-seen order: the script runs the fast
/// benchmarks in several rounds (rotating their order, so load that drifts
/// during the run is spread over all of them); their times are pooled and
/// the statistics computed again from the pooled times.
pub fn merge(benches: Vec<Bench>) -> Vec<Bench> {
    let mut out: Vec<Bench> = Vec::new();
    for b in benches {
        match out.iter_mut().find(|x| x.command == b.command) {
            Some(x) => x.times.extend(b.times),
            None => out.push(b),
        }
    }
    for b in &mut out {
        if let Some(s) = Stats::of(&b.times) {
            (b.mean, b.stddev, b.median, b.min, b.max) = (s.mean, s.stddev, s.median, s.min, s.max);
        }
    }
    out
}

struct Stats {
    mean: f64,
    stddev: Option<f64>,
    median: f64,
    min: f64,
    max: f64,
}

impl Stats {
    /// hyperfine's definitions: sample standard deviation (n - 1), the
    /// median of an even count is the mean of the middle two.
    fn of(times: &[f64]) -> Option<Stats> {
        if times.is_empty() {
            return None;
        }
        let n = times.len();
        let mut t = times.to_vec();
        t.sort_by(f64::total_cmp);
        let mean = t.iter().sum::<f64>() / n as f64;
        let stddev = (n > 1).then(|| (t.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt());
        let median = if n % 2 == 1 { t[n / 2] } else { (t[n / 2 - 1] + t[n / 2]) / 2.0 };
        Some(Stats { mean, stddev, median, min: t[0], max: t[n - 1] })
    }
}

/// Finds `group/name` across groups.
pub fn find<'a>(groups: &'a [Group<'_>], key: &str) -> Option<&'a Bench> {
    let (g, name) = key.split_once('/')?;
    groups.iter().find(|x| x.meta.id == g)?.get(name)
}

/// A duration for people: 3 significant digits, ms below 1 s.
pub fn fmt_time(secs: f64) -> String {
    let ms = secs * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 100.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else if secs < 10.0 {
        format!("{secs:.2} s")
    } else {
        format!("{secs:.1} s")
    }
}

/// `peer / baseline`, as "12.3×" (or "0.52×" when the peer is faster).
pub fn fmt_ratio(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}×")
    } else if r >= 10.0 {
        format!("{r:.1}×")
    } else {
        format!("{r:.2}×")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_ratios_read_well() {
        assert_eq!(fmt_time(0.004_567), "4.57 ms");
        assert_eq!(fmt_time(0.045_67), "45.7 ms");
        assert_eq!(fmt_time(0.456_7), "457 ms");
        assert_eq!(fmt_time(8.891), "8.89 s");
        assert_eq!(fmt_time(12.34), "12.3 s");
        assert_eq!(fmt_ratio(123.4), "123×");
        assert_eq!(fmt_ratio(12.34), "12.3×");
        assert_eq!(fmt_ratio(0.5), "0.50×");
    }

    #[test]
    fn rounds_of_one_command_are_pooled() {
        let b = |cmd: &str, times: &[f64]| Bench {
            command: cmd.into(),
            mean: 0.0,
            stddev: None,
            median: 0.0,
            min: 0.0,
            max: 0.0,
            times: times.to_vec(),
        };
        let m = merge(vec![b("a", &[1.0, 3.0]), b("b", &[5.0]), b("a", &[2.0, 10.0])]);
        assert_eq!(m.iter().map(|x| x.command.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        let a = &m[0];
        assert_eq!(a.times.len(), 4);
        assert_eq!((a.min, a.max, a.median, a.mean), (1.0, 10.0, 2.5, 4.0));
        assert!((a.stddev.unwrap() - (50.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(m[1].stddev, None);
    }

    #[test]
    fn hyperfine_json_parses_with_a_single_run() {
        let f: HyperfineFile = serde_json::from_str(
            r#"{"results":[{"command":"x","mean":0.1,"stddev":null,"median":0.1,"user":0.0,"system":0.0,
            "min":0.1,"max":0.1,"times":[0.1],"exit_codes":[0]}]}"#,
        )
        .unwrap();
        assert_eq!(f.results[0].stddev, None);
    }
}
