//! A sandbox on disk, under `<state dir>/sandboxes/`:
//!
//! ```text
//! <id>/state.json   the record; only the sandbox's supervisor writes it after
//!                   creation, always whole (temp file + rename)
//! <id>/lock         flock'ed (exclusive) by the supervisor for its whole life:
//!                   whoever can take it knows the supervisor is gone (immune
//!                   to pid reuse, and released by the kernel on SIGKILL)
//! <id>/sock         the supervisor's socket (exec, renew, rm)
//! <id>/seccomp.bpf  the sandbox's compiled filter, loaded by every exec
//! .<id>.new/        a sandbox being created (renamed to <id> once locked)
//! names/<name>      the id, one file per name, created with O_EXCL: names
//!                   are unique per state dir
//! ```

use super::SandboxError;
use crate::cgroup::nested::Tree;
use crate::cgroup::report::AppliedLimits;
use crate::isolation::Isolation;
use crate::plan::ImageDefaults;
pub use crate::procref::ProcRef;
use crate::spec::Spec;
use crate::userns::IdMap;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Where a sandbox is in its life.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Creating,
    Ready,
    /// At least one exec runs.
    Executing,
    /// Frozen by `husk pause` until `husk resume` (its processes and
    /// memory stay; no CPU; its lease does not run out).
    Paused,
    /// Being removed (the record goes with it).
    Destroyed,
    /// Setup failed, or the init died on its own; being removed.
    Failed,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Creating => "creating",
            State::Ready => "ready",
            State::Executing => "executing",
            State::Paused => "paused",
            State::Destroyed => "destroyed",
            State::Failed => "failed",
        }
    }
}

/// How the sandbox's seccomp program was made (the program itself is
/// `seccomp.bpf` beside the record).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SeccompRecord {
    pub name: String,
    pub shipped: bool,
    pub sha256: String,
    /// Explain mode (`--seccomp-report`).
    pub report: bool,
}

/// Everything known about one sandbox.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Record {
    pub id: String,
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub state: State,
    pub backend: String,
    /// Unix time, milliseconds.
    pub created_ms: u64,
    /// The lease: every exec (and `husk renew`) moves `expires_ms` to now +
    /// `ttl_ms`; at `expires_ms` the supervisor destroys the sandbox.
    pub ttl_ms: u64,
    pub expires_ms: u64,
    /// `create --max-lifetime`: the sandbox ends at `lifetime_ends_ms`
    /// (creation + the maximum) whatever its lease; renewals never move
    /// `expires_ms` past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lifetime_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime_ends_ms: Option<u64>,
    /// `create --concurrent`: execs may run in parallel.
    pub concurrent: bool,
    /// Execs started so far, and running now.
    pub execs: u64,
    pub active_execs: u32,
    pub supervisor: Option<ProcRef>,
    /// The sandbox's init, by its host pid.
    pub init: Option<ProcRef>,
    /// Namespace kind -> inode (what /proc/<pid>/ns/<kind> shows).
    pub namespaces: BTreeMap<String, u64>,
    pub cgroup: Option<Tree>,
    /// The verdict's `limits` and `isolation`, as created (`limits` is
    /// null until the supervisor made the sandbox's cgroup, or knew it
    /// would have none).
    pub limits: Option<AppliedLimits>,
    pub isolation: Isolation,
    /// What `husk create` was asked for, and what execs build on: the image's
    /// defaults, the root's passwd/group (for --user names and HOME), the id
    /// map, the workdir.
    pub spec: Spec,
    pub image: ImageDefaults,
    pub passwd: Option<String>,
    pub group: Option<String>,
    pub ids: IdMap,
    pub last_cap: u32,
    pub workdir: String,
    pub seccomp: Option<SeccompRecord>,
    /// Why the sandbox failed, when it did.
    pub error: Option<String>,
    /// The newest sandbox-level events (`events::KEEP` at most).
    #[serde(default)]
    pub events: Vec<super::events::Event>,
    /// `--network allow=`: the egress proxy's accounting, as its supervisor
    /// last said (`husk inspect`; never written to state.json).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::net::account::NetworkReport>,
    /// `--publish`: the host addresses bound, and the ports inside.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub published: Vec<crate::net::publish::Published>,
    /// `create --secret-env/--secret-file`: the names only; the values live
    /// in the supervisor's memory (`Request::Secrets`), never on disk.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_names: Vec<String>,
    /// Paused by a checkpoint (runsc): where its memory image is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointRecord>,
}

/// A paused sandbox's checkpoint image (`husk pause` under runsc).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct CheckpointRecord {
    /// The directory holding the image (inside the sandbox's state dir).
    pub path: PathBuf,
    /// The image's size.
    pub bytes: u64,
    /// When it was taken (ms since the epoch).
    pub taken_ms: u64,
    /// How long the checkpoint took.
    pub took_ms: u64,
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Ids are `ids::new_id`'s 12 lowercase hex digits.
pub fn is_id(s: &str) -> bool {
    crate::cgroup::gc::is_run_id(s)
}

/// Names: 1-63 of [A-Za-z0-9_.-], starting with a letter or digit, and not
/// an id (so an id never means two sandboxes).
pub fn check_name(name: &str) -> Result<(), SandboxError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        && !is_id(name);
    if ok {
        Ok(())
    } else {
        Err(SandboxError::Usage(format!(
            "invalid --name {name:?}: use 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit (and not 12 hex digits, which look like an id)"
        )))
    }
}

/// `K=V` label.
pub fn parse_label(s: &str) -> Result<(String, String), SandboxError> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(SandboxError::Usage(format!("invalid --label {s:?}: expected KEY=VALUE, e.g. task=build-42"))),
    }
}

/// Whether a record carries every label of `want`.
pub fn matches(rec: &Record, want: &[(String, String)]) -> bool {
    want.iter().all(|(k, v)| rec.labels.get(k) == Some(v))
}

/// The `sandboxes` directory of one state dir.
pub struct Store {
    pub root: PathBuf,
}

/// A file of the state that could not be made, read or written; its
/// errno is kept for the verdict.
pub(crate) fn io_err(what: &'static str, path: &Path, source: std::io::Error) -> SandboxError {
    SandboxError::StateIo { what, path: path.to_path_buf(), source }
}

fn json_err(what: &'static str, path: &Path, source: serde_json::Error) -> SandboxError {
    SandboxError::StateJson { what, path: path.to_path_buf(), source }
}

impl Store {
    /// Opens (creating) `<state>/sandboxes`, private to the caller.
    pub fn open(state: &Path) -> Result<Store, SandboxError> {
        crate::paths::ensure_private_dir("state dir", state)?;
        let root = state.join("sandboxes");
        for d in [root.clone(), root.join("names")] {
            match std::fs::DirBuilder::new().mode(0o700).create(&d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err("creating", &d, e)),
            }
        }
        Ok(Store { root })
    }

    pub fn dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    /// husk's state directory, which holds this store (`<state>/sandboxes`)
    /// and what backends keep of their own (runsc's state).
    pub fn state_dir(&self) -> PathBuf {
        self.root.parent().map(Path::to_path_buf).unwrap_or_else(|| self.root.clone())
    }

    /// Every sandbox id with a directory (created ones; not `.new` ones).
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(&self.root)
            .map(|it| it.flatten().filter_map(|e| e.file_name().to_str().filter(|n| is_id(n)).map(str::to_string)))
            .map(|it| it.collect())
            .unwrap_or_default();
        ids.sort();
        ids
    }

    /// `ID`, `NAME` or a unique id prefix (3+ digits) -> id.
    pub fn resolve(&self, what: &str) -> Result<String, SandboxError> {
        let unknown = || SandboxError::Unknown { what: what.to_string(), state: self.root.clone() };
        if is_id(what) {
            return if self.dir(what).is_dir() { Ok(what.to_string()) } else { Err(unknown()) };
        }
        if check_name(what).is_ok()
            && let Ok(id) = std::fs::read_to_string(self.root.join("names").join(what))
            && is_id(id.trim())
            && self.dir(id.trim()).is_dir()
        {
            return Ok(id.trim().to_string());
        }
        if what.len() >= 3 && what.bytes().all(|b| b.is_ascii_hexdigit()) {
            let hits: Vec<String> = self.ids().into_iter().filter(|id| id.starts_with(what)).collect();
            match hits.len() {
                1 => return Ok(hits[0].clone()),
                0 => {}
                _ => {
                    return Err(SandboxError::Usage(format!(
                        "{what:?} is the start of {} sandbox ids ({}); give more digits",
                        hits.len(),
                        hits.join(", ")
                    )));
                }
            }
        }
        Err(unknown())
    }

    pub fn read(&self, id: &str) -> Result<Record, SandboxError> {
        read_record(&self.dir(id))
    }

    /// Reserves `name` for `id` (fails if another sandbox has it).
    pub fn reserve_name(&self, name: &str, id: &str) -> Result<(), SandboxError> {
        let path = self.root.join("names").join(name);
        let f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path);
        match f {
            Ok(mut f) => f.write_all(id.as_bytes()).map_err(|e| io_err("writing", &path, e)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let owner = std::fs::read_to_string(&path).unwrap_or_default();
                Err(SandboxError::NameTaken { name: name.to_string(), id: owner.trim().to_string() })
            }
            Err(e) => Err(io_err("creating", &path, e)),
        }
    }

    /// Frees `name` if it still points at `id`.
    pub fn release_name(&self, name: &str, id: &str) {
        let path = self.root.join("names").join(name);
        if std::fs::read_to_string(&path).is_ok_and(|owner| owner.trim() == id) {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Names whose sandbox is gone.
    pub fn stale_names(&self) -> Vec<String> {
        let names = self.root.join("names");
        let Ok(it) = std::fs::read_dir(&names) else { return Vec::new() };
        it.flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.to_string();
                let id = std::fs::read_to_string(e.path()).ok()?;
                (!self.dir(id.trim()).exists()).then_some(name)
            })
            .collect()
    }
}

pub fn read_record(dir: &Path) -> Result<Record, SandboxError> {
    let path = dir.join("state.json");
    let bytes = std::fs::read(&path).map_err(|e| io_err("reading", &path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| json_err("parsing", &path, e))
}

/// Writes the record whole: a temp file beside it, then rename, so a reader
/// never sees half of one.
pub fn write_record(dir: &Path, rec: &Record) -> Result<(), SandboxError> {
    let tmp = dir.join(format!(".state.json.{}", std::process::id()));
    let data = serde_json::to_vec_pretty(rec).map_err(|e| json_err("encoding", &tmp, e))?;
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        f.write_all(&data)?;
        std::fs::rename(&tmp, dir.join("state.json"))
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_err("writing", &dir.join("state.json"), e)
    })
}

/// The supervisor's lifetime lock, `Ok(None)` when someone holds it.
pub fn try_lock(dir: &Path) -> Result<Option<Flock<File>>, SandboxError> {
    let path = dir.join("lock");
    let f = crate::files::open_lock(&path).map_err(|e| io_err("opening", &path, e))?;
    match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(l) => Ok(Some(l)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(io_err("locking", &path, e.into())),
    }
}

/// Whether the supervisor of the sandbox in `dir` is alive (holds its lock).
pub fn supervised(dir: &Path) -> bool {
    matches!(try_lock(dir), Ok(None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_file_that_cannot_be_read_keeps_its_errno_in_the_verdict() {
        let t = std::env::temp_dir().join(format!("husk-state-errno-{}", std::process::id()));
        std::fs::create_dir_all(&t).unwrap();
        // state.json is a directory: reading it fails with EISDIR.
        std::fs::create_dir_all(t.join("state.json")).unwrap();
        let e = read_record(&t).unwrap_err();
        let r = e.report();
        std::fs::remove_dir_all(&t).unwrap();
        assert_eq!(r.errno, Some(nix::errno::Errno::EISDIR), "{e}");
        assert_eq!(r.step, crate::step::Phase::State);
        assert!(r.message.starts_with("sandbox state: reading ") && r.message.contains("state.json"), "{e}");
    }

    #[test]
    fn names_and_labels_are_checked() {
        assert!(check_name("build-42.x_y").is_ok());
        for bad in ["", "-x", "a/b", "0123456789ab", &"x".repeat(64)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_label("task=a=b").unwrap(), ("task".into(), "a=b".into()));
        assert!(parse_label("=x").is_err());
        assert!(parse_label("novalue").is_err());
    }

    #[test]
    fn lookups_by_id_name_and_prefix() {
        let t = std::env::temp_dir().join(format!("husk-sbx-state-{}", std::process::id()));
        let s = Store::open(&t).unwrap();
        for id in ["0123456789ab", "0123ffffffff", "abcdef012345"] {
            std::fs::create_dir(s.dir(id)).unwrap();
        }
        s.reserve_name("web", "abcdef012345").unwrap();
        assert!(matches!(s.reserve_name("web", "0123456789ab"), Err(SandboxError::NameTaken { .. })));
        assert_eq!(s.resolve("web").unwrap(), "abcdef012345");
        assert_eq!(s.resolve("0123456789ab").unwrap(), "0123456789ab");
        assert_eq!(s.resolve("abc").unwrap(), "abcdef012345");
        assert!(matches!(s.resolve("0123"), Err(SandboxError::Usage(_))), "ambiguous prefix");
        assert!(matches!(s.resolve("nope"), Err(SandboxError::Unknown { .. })));
        std::fs::remove_dir(s.dir("abcdef012345")).unwrap();
        assert_eq!(s.stale_names(), vec!["web".to_string()]);
        s.release_name("web", "abcdef012345");
        assert!(s.stale_names().is_empty());
        std::fs::remove_dir_all(&t).unwrap();
    }
}
