//! Which runsc, how it runs here: binary, version and platforms (probed
//! once per binary and cached in the state dir), the platform to use, the
//! privilege mode, and where runsc keeps its state.

use crate::spec::RunscSpec;
use nix::errno::Errno;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Platform used when none is asked for and systrap is not available.
/// Never kvm by default: it needs /dev/kvm, which may be missing, or hang
/// (it does on nested VMs without working KVM).
pub const FALLBACK_PLATFORM: &str = "ptrace";
/// Preferred when the installed runsc has it (much faster than ptrace).
pub const PREFERRED_PLATFORM: &str = "systrap";

/// How husk and runsc run on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// husk is root in the host's user namespace: runsc runs in a user
    /// namespace that maps the sandbox's id range as the native backend
    /// does (sandbox root = an unprivileged host id), never as host root.
    Root,
    /// husk is root inside a user namespace (a container, `unshare -r`):
    /// runsc runs there as that namespace's root.
    NamespaceRoot,
    /// husk is an ordinary user: runsc runs in a user namespace whose root
    /// is that user.
    Rootless { uid: u32, gid: u32 },
}

impl Mode {
    pub fn detect() -> Mode {
        let uid = nix::unistd::Uid::effective().as_raw();
        let gid = nix::unistd::Gid::effective().as_raw();
        match uid {
            0 if crate::host::initial_user_namespace() => Mode::Root,
            0 => Mode::NamespaceRoot,
            _ => Mode::Rootless { uid, gid },
        }
    }

    pub fn rootless(self) -> bool {
        self != Mode::Root
    }
}

/// Why runsc cannot be used here, as found while resolving it.
#[derive(Debug, thiserror::Error)]
pub enum RunscError {
    #[error(transparent)]
    StateDir(#[from] crate::paths::PathsError),
    #[error("creating {}: {source}", path.display())]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("--runsc-path {}: not found in PATH", .0.display())]
    NotInPath(PathBuf),
    #[error(
        "runsc is not installed (not found in PATH): install gVisor (`apt-get install runsc`) or pass --runsc-path"
    )]
    NotInstalled,
    #[error("runsc binary {}: {source}", path.display())]
    Binary { path: PathBuf, source: std::io::Error },
    #[error("runsc binary {} is not an executable file", .0.display())]
    NotExecutable(PathBuf),
    #[error("running {} {args}: {source}", bin.display())]
    Spawn { bin: PathBuf, args: String, source: std::io::Error },
    #[error("{} {args} failed ({status}): {stderr}", bin.display())]
    Failed { bin: PathBuf, args: String, status: std::process::ExitStatus, stderr: String },
    #[error("{} --version: not a runsc version line", .0.display())]
    NoVersion(PathBuf),
    #[error("--runsc-platform {asked}: runsc {version} supports only {} ", platforms.join(", "))]
    NoSuchPlatform { asked: String, version: String, platforms: Vec<String> },
    #[error(
        "runsc {version} offers neither {PREFERRED_PLATFORM} nor {FALLBACK_PLATFORM} (only {}); pass --runsc-platform",
        platforms.join(", ")
    )]
    NoDefaultPlatform { version: String, platforms: Vec<String> },
    #[error("runsc's state dir {} belongs to uid {owner}, not to husk's uid {me} here", path.display())]
    ForeignRoot { path: PathBuf, owner: u32, me: u32 },
}

impl RunscError {
    /// The kernel's errno, when a file or process call failed.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            RunscError::StateDir(crate::paths::PathsError::Io { source, .. })
            | RunscError::CreateDir { source, .. }
            | RunscError::Binary { source, .. }
            | RunscError::Spawn { source, .. } => crate::step::io_errno(source),
            _ => None,
        }
    }
}

/// husk's state directory (the `--state-dir` rule of the store/state
/// layout: /run/husk as root, $XDG_RUNTIME_DIR/husk rootless, else
/// `$XDG_DATA_HOME/husk/state` or `~/.local/share/husk/state`).
pub fn state_dir(explicit: Option<&Path>) -> Result<PathBuf, RunscError> {
    // The same rules as every other husk command (src/paths.rs).
    Ok(crate::paths::Paths::resolve(None, explicit, &crate::paths::Env::current())?.state)
}

/// runsc's own state (`runsc --root`) inside husk's state dir.
pub fn runsc_root(state: &Path) -> PathBuf {
    state.join("runsc")
}

/// husk's per-run directories for runsc runs (bundle, pid file, log, owner).
pub fn runs_dir(state: &Path) -> PathBuf {
    state.join("runsc-runs")
}

/// Creates `dir` (mode 0700) and its parents.
pub fn ensure_dir(dir: &Path) -> Result<(), RunscError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| RunscError::CreateDir { path: dir.to_path_buf(), source })
}

/// What the installed runsc is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Info {
    pub version: String,
    pub platforms: Vec<String>,
}

/// The cache entry: `Info` for one binary (by identity).
#[derive(Serialize, Deserialize)]
struct Cached {
    path: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    info: Info,
}

/// Finds `name` in PATH (or takes an explicit path as is).
pub fn resolve_binary(explicit: Option<&Path>) -> Result<PathBuf, RunscError> {
    let p = match explicit {
        Some(p) if p.components().count() > 1 => p.to_path_buf(),
        Some(p) => crate::host::which(&p.to_string_lossy()).ok_or_else(|| RunscError::NotInPath(p.to_path_buf()))?,
        None => crate::host::which("runsc").ok_or(RunscError::NotInstalled)?,
    };
    let binary = |path: &Path, source| RunscError::Binary { path: path.to_path_buf(), source };
    let p = std::fs::canonicalize(&p).map_err(|e| binary(&p, e))?;
    let md = std::fs::metadata(&p).map_err(|e| binary(&p, e))?;
    if !md.is_file() || md.mode() & 0o111 == 0 {
        return Err(RunscError::NotExecutable(p));
    }
    Ok(p)
}

/// `Info` for `bin`, from the cache file when the binary is unchanged,
/// else by asking it (`runsc --version`, `runsc help platforms`: two
/// process starts, ~40 ms each, once per binary).
pub fn info(bin: &Path, cache: Option<&Path>) -> Result<Info, RunscError> {
    let md = std::fs::metadata(bin).map_err(|source| RunscError::Binary { path: bin.to_path_buf(), source })?;
    let key = |info: Info| Cached {
        path: bin.to_path_buf(),
        dev: md.dev(),
        ino: md.ino(),
        size: md.size(),
        mtime_ns: md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128,
        info,
    };
    if let Some(c) = cache
        && let Ok(text) = std::fs::read(c)
        && let Ok(old) = serde_json::from_slice::<Cached>(&text)
    {
        let now = key(old.info.clone());
        if (&old.path, old.dev, old.ino, old.size, old.mtime_ns)
            == (&now.path, now.dev, now.ino, now.size, now.mtime_ns)
        {
            return Ok(old.info);
        }
    }
    let out = |args: &[&str]| -> Result<String, RunscError> {
        let o = Command::new(bin)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|source| RunscError::Spawn { bin: bin.to_path_buf(), args: args.join(" "), source })?;
        if !o.status.success() {
            return Err(RunscError::Failed {
                bin: bin.to_path_buf(),
                args: args.join(" "),
                status: o.status,
                stderr: String::from_utf8_lossy(&o.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let version = parse_version(&out(&["--version"])?).ok_or_else(|| RunscError::NoVersion(bin.to_path_buf()))?;
    let platforms = parse_platforms(&out(&["help", "platforms"])?);
    let info = Info { version, platforms };
    if let Some(c) = cache
        && let Some(dir) = c.parent()
        && ensure_dir(dir).is_ok()
    {
        let tmp = c.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, serde_json::to_vec(&key(info.clone())).unwrap_or_default()).is_ok() {
            let _ = std::fs::rename(&tmp, c);
        }
    }
    Ok(info)
}

/// "runsc version 0.0~20221219.0" -> "0.0~20221219.0".
pub fn parse_version(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix("runsc version ")).map(|v| v.trim().to_string())
}

/// `runsc help platforms` lists one platform name per line.
pub fn parse_platforms(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()))
        .map(str::to_string)
        .collect()
}

/// The platform for a run: the one asked for (which this runsc must have),
/// else systrap where available, else ptrace. Never kvm unless asked.
pub fn choose_platform(asked: Option<&str>, info: &Info) -> Result<String, RunscError> {
    match asked {
        Some(p) if info.platforms.iter().any(|x| x == p) => Ok(p.to_string()),
        Some(p) => Err(RunscError::NoSuchPlatform {
            asked: p.into(),
            version: info.version.clone(),
            platforms: info.platforms.clone(),
        }),
        None if info.platforms.iter().any(|x| x == PREFERRED_PLATFORM) => Ok(PREFERRED_PLATFORM.into()),
        None if info.platforms.iter().any(|x| x == FALLBACK_PLATFORM) => Ok(FALLBACK_PLATFORM.into()),
        None => Err(RunscError::NoDefaultPlatform { version: info.version.clone(), platforms: info.platforms.clone() }),
    }
}

/// Everything the backend needs to run runsc here, resolved once.
#[derive(Clone, Debug)]
pub struct RunscConfig {
    pub bin: PathBuf,
    pub info: Info,
    pub platform: String,
    pub mode: Mode,
    /// husk's state directory.
    pub state: PathBuf,
}

impl RunscConfig {
    /// Makes runsc's `--root` (for `run` and `create` alike). Rootless,
    /// runsc runs as husk's own uid: its state must be ours.
    pub fn ensure_runsc_root(&self) -> Result<(), RunscError> {
        ensure_dir(&self.runsc_root())?;
        if self.mode != Mode::Root {
            use std::os::unix::fs::MetadataExt;
            let me = nix::unistd::Uid::effective().as_raw();
            let owner = std::fs::metadata(self.runsc_root()).map(|m| m.uid()).unwrap_or(me);
            if owner != me {
                return Err(RunscError::ForeignRoot { path: self.runsc_root(), owner, me });
            }
        }
        Ok(())
    }

    pub fn resolve(spec: &RunscSpec, state: &Path) -> Result<RunscConfig, RunscError> {
        let bin = resolve_binary(spec.path.as_deref())?;
        let info = info(&bin, Some(&runs_dir(state).join("runsc-info.json")))?;
        let platform = choose_platform(spec.platform.as_deref(), &info)?;
        Ok(RunscConfig { bin, info, platform, mode: Mode::detect(), state: state.to_path_buf() })
    }

    pub fn runsc_root(&self) -> PathBuf {
        runsc_root(&self.state)
    }

    /// Flags before the subcommand, the same for run, kill and delete.
    pub fn global_args(&self, network: crate::spec::NetworkMode) -> Vec<String> {
        let mut a = vec![
            format!("--root={}", self.runsc_root().display()),
            format!("--platform={}", self.platform),
            format!(
                "--network={}",
                match network {
                    crate::spec::NetworkMode::None => "none",
                    crate::spec::NetworkMode::Host => "host",
                }
            ),
            // runsc must never create cgroups of its own: limits come from
            // the cgroup husk creates for the run, which runsc is born in.
            "--ignore-cgroups".into(),
        ];
        // runsc always runs as the root of a user namespace that maps no
        // host root (husk's, see `launch::UserNs`): runsc's rootless mode.
        a.push("--rootless".into());
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(platforms: &[&str]) -> Info {
        Info { version: "x".into(), platforms: platforms.iter().map(|s| s.to_string()).collect() }
    }

    #[test]
    fn platform_prefers_systrap_never_defaults_to_kvm() {
        assert_eq!(choose_platform(None, &info(&["kvm", "ptrace"])).unwrap(), "ptrace");
        assert_eq!(choose_platform(None, &info(&["kvm", "ptrace", "systrap"])).unwrap(), "systrap");
        assert!(choose_platform(None, &info(&["kvm"])).is_err());
        assert_eq!(choose_platform(Some("kvm"), &info(&["kvm", "ptrace"])).unwrap(), "kvm");
        let e = choose_platform(Some("systrap"), &info(&["kvm", "ptrace"])).unwrap_err().to_string();
        assert!(e.contains("kvm, ptrace"), "{e}");
    }

    #[test]
    fn version_and_platform_listings_parse() {
        assert_eq!(parse_version("runsc version 0.0~20221219.0\nspec: 1.0.2-dev\n").as_deref(), Some("0.0~20221219.0"));
        assert_eq!(parse_version("something else"), None);
        assert_eq!(parse_platforms("kvm\nptrace\n"), ["kvm", "ptrace"]);
        assert_eq!(parse_platforms("Available platforms:\n  ptrace\n  systrap\n"), ["ptrace", "systrap"]);
    }
}
