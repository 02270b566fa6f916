//! Host-side fixtures of one selftest run: things on the host the sandbox
//! must not reach. Every one is created here and removed when `Fixtures`
//! drops (also on error, panic or an interrupt the selftest caught).
//!
//! A fixture that cannot be set up on this host (no IPv6 loopback, rootless
//! without a second id for setuid) leaves its placeholder `Missing`: probes
//! that need it report `not_applicable` with the reason.

use crate::sys::command::die_with_parent;
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Every placeholder a probe's argv may use.
pub const KEYS: &[&str] = &[
    "probe",
    "suid_host",
    "suid_sandbox",
    "marker",
    "up",
    "tcp4",
    "tcp6",
    "abstract",
    "victim",
    "block_dev",
    "block_dev_nums",
    "mem_bomb",
    "fork_max",
    "tmp_bomb",
    "workdir_bomb",
    "shm_bomb",
    "scratch",
    "token",
    "egress_port",
    "egress_udp",
];

/// Where the probe and the setuid copies appear inside the sandbox.
pub const PROBE_IN_SANDBOX: &str = "/.husk-probe";
/// Named as the probe: the built-in probe (husk itself) runs as the probe
/// under these names too (embedded.rs).
const SUID_HOST_IN_SANDBOX: &str = "/.husk-probe-suid-host";
const SUID_SANDBOX_IN_SANDBOX: &str = "/.husk-probe-suid-sandbox";

/// Bigger than any realistic depth of the cwd.
const UP: &str = "../../../../../../../../../../../../../../../../../../../../../../../../../../../../../../";

/// A placeholder's value, or why it has none on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Text(String),
    /// The fixture is unavailable: probes that need it are not applicable.
    Missing(String),
    /// The protection the probe would test is not there at all (e.g. no
    /// memory limit): the probe is not run and reports ESCAPED.
    Unbounded(String),
}

/// What the selftest learned from its first (preflight) run with defaults.
#[derive(Clone, Debug, Default)]
pub struct Defaults {
    /// Host uid/gid of sandbox root (from the verdict's `user_mapping`).
    pub sandbox_root: Option<(u32, u32)>,
    pub memory_limit: Option<u64>,
    pub pids_limit: Option<u64>,
    /// The run is rootless (one id mapped).
    pub rootless: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("creating the selftest fixture {what} at {path}: {source}")]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
}

/// A directory removed on drop.
#[derive(Debug)]
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The host pseudo-terminal given to the TIOCSTI probe as its controlling tty.
#[derive(Debug)]
pub struct Tty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
    pub slave_path: PathBuf,
}

#[derive(Debug)]
pub struct Fixtures {
    pub run_id: String,
    pub marker_path: PathBuf,
    pub marker_token: String,
    pub victim_marker: Option<String>,
    pub sysv: Option<MsgQueue>,
    pub host_hostname: String,
    pub tty: Option<Tty>,
    /// (host path, path in the sandbox) of each setuid copy that exists.
    suid: SuidBinds,
    values: BTreeMap<&'static str, Value>,
    probe_host: PathBuf,
    victim: Option<Child>,
    _tcp4: Option<TcpListener>,
    _tcp6: Option<TcpListener>,
    _abstract: Option<UnixListener>,
    /// The egress probes' marker server (TCP and UDP on 127.0.0.1).
    egress: Option<super::egress::Marker>,
    // Dropped last: the marker and the setuid copies live in them.
    _secret_dir: Option<Dir>,
    _dir: Dir,
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> FixtureError + 'a {
    move |source| FixtureError::Io { what, path: path.to_path_buf(), source }
}

impl Fixtures {
    /// Sets up every fixture. `base` is the host directory the marker goes
    /// in (world-readable, so only isolation keeps the sandbox from it).
    pub fn create(base: &Path, probe_host: &Path, defaults: &Defaults) -> Result<Fixtures, FixtureError> {
        let run_id = crate::ids::random_hex(6);
        let dir_path = base.join(format!("husk-selftest-{run_id}"));
        std::fs::create_dir(&dir_path).map_err(io("directory", &dir_path))?;
        let dir = Dir(dir_path.clone());
        std::fs::set_permissions(&dir_path, std::fs::Permissions::from_mode(0o755))
            .map_err(io("directory", &dir_path))?;
        let marker_token = format!("husk-selftest-secret-{}", crate::ids::random_hex(16));
        let marker_path = dir_path.join("marker");
        std::fs::write(&marker_path, format!("{marker_token}\n")).map_err(io("marker", &marker_path))?;
        std::fs::set_permissions(&marker_path, std::fs::Permissions::from_mode(0o644))
            .map_err(io("marker", &marker_path))?;

        let mut values = BTreeMap::new();
        let text = |s: String| Value::Text(s);
        values.insert("probe", text(PROBE_IN_SANDBOX.into()));
        values.insert("marker", text(marker_path.display().to_string()));
        values.insert("up", text(UP.trim_end_matches('/').to_string()));

        let tcp4 = TcpListener::bind("127.0.0.1:0").ok();
        values.insert(
            "tcp4",
            match tcp4.as_ref().and_then(|l| l.local_addr().ok()) {
                Some(a) => text(a.to_string()),
                None => Value::Missing("cannot listen on the host's 127.0.0.1".into()),
            },
        );
        let tcp6 = TcpListener::bind("[::1]:0").ok();
        values.insert(
            "tcp6",
            match tcp6.as_ref().and_then(|l| l.local_addr().ok()) {
                Some(a) => text(a.to_string()),
                None => Value::Missing("the host has no IPv6 loopback (cannot listen on [::1])".into()),
            },
        );
        let abstract_name = format!("husk-selftest-{run_id}");
        let abstract_listener = bind_abstract(&abstract_name);
        values.insert(
            "abstract",
            match &abstract_listener {
                Ok(_) => text(format!("@{abstract_name}")),
                Err(e) => Value::Missing(format!("cannot bind a host abstract unix socket: {e}")),
            },
        );

        let egress = super::egress::Marker::create(&marker_token);
        let (port, udp) = match &egress {
            Ok(m) => (text(m.tcp_port().to_string()), m.udp_port().map(|p| text(p.to_string()))),
            Err(e) => (Value::Missing(format!("cannot start the egress marker server on 127.0.0.1: {e}")), None),
        };
        values.insert("egress_port", port);
        values.insert(
            "egress_udp",
            udp.unwrap_or_else(|| Value::Missing("no UDP socket on the host's 127.0.0.1".into())),
        );

        let victim_marker = format!("husk-selftest-victim-{run_id}");
        let mut cmd = Command::new(probe_host);
        cmd.args(["sleep", &victim_marker, "900"]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        die_with_parent(&mut cmd);
        let victim = cmd.spawn().ok();
        values.insert(
            "victim",
            match &victim {
                Some(c) => text(c.id().to_string()),
                None => Value::Missing("could not start the victim process".into()),
            },
        );

        // A random key; IPC_EXCL makes sure the queue is ours.
        let key = i32::from_str_radix(&crate::ids::random_hex(3), 16).unwrap_or(0x5e1f7e) | 0x4000_0000;
        let sysv = MsgQueue::create(key).ok();

        let (dev, nums) = host_block_device();
        values.insert("block_dev", dev);
        values.insert("block_dev_nums", nums);
        values.insert(
            "mem_bomb",
            match defaults.memory_limit {
                Some(l) => text((l + (256 << 20)).to_string()),
                None => Value::Unbounded(
                    "no memory limit on these sandboxes (limits.memory is null): a memory bomb would meet only the host's OOM killer; not run".into(),
                ),
            },
        );
        let fork_max = defaults.pids_limit.map(|l| (l * 2).clamp(4096, 16384)).unwrap_or(4096);
        values.insert("fork_max", text(fork_max.to_string()));
        values.insert("tmp_bomb", text((2 * crate::spec::DEFAULT_TMP_SIZE).to_string()));
        values.insert("workdir_bomb", text((crate::spec::DEFAULT_WORKDIR_SIZE + (64 << 20)).to_string()));
        values.insert("shm_bomb", text((128u64 << 20).to_string()));

        let (secret_dir, suid) = setuid_copies(base, &run_id, probe_host, defaults, &mut values)?;

        let host_hostname = nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
        let tty = open_tty();
        Ok(Fixtures {
            run_id,
            marker_path,
            marker_token,
            victim_marker: victim.as_ref().map(|_| victim_marker),
            sysv,
            host_hostname,
            tty,
            suid,
            values,
            probe_host: probe_host.to_path_buf(),
            victim,
            _tcp4: tcp4,
            _tcp6: tcp6,
            _abstract: abstract_listener.ok(),
            egress: egress.ok(),
            _secret_dir: secret_dir,
            _dir: dir,
        })
    }

    /// The value of a placeholder (`scratch` and `token` are per probe).
    pub fn value(&self, key: &str, probe_index: usize) -> Value {
        match key {
            "scratch" => Value::Text(format!("husk-selftest-{}-w{probe_index}", self.run_id)),
            "token" => Value::Text(format!("husk-selftest-{}-t{probe_index}", self.run_id)),
            _ => self.values.get(key).cloned().unwrap_or_else(|| Value::Missing(format!("no fixture {{{key}}}"))),
        }
    }

    /// `--bind` pairs (host, sandbox) the argv needs: the probe always, the
    /// setuid copies when named.
    pub fn binds(&self, argv: &[&str]) -> Vec<(PathBuf, &'static str)> {
        let mut out = vec![(self.probe_host.clone(), PROBE_IN_SANDBOX)];
        for (key, bind) in &self.suid {
            if argv.iter().any(|a| a.contains(&format!("{{{key}}}"))) {
                out.push(bind.clone());
            }
        }
        out
    }

    /// Where each fixture is, for the report (and for checking afterwards
    /// that all of them are gone).
    pub fn describe(&self) -> serde_json::Value {
        let text = |k: &str| match self.values.get(k) {
            Some(Value::Text(t)) => Some(t.clone()),
            _ => None,
        };
        serde_json::json!({
            "dir": self._dir.0,
            "marker": self.marker_path,
            "setuid_dir": self._secret_dir.as_ref().map(|d| &d.0),
            "tcp4": text("tcp4"),
            "tcp6": text("tcp6"),
            "abstract_socket": text("abstract"),
            "sysv_msg_id": self.sysv.as_ref().map(|q| q.id),
            "victim_pid": self.victim.as_ref().map(Child::id),
            "victim_marker": self.victim_marker,
            "tty": self.tty.as_ref().map(|t| &t.slave_path),
            "egress_tcp": text("egress_port").map(|p| format!("127.0.0.1:{p}")),
            "egress_udp": text("egress_udp").map(|p| format!("127.0.0.1:{p}")),
        })
    }

    /// Connections and datagrams the egress marker got since last asked.
    pub fn egress_hits(&self) -> Option<u64> {
        self.egress.as_ref().map(super::egress::Marker::take_hits)
    }

    /// Is the victim still running?
    pub fn victim_alive(&mut self) -> Option<bool> {
        self.victim.as_mut().map(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for Fixtures {
    fn drop(&mut self) {
        if let Some(mut v) = self.victim.take() {
            let _ = v.kill();
            let _ = v.wait();
        }
    }
}

fn bind_abstract(name: &str) -> std::io::Result<UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    UnixListener::bind_addr(&addr)
}

/// The host's first real block device (not loop/ram/zram): /dev/NAME and
/// its MAJOR:MINOR.
fn host_block_device() -> (Value, Value) {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut names: Vec<String> = std::fs::read_dir("/sys/block")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    let found = names
        .into_iter()
        .filter(|n| !["loop", "ram", "zram"].iter().any(|p| n.starts_with(p)))
        .map(|n| format!("/dev/{n}"))
        .find_map(|p| std::fs::metadata(&p).ok().filter(|m| m.file_type().is_block_device()).map(|m| (p, m.rdev())));
    match found {
        Some((path, rdev)) => (Value::Text(path), Value::Text(format!("{}:{}", libc::major(rdev), libc::minor(rdev)))),
        None => {
            let why = "the host has no block device node in /dev";
            (Value::Missing(why.into()), Value::Missing(why.into()))
        }
    }
}

/// Setuid-root copies of the probe, in a directory only the invoking user
/// can enter (a setuid-root probe must never be reachable by host users):
/// one owned by host root, one by the host uid behind sandbox root. Needs
/// root and a sandbox that maps uid 1000 (to run them as).
fn setuid_copies(
    base: &Path,
    run_id: &str,
    probe: &Path,
    defaults: &Defaults,
    values: &mut BTreeMap<&'static str, Value>,
) -> Result<(Option<Dir>, SuidBinds), FixtureError> {
    let mut binds = BTreeMap::new();
    let why = if !nix::unistd::geteuid().is_root() {
        Some("needs root to create a setuid-root binary")
    } else if defaults.rootless || defaults.sandbox_root.is_none() {
        Some("the sandbox maps a single id: no unprivileged user to run a setuid binary as")
    } else {
        None
    };
    if let Some(why) = why {
        values.insert("suid_host", Value::Missing(why.into()));
        values.insert("suid_sandbox", Value::Missing(why.into()));
        return Ok((None, binds));
    }
    let (sroot_uid, sroot_gid) = defaults.sandbox_root.unwrap_or((0, 0));
    let path = base.join(format!("husk-selftest-{run_id}-suid"));
    std::fs::create_dir(&path).map_err(io("setuid directory", &path))?;
    let dir = Dir(path.clone());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).map_err(io("setuid directory", &path))?;
    for (key, name, owner, inner) in [
        ("suid_host", "husk-probe-suid-host", (0, 0), SUID_HOST_IN_SANDBOX),
        ("suid_sandbox", "husk-probe-suid-sandbox", (sroot_uid, sroot_gid), SUID_SANDBOX_IN_SANDBOX),
    ] {
        let file = path.join(name);
        std::fs::copy(probe, &file).map_err(io("setuid copy of the probe", &file))?;
        // chown first: it clears the setuid bit.
        std::os::unix::fs::chown(&file, Some(owner.0), Some(owner.1)).map_err(io("setuid copy of the probe", &file))?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o6755))
            .map_err(io("setuid copy of the probe", &file))?;
        values.insert(key, Value::Text(inner.into()));
        binds.insert(key, (file, inner));
    }
    Ok((Some(dir), binds))
}

/// Setuid copies by placeholder: (host path, path in the sandbox).
type SuidBinds = BTreeMap<&'static str, (PathBuf, &'static str)>;

/// A pty pair in raw mode (so a single injected byte is readable at once).
fn open_tty() -> Option<Tty> {
    use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
    let pty = nix::pty::openpty(None, None).ok()?;
    let mut t = tcgetattr(pty.slave.as_fd()).ok()?;
    cfmakeraw(&mut t);
    tcsetattr(pty.slave.as_fd(), SetArg::TCSANOW, &t).ok()?;
    let slave_path = nix::unistd::ttyname(pty.slave.as_fd()).ok()?;
    Some(Tty { master: pty.master, slave: pty.slave, slave_path })
}

impl Tty {
    /// Bytes waiting in the terminal's input queue (what TIOCSTI would have
    /// pushed), read through a separate non-blocking open of the slave.
    pub fn queued(&self) -> Option<usize> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&self.slave_path)
            .ok()?;
        let mut buf = [0u8; 256];
        let mut total = 0;
        loop {
            match f.read(&mut buf) {
                Ok(0) => return Some(total),
                Ok(n) => total += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some(total),
                Err(_) => return Some(total),
            }
        }
    }
}

/// A SysV message queue created for one selftest run; removed on drop.
#[derive(Debug)]
pub struct MsgQueue {
    pub id: i32,
    pub key: i32,
}

impl MsgQueue {
    /// Fails with EEXIST if the key is taken, so the queue is certainly ours.
    pub fn create(key: i32) -> crate::sys::SysResult<Self> {
        Ok(MsgQueue { id: crate::sys::ipc::msg_queue_create(key)?, key })
    }
}

impl Drop for MsgQueue {
    fn drop(&mut self) {
        let _ = crate::sys::ipc::msg_queue_remove(self.id);
    }
}
