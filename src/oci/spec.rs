//! The runtime-spec subset husk reads from config.json (and `exec
//! --process`), as serde reads it: unknown keys are ignored, as runc does;
//! `config.rs` decides what is refused.

use super::state::Hook;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct RawSpec {
    pub oci_version: String,
    pub process: Option<RawProcess>,
    pub root: Option<RawRoot>,
    pub hostname: Option<String>,
    pub domainname: Option<String>,
    pub mounts: Vec<RawMount>,
    pub hooks: Option<RawHooks>,
    pub annotations: BTreeMap<String, String>,
    pub linux: Option<RawLinux>,
}

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(rename_all = "camelCase", default)]
pub struct RawProcess {
    pub terminal: bool,
    pub console_size: Option<serde_json::Value>,
    pub user: RawUser,
    pub args: Vec<String>,
    pub command_line: Option<String>,
    pub env: Vec<String>,
    pub cwd: String,
    pub capabilities: Option<RawCaps>,
    pub rlimits: Vec<RawRlimit>,
    pub no_new_privileges: bool,
    pub apparmor_profile: Option<String>,
    pub oom_score_adj: Option<i32>,
    pub selinux_label: Option<String>,
    pub scheduler: Option<serde_json::Value>,
    pub io_priority: Option<serde_json::Value>,
}

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(rename_all = "camelCase", default)]
pub struct RawUser {
    pub uid: u32,
    pub gid: u32,
    pub umask: Option<u32>,
    pub additional_gids: Vec<u32>,
    pub username: Option<String>,
}

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(default)]
pub struct RawCaps {
    pub bounding: Vec<String>,
    pub effective: Vec<String>,
    pub inheritable: Vec<String>,
    pub permitted: Vec<String>,
    pub ambient: Vec<String>,
}

#[derive(Deserialize, Debug, Clone)]
pub struct RawRlimit {
    #[serde(rename = "type")]
    pub kind: String,
    pub hard: u64,
    pub soft: u64,
}

#[derive(Deserialize, Debug, Default)]
#[serde(default)]
pub struct RawRoot {
    pub path: PathBuf,
    pub readonly: bool,
}

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(rename_all = "camelCase", default)]
pub struct RawMount {
    pub destination: String,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub source: Option<String>,
    pub options: Vec<String>,
    pub uid_mappings: Option<serde_json::Value>,
    pub gid_mappings: Option<serde_json::Value>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct RawHooks {
    pub prestart: Vec<Hook>,
    pub create_runtime: Vec<Hook>,
    pub create_container: Vec<Hook>,
    pub start_container: Vec<Hook>,
    pub poststart: Vec<Hook>,
    pub poststop: Vec<Hook>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct RawLinux {
    pub namespaces: Vec<RawNamespace>,
    pub uid_mappings: Vec<RawIdMap>,
    pub gid_mappings: Vec<RawIdMap>,
    pub devices: Vec<RawDevice>,
    pub cgroups_path: Option<String>,
    pub resources: Option<RawResources>,
    pub sysctl: BTreeMap<String, String>,
    pub seccomp: Option<serde_json::Value>,
    pub rootfs_propagation: Option<String>,
    pub masked_paths: Vec<String>,
    pub readonly_paths: Vec<String>,
    pub mount_label: Option<String>,
    pub personality: Option<RawPersonality>,
    pub intel_rdt: Option<serde_json::Value>,
    pub time_offsets: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Deserialize, Debug, Clone)]
pub struct RawNamespace {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub path: Option<PathBuf>,
}

#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(rename_all = "camelCase")]
pub struct RawIdMap {
    #[serde(rename = "containerID")]
    pub container_id: u32,
    #[serde(rename = "hostID")]
    pub host_id: u32,
    pub size: u32,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase")]
pub struct RawDevice {
    #[serde(rename = "type")]
    pub kind: String,
    pub path: String,
    #[serde(default)]
    pub major: i64,
    #[serde(default)]
    pub minor: i64,
    pub file_mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

#[derive(Deserialize, Debug)]
pub struct RawPersonality {
    pub domain: String,
    #[serde(default)]
    pub flags: Vec<String>,
}

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(rename_all = "camelCase", default)]
pub struct RawResources {
    pub devices: Vec<RawDeviceRule>,
    pub memory: Option<RawMemory>,
    pub cpu: Option<RawCpu>,
    pub pids: Option<RawPids>,
    #[serde(rename = "blockIO")]
    pub block_io: Option<RawBlockIo>,
    pub hugepage_limits: Vec<RawHugepage>,
    pub network: Option<serde_json::Value>,
    pub rdma: Option<serde_json::Value>,
    pub unified: BTreeMap<String, String>,
}

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(default)]
pub struct RawDeviceRule {
    pub allow: bool,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub major: Option<i64>,
    pub minor: Option<i64>,
    pub access: Option<String>,
}

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(rename_all = "camelCase", default)]
pub struct RawMemory {
    pub limit: Option<i64>,
    pub reservation: Option<i64>,
    pub swap: Option<i64>,
    pub kernel: Option<i64>,
    #[serde(rename = "kernelTCP")]
    pub kernel_tcp: Option<i64>,
    pub swappiness: Option<u64>,
    #[serde(rename = "disableOOMKiller")]
    pub disable_oom_killer: Option<bool>,
}

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(rename_all = "camelCase", default)]
pub struct RawCpu {
    pub shares: Option<u64>,
    pub quota: Option<i64>,
    pub period: Option<u64>,
    pub realtime_runtime: Option<i64>,
    pub realtime_period: Option<u64>,
    pub cpus: Option<String>,
    pub mems: Option<String>,
}

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(default)]
pub struct RawPids {
    pub limit: i64,
}

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(rename_all = "camelCase", default)]
pub struct RawBlockIo {
    pub weight: Option<u16>,
    pub leaf_weight: Option<u16>,
    pub weight_device: Vec<serde_json::Value>,
    pub throttle_read_bps_device: Vec<serde_json::Value>,
    pub throttle_write_bps_device: Vec<serde_json::Value>,
    #[serde(rename = "throttleReadIOPSDevice")]
    pub throttle_read_iops_device: Vec<serde_json::Value>,
    #[serde(rename = "throttleWriteIOPSDevice")]
    pub throttle_write_iops_device: Vec<serde_json::Value>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase")]
pub struct RawHugepage {
    pub page_size: String,
    pub limit: u64,
}
