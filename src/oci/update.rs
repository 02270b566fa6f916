//! `update [--resources FILE|-] [flags] ID`: new limits for a live
//! container's cgroup, what `docker update` and the CRI's
//! UpdateContainerResources send. The resources are a runtime-spec
//! `LinuxResources` object (read from FILE, or stdin for `-`); the flags
//! override its fields, as runc's do. The values go through the same
//! validation as config.json's and are written by the same cgroup code, so
//! an update can set nothing `create` would refuse.

use super::OciError;
use super::spec::RawResources;
use super::state::Store;
use clap::Args;
use std::io::Read;

/// A resources document larger than this is refused (a real one is < 4 KiB).
const MAX_RESOURCES_BYTES: u64 = 1 << 20;

#[derive(Args, Debug, Clone)]
pub struct UpdateArgs {
    /// A LinuxResources JSON file, or - for stdin.
    #[arg(long, short = 'r')]
    pub resources: Option<String>,
    /// Memory limit in bytes (-1: none).
    #[arg(long, short = 'm')]
    pub memory: Option<i64>,
    /// Memory plus swap, in bytes (-1: unlimited swap).
    #[arg(long)]
    pub memory_swap: Option<i64>,
    #[arg(long)]
    pub memory_reservation: Option<i64>,
    /// Refused when non-zero: Linux 6.x has no kernel memory limit.
    #[arg(long)]
    pub kernel_memory: Option<i64>,
    #[arg(long)]
    pub kernel_memory_tcp: Option<i64>,
    #[arg(long)]
    pub cpu_shares: Option<u64>,
    #[arg(long)]
    pub cpu_quota: Option<i64>,
    #[arg(long)]
    pub cpu_period: Option<u64>,
    #[arg(long)]
    pub cpu_rt_period: Option<u64>,
    #[arg(long)]
    pub cpu_rt_runtime: Option<i64>,
    #[arg(long)]
    pub cpuset_cpus: Option<String>,
    #[arg(long)]
    pub cpuset_mems: Option<String>,
    #[arg(long)]
    pub pids_limit: Option<i64>,
    #[arg(long)]
    pub blkio_weight: Option<u16>,
    pub id: String,
}

/// The resources document as the flags and `--resources` give it.
fn document(a: &UpdateArgs) -> Result<serde_json::Value, OciError> {
    let mut doc = match a.resources.as_deref() {
        None => serde_json::json!({}),
        Some(src) => {
            let mut text = Vec::new();
            let what = if src == "-" { "stdin".to_string() } else { src.to_string() };
            let read = if src == "-" {
                std::io::stdin().take(MAX_RESOURCES_BYTES + 1).read_to_end(&mut text)
            } else {
                std::fs::File::open(src).and_then(|f| f.take(MAX_RESOURCES_BYTES + 1).read_to_end(&mut text))
            };
            read.map_err(|e| OciError::io(format!("reading --resources {what}"), e))?;
            if text.len() as u64 > MAX_RESOURCES_BYTES {
                return Err(OciError::Refused(format!("--resources {what}: larger than {MAX_RESOURCES_BYTES} bytes")));
            }
            serde_json::from_slice(&text)
                .map_err(|e| OciError::Refused(format!("--resources {what}: not a LinuxResources JSON object: {e}")))?
        }
    };
    if !doc.is_object() {
        return Err(OciError::Refused("--resources: not a JSON object".into()));
    }
    let mut set = |section: &str, key: &str, v: serde_json::Value| {
        if !doc[section].is_object() {
            doc[section] = serde_json::json!({});
        }
        doc[section][key] = v;
    };
    if let Some(v) = a.memory {
        set("memory", "limit", serde_json::json!(v));
    }
    if let Some(v) = a.memory_swap {
        set("memory", "swap", serde_json::json!(v));
    }
    if let Some(v) = a.memory_reservation {
        set("memory", "reservation", serde_json::json!(v));
    }
    if let Some(v) = a.kernel_memory {
        set("memory", "kernel", serde_json::json!(v));
    }
    if let Some(v) = a.kernel_memory_tcp {
        set("memory", "kernelTCP", serde_json::json!(v));
    }
    if let Some(v) = a.cpu_shares {
        set("cpu", "shares", serde_json::json!(v));
    }
    if let Some(v) = a.cpu_quota {
        set("cpu", "quota", serde_json::json!(v));
    }
    if let Some(v) = a.cpu_period {
        set("cpu", "period", serde_json::json!(v));
    }
    if let Some(v) = a.cpu_rt_period {
        set("cpu", "realtimePeriod", serde_json::json!(v));
    }
    if let Some(v) = a.cpu_rt_runtime {
        set("cpu", "realtimeRuntime", serde_json::json!(v));
    }
    if let Some(v) = &a.cpuset_cpus {
        set("cpu", "cpus", serde_json::json!(v));
    }
    if let Some(v) = &a.cpuset_mems {
        set("cpu", "mems", serde_json::json!(v));
    }
    if let Some(v) = a.pids_limit {
        set("pids", "limit", serde_json::json!(v));
    }
    if let Some(v) = a.blkio_weight {
        set("blockIO", "weight", serde_json::json!(v));
    }
    Ok(doc)
}

pub fn update(store: &Store, a: &UpdateArgs) -> Result<(), OciError> {
    let doc = document(a)?;
    let raw: RawResources = serde_json::from_value(doc)
        .map_err(|e| OciError::Refused(format!("--resources: not a LinuxResources object: {e}")))?;
    let mut resources = super::config::resources(raw)?;
    // containerd's CRI sends the spec's device rules with every
    // UpdateContainerResources (crictl update, in-place resize); runc
    // 1.1's update takes none of them and applies the rest. Refusing
    // would break every such update; the rules stay what create set.
    if !resources.devices.is_empty() {
        super::log::debug("update: device rules are not changed on a running container (as runc); ignored");
        resources.devices.clear();
    }
    let _lock = store.lock(&a.id)?;
    let record = store.load(&a.id)?;
    super::cgroups::apply(&record.cgroups, &resources)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: UpdateArgs,
    }

    /// Flags override the document's fields and fill the sections it lacks,
    /// as runc's do; the result reads as the spec's LinuxResources.
    #[test]
    fn flags_override_the_resources_document() {
        let dir = std::env::temp_dir().join(format!("husk-update-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("r.json");
        std::fs::write(&file, r#"{"memory":{"limit":1000,"swap":8192},"cpu":{"shares":512}}"#).unwrap();
        let cli = Cli::try_parse_from([
            "update",
            "--resources",
            file.to_str().unwrap(),
            "--memory",
            "4096",
            "--pids-limit",
            "7",
            "c1",
        ])
        .unwrap();
        let doc = document(&cli.a).unwrap();
        assert_eq!(doc["memory"]["limit"], 4096);
        assert_eq!(doc["memory"]["swap"], 8192);
        assert_eq!(doc["cpu"]["shares"], 512);
        assert_eq!(doc["pids"]["limit"], 7);
        let raw: RawResources = serde_json::from_value(doc).unwrap();
        let res = super::super::config::resources(raw).unwrap();
        assert_eq!(res.pids_limit, Some(7));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn kernel_memory_is_refused_not_dropped() {
        let cli = Cli::try_parse_from(["update", "--kernel-memory", "1048576", "c1"]).unwrap();
        let raw: RawResources = serde_json::from_value(document(&cli.a).unwrap()).unwrap();
        assert!(super::super::config::resources(raw).is_err());
    }
}
