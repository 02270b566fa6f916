//! `husk spec [--rootless] [--bundle DIR]`: writes the starting
//! config.json of a bundle, the one `runc spec` writes (a shell on a
//! terminal, the usual /proc /dev /sys mounts, runc's masked and read-only
//! paths, three capabilities), so a bundle made for one runs in the other.
//! `ociVersion` is the spec version husk speaks.
//!
//! `--rootless` makes the changes runc makes for an unprivileged caller:
//! a user namespace mapping root to the caller's own uid and gid, no new
//! network namespace (a rootless caller cannot wire one), /sys bound from
//! the host instead of mounted, /dev/mqueue bound, no devpts gid and no
//! device cgroup rules (an unprivileged caller cannot write them).

use super::version::SPEC_VERSION;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// runc's wording, so a script written for runc reads it the same.
    #[error("File {0} exists. Remove it first")]
    Exists(PathBuf),
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

const CAPS: &[&str] = &["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"];

const MASKED: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/sys/firmware",
    "/proc/scsi",
];

const READONLY: &[&str] = &["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

/// The template config.json (see the module doc).
pub fn default_spec(rootless: bool) -> Value {
    let devpts: &[&str] = if rootless {
        &["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]
    } else {
        &["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]
    };
    let mqueue = if rootless {
        json!({"destination": "/dev/mqueue", "type": "bind", "source": "/dev/mqueue", "options": ["rbind", "nosuid", "noexec", "nodev"]})
    } else {
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]})
    };
    let sys = if rootless {
        json!({"destination": "/sys", "type": "none", "source": "/sys", "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]})
    } else {
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]})
    };
    let mut spec = json!({
        "ociVersion": SPEC_VERSION,
        "process": {
            "terminal": true,
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"],
            "cwd": "/",
            "capabilities": {"bounding": CAPS, "effective": CAPS, "permitted": CAPS, "ambient": CAPS},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "husk",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": devpts},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            mqueue,
            sys,
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]}
        ],
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "maskedPaths": MASKED,
            "readonlyPaths": READONLY
        }
    });
    if rootless {
        let linux = &mut spec["linux"];
        linux["namespaces"] =
            json!([{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "user"}]);
        let (uid, gid) = (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
        linux["uidMappings"] = json!([{"containerID": 0, "hostID": uid, "size": 1}]);
        linux["gidMappings"] = json!([{"containerID": 0, "hostID": gid, "size": 1}]);
    } else {
        spec["linux"]["resources"] = json!({"devices": [{"allow": false, "access": "rwm"}]});
    }
    spec
}

/// Writes `bundle/config.json` (mode 0666 less the umask, as runc), never
/// over an existing one.
pub fn write_spec(bundle: &Path, rootless: bool) -> Result<PathBuf, TemplateError> {
    let path = bundle.join("config.json");
    let write_err = |source| TemplateError::Write { path: path.clone(), source };
    let mut file = match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(TemplateError::Exists(path)),
        Err(e) => return Err(write_err(e)),
    };
    let mut text = serde_json::to_vec_pretty(&default_spec(rootless)).expect("a JSON value serializes");
    text.push(b'\n');
    file.write_all(&text).map_err(write_err)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rootless template asks for nothing an unprivileged caller
    /// cannot have: a user namespace mapping root to it, no netns, no
    /// device rules, no sysfs mount.
    #[test]
    fn rootless_template_maps_root_to_the_caller_and_drops_what_it_cannot_have() {
        let s = default_spec(true);
        let ns: Vec<&str> =
            s["linux"]["namespaces"].as_array().unwrap().iter().map(|n| n["type"].as_str().unwrap()).collect();
        assert!(ns.contains(&"user") && !ns.contains(&"network"), "{ns:?}");
        assert_eq!(s["linux"]["uidMappings"][0]["hostID"], json!(nix::unistd::geteuid().as_raw()));
        assert!(s["linux"].get("resources").is_none());
        let sys = s["mounts"].as_array().unwrap().iter().find(|m| m["destination"] == "/sys").unwrap();
        assert_eq!(sys["source"], "/sys");
        let root = default_spec(false);
        assert!(root["linux"].get("uidMappings").is_none());
        assert_eq!(root["linux"]["resources"]["devices"][0]["allow"], json!(false));
    }

    #[test]
    fn write_spec_never_overwrites() {
        let dir = std::env::temp_dir().join(format!("husk-spec-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(dir.join("config.json"));
        write_spec(&dir, false).unwrap();
        let err = write_spec(&dir, false).unwrap_err();
        assert!(err.to_string().contains("exists. Remove it first"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
