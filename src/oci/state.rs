//! The runtime's state store (`--root DIR`), one directory per container:
//!
//! ```text
//! <root>/                     0700; default /run/husk/oci (root), $XDG_RUNTIME_DIR/husk/oci
//! <root>/<id>/                made by `create` (mkdir: a second create of the id fails)
//! <root>/<id>/state.json      the Record below, replaced atomically
//! <root>/<id>/exec.fifo       while "created": init blocks opening it for write
//!                             until `start` opens it for read (then start removes it)
//! <root>/@cgroup-parents      (not root; as root /run/husk/oci-cgroup-parents, for
//!                             every root) JSON list of parent cgroup directories husk
//!                             made (e.g. /docker), removed by the last delete (or
//!                             `husk gc`) that finds them empty; '@' is no id's character
//! ```
//!
//! API for the other verbs (pause/resume/ps/update build on it):
//! - `Store::open(root)`, `store.load(id) -> Record` ("container ID does not
//!   exist" when absent), `store.save(&record)`, `store.remove(id)`,
//!   `store.ids()`, `store.lock(id)` (an flock held while a verb changes it);
//! - `record.status(&store)` -> `Status` (creating|created|running|paused|
//!   stopped), computed from the live kernel every time: init's pid *and*
//!   its start time (a recycled pid is not the container), a zombie init is
//!   stopped, a FROZEN freezer is paused, an exec.fifo still present is
//!   created;
//! - `record.cgroups`: controller -> absolute cgroup directory (v1: one per
//!   controller, e.g. "memory" -> /sys/fs/cgroup/memory/docker/<id>; v2:
//!   "" -> /sys/fs/cgroup/<path>), what `ps` lists, `pause` freezes and
//!   `update` writes;
//! - `record.oci_state(status)` -> runc's `state` JSON (also the hooks' stdin).

use super::OciError;
use crate::procref::ProcRef;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const OCI_VERSION: &str = "1.0.2";

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state directory {path}: {source}; give a writable --root")]
    Root { path: PathBuf, source: std::io::Error },
    #[error("container state {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("container state {path} is damaged ({source}); `delete --force` removes it")]
    Damaged { path: PathBuf, source: serde_json::Error },
}

/// What runc's `state` calls status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Creating,
    Created,
    Running,
    Paused,
    Stopped,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Creating => "creating",
            Status::Created => "created",
            Status::Running => "running",
            Status::Paused => "paused",
            Status::Stopped => "stopped",
        }
    }
}

/// A hook as the spec gives it (kept for poststart/poststop, which run
/// after `create` returned).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Hook {
    pub path: PathBuf,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
}

/// One container's record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    /// Host pid of init (0 while creating) and its start time.
    pub init: Option<ProcRef>,
    pub bundle: PathBuf,
    /// root.path, absolute.
    pub rootfs: PathBuf,
    /// RFC 3339 with nanoseconds.
    pub created: String,
    pub owner: String,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// controller -> cgroup directory (see the module doc).
    #[serde(default)]
    pub cgroups: BTreeMap<String, PathBuf>,
    /// The cgroup directories husk made (removed by delete); a joined,
    /// pre-existing one is left.
    #[serde(default)]
    pub made_cgroups: Vec<PathBuf>,
    #[serde(default)]
    pub poststart: Vec<Hook>,
    #[serde(default)]
    pub poststop: Vec<Hook>,
    /// The spec's `process.noNewPrivileges`, `user`, capabilities and the
    /// compiled seccomp: what an `exec` without its own inherits.
    #[serde(default)]
    pub exec_defaults: serde_json::Value,
    /// Namespaces the init made or joined: type -> /proc/<pid>/ns path.
    #[serde(default)]
    pub namespaces: Vec<String>,
}

impl Record {
    /// The status right now, from the kernel.
    pub fn status(&self, store: &Store) -> Status {
        let Some(init) = self.init else { return Status::Creating };
        if !init.alive() || zombie(init.pid) {
            return Status::Stopped;
        }
        if self.cgroups.get("freezer").or_else(|| self.cgroups.get("")).is_some_and(|d| frozen(d)) {
            return Status::Paused;
        }
        if store.fifo(&self.id).exists() { Status::Created } else { Status::Running }
    }

    /// runc's state JSON (`husk state`, and the hooks' stdin).
    pub fn oci_state(&self, status: Status) -> serde_json::Value {
        let pid = match status {
            Status::Stopped | Status::Creating => 0,
            _ => self.init.map(|p| p.pid).unwrap_or(0),
        };
        let mut v = serde_json::json!({
            "ociVersion": OCI_VERSION,
            "id": self.id,
            "pid": pid,
            "status": status.name(),
            "bundle": self.bundle,
            "rootfs": self.rootfs,
            "created": self.created,
            "owner": self.owner,
        });
        // runc's `annotations` is omitempty: a shim or client comparing
        // keys sees the same set for a container without annotations.
        if !self.annotations.is_empty() {
            v["annotations"] = serde_json::json!(self.annotations);
        }
        v
    }

    /// The hooks' state: the pid even for a stopped container (poststop
    /// hooks want to know which init it was), status as given.
    pub fn hook_state(&self, status: Status) -> serde_json::Value {
        let mut v = self.oci_state(status);
        v["pid"] = serde_json::json!(self.init.map(|p| p.pid).unwrap_or(0));
        v
    }
}

fn zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with(['Z', 'X'])))
        .unwrap_or(true)
}

fn frozen(dir: &Path) -> bool {
    let v1 = crate::files::read_text(dir.join("freezer.state")).map(|s| s.trim() == "FROZEN");
    let v2 = || crate::files::read_text(dir.join("cgroup.freeze")).map(|s| s.trim() == "1");
    v1.or_else(|_| v2()).unwrap_or(false)
}

/// The store: `--root`.
pub struct Store {
    root: PathBuf,
}

/// An flock on a container's directory, held while a verb changes it.
pub struct Lock(#[allow(dead_code)] nix::fcntl::Flock<std::fs::File>);

impl Store {
    pub fn open(root: Option<PathBuf>) -> Result<Store, OciError> {
        let root = root.unwrap_or_else(default_root);
        std::fs::create_dir_all(&root).map_err(|source| StateError::Root { path: root.clone(), source })?;
        Ok(Store { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    pub fn fifo(&self, id: &str) -> PathBuf {
        self.dir(id).join("exec.fifo")
    }

    fn record_path(&self, id: &str) -> PathBuf {
        self.dir(id).join("state.json")
    }

    /// Makes the container's directory; fails if the id exists.
    pub fn make(&self, id: &str) -> Result<PathBuf, OciError> {
        check_id(id)?;
        let dir = self.dir(id);
        match std::fs::create_dir(&dir) {
            Ok(()) => Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(OciError::Exists(id.to_string())),
            Err(source) => Err(StateError::Io { path: dir, source }.into()),
        }
    }

    pub fn load(&self, id: &str) -> Result<Record, OciError> {
        check_id(id)?;
        let path = self.record_path(id);
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(OciError::NotExist(id.to_string())),
            Err(source) => return Err(StateError::Io { path, source }.into()),
        };
        serde_json::from_slice(&text).map_err(|source| StateError::Damaged { path, source }.into())
    }

    pub fn save(&self, r: &Record) -> Result<(), OciError> {
        let path = self.record_path(&r.id);
        let text = serde_json::to_vec_pretty(r).expect("a record serializes");
        crate::files::write_atomic(&path, &text).map_err(|source| StateError::Io { path, source }.into())
    }

    /// Removes the container's directory (state, fifo).
    pub fn remove(&self, id: &str) -> Result<(), OciError> {
        let dir = self.dir(id);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StateError::Io { path: dir, source }.into()),
        }
    }

    /// Every container id under the root, sorted.
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().join("state.json").exists())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        ids.sort();
        ids
    }

    /// An exclusive flock on the container's directory (blocks).
    pub fn lock(&self, id: &str) -> Result<Lock, OciError> {
        let dir = self.dir(id);
        let f = std::fs::File::open(&dir).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => OciError::NotExist(id.to_string()),
            _ => StateError::Io { path: dir.clone(), source: e }.into(),
        })?;
        let locked = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| OciError::sys(format!("locking {}", dir.display()), e))?;
        Ok(Lock(locked))
    }
}

/// The registry of parent cgroups: who made a shared parent (the first
/// container under /docker) is rarely the last to leave it, so the parent
/// is recorded and removed by whichever delete finds it empty. Cgroups are
/// the host's, not a root's: as root one registry serves every --root
/// (engines with different roots may share a parent); otherwise it lives
/// in the root.
const PARENTS: &str = "@cgroup-parents";
const HOST_PARENTS: &str = "/run/husk/oci-cgroup-parents";

fn parents_registry(root: &Path) -> PathBuf {
    if nix::unistd::geteuid().is_root() { PathBuf::from(HOST_PARENTS) } else { root.join(PARENTS) }
}

impl Store {
    /// Opens an existing store without creating it (`husk gc`).
    pub fn existing(root: &Path) -> Option<Store> {
        root.is_dir().then(|| Store { root: root.to_path_buf() })
    }

    fn with_parents<T>(&self, f: impl FnOnce(&mut Vec<PathBuf>) -> T) -> Result<T, OciError> {
        use std::io::{Read, Seek, Write};
        let path = parents_registry(&self.root);
        let io = |source| StateError::Io { path: path.clone(), source };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path);
        let file = file.map_err(io)?;
        let mut locked = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| OciError::sys(format!("locking {}", path.display()), e))?;
        let mut text = String::new();
        locked.read_to_string(&mut text).map_err(io)?;
        // A damaged list is rebuilt: it only ever names directories to try.
        let mut list: Vec<PathBuf> = serde_json::from_str(&text).unwrap_or_default();
        let before = list.clone();
        let out = f(&mut list);
        if list != before {
            let text = serde_json::to_vec(&list).expect("paths serialize");
            locked.set_len(0).map_err(io)?;
            locked.rewind().map_err(io)?;
            locked.write_all(&text).map_err(io)?;
        }
        Ok(out)
    }

    /// Records parent cgroup directories `create` made.
    pub fn note_parents(&self, dirs: &[PathBuf]) -> Result<(), OciError> {
        if dirs.is_empty() {
            return Ok(());
        }
        self.with_parents(|list| {
            for d in dirs {
                if !list.contains(d) {
                    list.push(d.clone());
                }
            }
        })
    }

    /// Removes every recorded parent that is empty now (deepest first; a
    /// parent holding another container's cgroup stays) and forgets the
    /// ones gone. Returns the directories removed.
    pub fn sweep_parents(&self) -> Result<Vec<PathBuf>, OciError> {
        if !parents_registry(&self.root).exists() {
            return Ok(Vec::new());
        }
        self.with_parents(|list| {
            list.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
            let mut removed = Vec::new();
            list.retain(|d| match std::fs::remove_dir(d) {
                Ok(()) => {
                    removed.push(d.clone());
                    false
                }
                Err(e) => e.kind() != std::io::ErrorKind::NotFound,
            });
            removed
        })
    }
}

/// runc refuses ids that could name another path.
pub fn check_id(id: &str) -> Result<(), OciError> {
    let ok = !id.is_empty()
        && id != "."
        && id != ".."
        && id.len() <= 1024
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '+'));
    if ok { Ok(()) } else { Err(OciError::BadId(id.to_string())) }
}

/// The runtime's --root when none is given.
pub fn default_root() -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/run/husk/oci");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) => PathBuf::from(d).join("husk/oci"),
        None => std::env::temp_dir().join(format!("husk-oci-{}", nix::unistd::geteuid())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_name_another_path_are_refused() {
        for bad in ["", ".", "..", "a/b", "../x", "a b"] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
        for good in ["abc", "a.b-c_d", "0123456789abcdef"] {
            assert!(check_id(good).is_ok());
        }
    }

    #[test]
    fn a_recycled_pid_is_stopped_and_state_json_has_runcs_fields() {
        let tmp = std::env::temp_dir().join(format!("husk-oci-state-{}", std::process::id()));
        let store = Store::open(Some(tmp.clone())).unwrap();
        store.make("c1").unwrap();
        let me = ProcRef::of(std::process::id() as i32).unwrap();
        let mut r = Record {
            id: "c1".into(),
            init: Some(ProcRef { start_time: me.start_time + 1, ..me }),
            bundle: "/b".into(),
            rootfs: "/b/rootfs".into(),
            created: super::super::log::rfc3339_now(),
            owner: "".into(),
            annotations: BTreeMap::new(),
            cgroups: BTreeMap::new(),
            made_cgroups: vec![],
            poststart: vec![],
            poststop: vec![],
            exec_defaults: serde_json::Value::Null,
            namespaces: vec![],
        };
        store.save(&r).unwrap();
        assert_eq!(store.load("c1").unwrap().status(&store), Status::Stopped);
        r.init = Some(me);
        assert_eq!(r.status(&store), Status::Running);
        let s = r.oci_state(Status::Running);
        for k in ["ociVersion", "id", "pid", "status", "bundle", "rootfs", "created", "owner"] {
            assert!(s.get(k).is_some(), "{k}");
        }
        assert!(s.get("annotations").is_none(), "runc omits empty annotations");
        r.annotations.insert("a".into(), "b".into());
        assert_eq!(r.oci_state(Status::Running)["annotations"]["a"], "b");
        assert!(matches!(store.load("nope"), Err(OciError::NotExist(_))));
        assert_eq!(store.ids(), vec!["c1".to_string()]);
        std::fs::remove_dir_all(tmp).unwrap();
    }
}
