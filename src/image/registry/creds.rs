//! Registry credentials: `husk login` keeps them in `<store root>/auth.json`
//! (0600, Docker's `auths` format); `~/.docker/config.json` (or
//! `$DOCKER_CONFIG/config.json`) is read, never written: its `auths`, and
//! `credHelpers` / `credsStore` by running `docker-credential-NAME get`.

use super::super::reference::{DOCKER_HUB, DOCKER_HUB_API};
use base64::Engine;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const MAX_CONFIG: u64 = 1 << 20;
/// Bounds on a credential helper's answer.
const MAX_HELPER_OUTPUT: usize = 64 << 10;
const HELPER_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct Credential {
    pub user: String,
    pub secret: String,
    /// Where it came from, for error messages (never the secret).
    pub origin: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credential({} from {})", self.user, self.origin)
    }
}

impl Credential {
    pub fn basic_header(&self) -> String {
        format!("Basic {}", B64.encode(format!("{}:{}", self.user, self.secret)))
    }
}

#[derive(Default, serde::Deserialize, serde::Serialize)]
struct AuthFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(default, rename = "credHelpers", skip_serializing)]
    cred_helpers: BTreeMap<String, String>,
    #[serde(default, rename = "credsStore", skip_serializing)]
    creds_store: Option<String>,
}

#[derive(Default, serde::Deserialize, serde::Serialize)]
struct AuthEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    auth: Option<String>,
    #[serde(default, skip_serializing)]
    username: Option<String>,
    #[serde(default, skip_serializing)]
    password: Option<String>,
}

/// The keys a registry may be filed under (Docker writes Hub's as its
/// legacy index URL).
fn keys(registry: &str) -> Vec<String> {
    let mut k = vec![
        registry.to_string(),
        format!("https://{registry}"),
        format!("http://{registry}"),
        format!("https://{registry}/v1/"),
        format!("https://{registry}/v2/"),
    ];
    if registry == DOCKER_HUB {
        k.extend(["https://index.docker.io/v1/", "index.docker.io", DOCKER_HUB_API].map(String::from));
    }
    k
}

/// Why credentials could not be read, stored or asked for.
#[derive(Debug, thiserror::Error)]
pub enum CredsError {
    #[error(transparent)]
    Read(#[from] crate::userfile::UserFileError),
    #[error("{}: not a credentials file: {source}", path.display())]
    Parse { path: PathBuf, source: serde_json::Error },
    #[error("{origin}: the auth entry is {why}")]
    Entry { origin: String, why: &'static str },
    #[error("credential helper name {0:?} is not a plain name")]
    HelperName(String),
    #[error("credential helper {bin}: {why}")]
    Helper { bin: String, why: String },
    #[error("{}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
}

fn read_file(path: &Path) -> Result<Option<AuthFile>, CredsError> {
    // The one bounded reader for user-named files: a FIFO or /dev/zero in
    // place of a credentials file is refused, not read forever.
    let bytes = match crate::userfile::read("credentials file", path, MAX_CONFIG) {
        Ok(b) => b,
        Err(crate::userfile::UserFileError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|source| CredsError::Parse { path: path.to_path_buf(), source })
}

fn decode(entry: &AuthEntry, origin: String) -> Result<Option<Credential>, CredsError> {
    if let (Some(u), Some(p)) = (&entry.username, &entry.password) {
        return Ok(Some(Credential { user: u.clone(), secret: p.clone(), origin }));
    }
    let Some(a) = &entry.auth else {
        return Ok(None);
    };
    let bad = |why| CredsError::Entry { origin: origin.clone(), why };
    let raw = B64.decode(a.trim()).map_err(|_| bad("not base64"))?;
    let s = String::from_utf8(raw).map_err(|_| bad("not UTF-8"))?;
    let (u, p) = s.split_once(':').ok_or_else(|| bad("not user:password"))?;
    Ok(Some(Credential { user: u.into(), secret: p.into(), origin }))
}

pub fn docker_config_path() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("DOCKER_CONFIG") {
        return Some(PathBuf::from(d).join("config.json"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker/config.json"))
}

/// The credential for `registry`: husk's own (`husk login`) first, then
/// Docker's config. Ok(None): anonymous.
pub fn lookup(registry: &str, store_root: &Path) -> Result<Option<Credential>, CredsError> {
    let own = store_root.join("auth.json");
    if let Some(f) = read_file(&own)? {
        for k in keys(registry) {
            if let Some(e) = f.auths.get(&k)
                && let Some(c) = decode(e, format!("{} ({k})", own.display()))?
            {
                return Ok(Some(c));
            }
        }
    }
    let Some(path) = docker_config_path() else {
        return Ok(None);
    };
    let Some(f) = read_file(&path)? else {
        return Ok(None);
    };
    for k in keys(registry) {
        if let Some(h) = f.cred_helpers.get(&k) {
            return helper(h, &k);
        }
    }
    for k in keys(registry) {
        if let Some(e) = f.auths.get(&k)
            && let Some(c) = decode(e, format!("{} ({k})", path.display()))?
        {
            return Ok(Some(c));
        }
    }
    match &f.creds_store {
        Some(h) => helper(h, if registry == DOCKER_HUB { "https://index.docker.io/v1/" } else { registry }),
        None => Ok(None),
    }
}

/// Runs `docker-credential-NAME get` (the credential-helper protocol: the
/// server URL on stdin, `{"Username", "Secret"}` on stdout). The helper is
/// outside input: its answer is read within MAX_HELPER_OUTPUT and
/// HELPER_TIMEOUT, and one that says more or takes longer is killed.
fn helper(name: &str, server: &str) -> Result<Option<Credential>, CredsError> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
        return Err(CredsError::HelperName(super::truncate(name, 40)));
    }
    let bin = format!("docker-credential-{name}");
    let failed = |why: String| CredsError::Helper { bin: bin.clone(), why };
    let mut child = Command::new(&bin)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // The protocol's errors come on stdout; stderr is the helper's
        // own chatter, and a pipe nobody reads could stall it.
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => failed(format!(
                "not found on PATH; install it, or remove the credHelpers / credsStore entry that names {name:?} from {}",
                docker_config_path().map(|p| p.display().to_string()).unwrap_or_else(|| "the Docker config".into())
            )),
            _ => failed(e.to_string()),
        })?;
    if let Some(mut i) = child.stdin.take() {
        // A helper that exits without reading stdin closes the pipe.
        let _ = i.write_all(server.as_bytes());
    }
    let read = match child.stdout.take() {
        Some(out) => read_bounded(out, MAX_HELPER_OUTPUT, HELPER_TIMEOUT),
        None => Ok(Vec::new()),
    };
    let stdout = match read {
        Ok(b) => b,
        Err(why) => {
            // Our own child, by its handle: it is killed and reaped.
            let _ = child.kill();
            let _ = child.wait();
            return Err(failed(why));
        }
    };
    let status = child.wait().map_err(|e| failed(e.to_string()))?;
    if !status.success() {
        let msg = String::from_utf8_lossy(&stdout);
        // "credentials not found in native keychain": anonymous.
        if msg.contains("not found") {
            return Ok(None);
        }
        return Err(failed(format!("`get` failed ({status}): {}", super::truncate(msg.trim(), 200))));
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(rename = "Username")]
        user: String,
        #[serde(rename = "Secret")]
        secret: String,
    }
    let a: Answer = serde_json::from_slice(&stdout)
        .map_err(|e| failed(format!("its answer is not {{\"Username\", \"Secret\"}} JSON: {e}")))?;
    Ok(Some(Credential { user: a.user, secret: a.secret, origin: format!("credential helper {bin}") }))
}

/// Reads `r` to its end within `limit` bytes and `timeout`.
fn read_bounded(mut r: std::process::ChildStdout, limit: usize, timeout: Duration) -> Result<Vec<u8>, String> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::io::Read;
    use std::os::fd::AsFd;
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no answer within {}s", timeout.as_secs()));
        }
        let ms = PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(r.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.to_string()),
        }
        let n = r.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(out);
        }
        if out.len() + n > limit {
            return Err(format!("it wrote more than {} KiB; a credential is a short JSON object", limit >> 10));
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Stores `user`/`secret` for `registry` in `<store root>/auth.json`
/// (0600, replaced atomically). Returns the file.
pub fn save(registry: &str, user: &str, secret: &str, store_root: &Path) -> Result<PathBuf, CredsError> {
    let path = store_root.join("auth.json");
    let mut f = read_file(&path)?.unwrap_or_default();
    f.auths.insert(
        registry.to_string(),
        AuthEntry { auth: Some(B64.encode(format!("{user}:{secret}"))), username: None, password: None },
    );
    write(&path, &f)?;
    Ok(path)
}

/// Removes `registry` from `<store root>/auth.json`. Ok(false): none stored.
pub fn forget(registry: &str, store_root: &Path) -> Result<bool, CredsError> {
    let path = store_root.join("auth.json");
    let Some(mut f) = read_file(&path)? else {
        return Ok(false);
    };
    if f.auths.remove(registry).is_none() {
        return Ok(false);
    }
    write(&path, &f)?;
    Ok(true)
}

fn write(path: &Path, f: &AuthFile) -> Result<(), CredsError> {
    // Serializing maps of strings cannot fail.
    let bytes = serde_json::to_vec_pretty(f).unwrap_or_default();
    // write_durable creates its temporary 0600 and renames it over.
    crate::files::write_durable(path, &bytes).map_err(|source| CredsError::Write { path: path.to_path_buf(), source })
}
