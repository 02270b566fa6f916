//! `husk create` and the life of a sandbox's supervisor.
//!
//! `husk create` plans the sandbox like `husk run` (in hold mode: no
//! command), reserves its directory and name, and forks the supervisor: a
//! small process of this sandbox alone (setsid, stdio on /dev/null), which
//! creates the cgroup, has the backend start the sandbox in it
//! (`backend::Backend::create`: the native init is cloned exactly as
//! `run`'s), records it READY and tells `husk create` over a pipe. Then it
//! holds the lease: one poll over the init's pidfd, a signalfd (SIGTERM,
//! SIGINT, SIGHUP: destroy), its socket (exec, renew, rm) and the lease
//! deadline.
//!
//! The init has PDEATHSIG on the supervisor: a SIGKILLed supervisor takes
//! the sandbox with it (the init's end kills its pid namespace), and its
//! lock on the sandbox's directory goes too, which is how `husk gc` and the
//! next husk command know to remove what remains.

mod freeze;
mod hold;
mod pause;
mod refusal;
mod warm;

use super::SandboxError;
use super::events::Journal;
use super::proto;
use super::state::{self, ProcRef, Record, SeccompRecord, State, Store, now_ms};
use super::tombstone;
use crate::backend::{Backend, Live};
use crate::cgroup::CgroupJoin;
use crate::cgroup::nested::{Leaf, SANDBOX_PREFIX, Tree};
use crate::cgroup::report::AppliedLimits;
use crate::cgroup::{CgroupPlan, SandboxCgroup};
use crate::image::store::Lease;
use crate::outcome::ErrorReport;
use crate::plan::{InitRole, Plan, RootInput};
use crate::step::Phase;
use crate::sys::process::{Forked, exit_now};
use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{AddressFamily, MsgFlags, SockFlag, SockType, send, socketpair};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::Duration;

/// The supervisor's process name (`comm`), by which `husk gc` finds
/// supervisors on the host whose record is gone (`gc::unrecorded`).
pub const COMM: &std::ffi::CStr = c"husk:[sandbox]";

/// What `husk create` was asked for, beyond the spec.
pub struct CreateRequest {
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub ttl: Duration,
    /// `--max-lifetime`: an absolute end, besides the idle lease.
    pub max_lifetime: Option<Duration>,
    pub concurrent: bool,
    /// The backend that starts and holds it.
    pub backend: Box<dyn Backend>,
    /// Why `--runtime auto` picked what it did (`isolation.runtime_choice`).
    pub runtime_choice: Option<crate::isolation::RuntimeChoiceNote>,
    /// `--ready-cmd`: the sandbox stays CREATING (admitting only the check's
    /// exec) until husk create promotes it (`Handover::promote`).
    pub ready_check: bool,
    /// Given to every exec (`Request::Secrets`), held in memory only.
    pub secrets: Vec<crate::redact::Secret>,
    /// Restore the sandbox's processes from the checkpoint image in this
    /// directory instead of starting them (`husk fork --memory`).
    pub restore: Option<PathBuf>,
}

fn setup_err(step: Phase, message: impl std::fmt::Display) -> SandboxError {
    SandboxError::Setup(ErrorReport::new(step, message.to_string()))
}

/// A failed call that gave an errno.
fn errno_err(step: Phase, e: Errno) -> SandboxError {
    SandboxError::Setup(ErrorReport::new(step, e.to_string()).with_errno(e))
}

/// A cgroup failure, with the errno the kernel gave.
fn cgroup_err(e: crate::cgroup::CgroupError) -> SandboxError {
    SandboxError::Setup(ErrorReport::new(Phase::Cgroup, e.to_string()).with_errno(e.errno()))
}

/// Creates the sandbox; returns its record once it is READY, with the
/// handover the caller confirms once it has given the id to whoever asked
/// (until then, and if the caller dies first, the supervisor tears the
/// sandbox down: nobody could reach it). The image lease (if any) moves to
/// the supervisor, which holds it while the sandbox lives.
pub fn create(
    store: &Store,
    plan: Plan,
    inputs: HoldInputs,
    req: CreateRequest,
    lease: Option<Lease>,
) -> Result<(Record, Handover), SandboxError> {
    begin(store, plan, inputs, req, lease)?.wait()
}

/// A sandbox whose supervisor runs and is starting it (`begin`).
pub struct Starting {
    ready: OwnedFd,
    id: String,
}

impl Starting {
    /// Waits for READY (or the failure), as `create` does.
    pub fn wait(self) -> Result<(Record, Handover), SandboxError> {
        await_ready(self.ready, &self.id)
    }
}

/// `create` up to the supervisor's fork: several sandboxes can then start
/// at once (`husk fork --memory` restores its forks so), each waited for.
pub fn begin(
    store: &Store,
    plan: Plan,
    inputs: HoldInputs,
    req: CreateRequest,
    lease: Option<Lease>,
) -> Result<Starting, SandboxError> {
    debug_assert_eq!(plan.role, InitRole::Hold);
    let id = plan.id.clone();
    if let Some(name) = &req.name {
        store.reserve_name(name, &id)?;
    }
    let release = |e: SandboxError| {
        if let Some(name) = &req.name {
            store.release_name(name, &id);
        }
        e
    };
    // Built under a dot name and renamed once locked, so a concurrent gc
    // never sees an unlocked sandbox directory that is merely being born.
    let tmp = store.root.join(format!(".{id}.new"));
    let dir = store.dir(&id);
    let made = (|| {
        std::fs::DirBuilder::new().mode(0o700).create(&tmp).map_err(|e| state::io_err("creating", &tmp, e))?;
        let lock = state::try_lock(&tmp)?.ok_or_else(|| SandboxError::State(format!("{} is locked", tmp.display())))?;
        let rec = initial_record(&plan, inputs, &req);
        if let Some(p) = &plan.seccomp {
            let path = tmp.join("seccomp.bpf");
            let write = || -> std::io::Result<()> {
                use std::io::Write;
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)?
                    .write_all(&p.to_bytes())
            };
            write().map_err(|e| state::io_err("writing", &path, e))?;
        }
        state::write_record(&tmp, &rec)?;
        // The errno is what matters; the message names the target.
        std::fs::rename(&tmp, &dir).map_err(|e| state::io_err("renaming the new sandbox's directory to", &dir, e))?;
        Ok((lock, rec))
    })();
    let (lock, rec) = match made {
        Ok(x) => x,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(release(e));
        }
    };
    // Both ways: READY (or the failure) to husk create, then its
    // confirmation that the id was handed over.
    let (ready_r, ready_w) = socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::SOCK_CLOEXEC)
        .map_err(|e| release(errno_err(Phase::Socketpair, e)))?;
    let forked = match crate::sys::process::SingleThreaded::check() {
        Ok(one) => crate::sys::process::fork(&one).map_err(|e| (e.to_string(), Some(e))),
        Err(t) => Err((t.to_string(), t.errno())),
    };
    match forked {
        Err((why, errno)) => {
            let _ = std::fs::remove_dir_all(&dir);
            let report = ErrorReport::new(Phase::ForkSupervisor, format!("forking the supervisor: {why}"));
            Err(release(SandboxError::Setup(report.with_errno(errno))))
        }
        Ok(Forked::Child(_)) => {
            drop(ready_r);
            let sup = Supervisor {
                store_root: store.root.clone(),
                dir,
                plan,
                rec,
                lock,
                _lease: lease,
                spare: None,
                kept: Vec::new(),
                journal: Journal::default(),
                backend: req.backend,
                warm: None,
                warm_leaf: None,
                warm_spare: None,
                placing: None,
                warm_error: None,
                checking: req.ready_check,
                secrets: req.secrets,
                restore: req.restore,
                frozen: None,
                paused: false,
            };
            sup.run(ready_w)
        }
        Ok(Forked::Parent { .. }) => {
            drop(ready_w);
            // The lock and the lease are the supervisor's now: dropping our
            // copies would unlock the open file descriptions we share with it.
            std::mem::forget(lock);
            std::mem::forget(lease);
            Ok(Starting { ready: ready_r, id })
        }
    }
}

fn initial_record(plan: &Plan, inputs: HoldInputs, req: &CreateRequest) -> Record {
    let now = now_ms();
    let ttl_ms = req.ttl.as_millis() as u64;
    let max_lifetime_ms = req.max_lifetime.map(|d| d.as_millis() as u64);
    let lifetime_ends_ms = max_lifetime_ms.map(|m| now + m);
    Record {
        id: plan.id.clone(),
        name: req.name.clone(),
        labels: req.labels.clone(),
        state: State::Creating,
        backend: req.backend.name().into(),
        created_ms: now,
        ttl_ms,
        expires_ms: lifetime_ends_ms.map_or(now + ttl_ms, |end| end.min(now + ttl_ms)),
        max_lifetime_ms,
        lifetime_ends_ms,
        concurrent: req.concurrent,
        execs: 0,
        active_execs: 0,
        supervisor: None,
        init: None,
        namespaces: BTreeMap::new(),
        cgroup: None,
        limits: None,
        isolation: {
            let mut i = req.backend.isolation(plan);
            i.runtime_choice = req.runtime_choice.clone();
            i
        },
        spec: plan.spec.clone(),
        image: inputs.image,
        passwd: inputs.passwd,
        group: inputs.group,
        ids: plan.ids.clone(),
        last_cap: plan.last_cap,
        workdir: plan.mounts.workdir.to_string_lossy().into_owned(),
        seccomp: plan.seccomp.as_ref().map(|p| SeccompRecord {
            name: p.name.clone(),
            shipped: p.source == crate::seccomp::Source::Shipped,
            sha256: p.sha256.clone(),
            report: p.report(),
        }),
        error: None,
        events: Vec::new(),
        network: None,
        published: Vec::new(),
        secret_names: req.secrets.iter().map(|s| s.name.clone()).collect(),
        checkpoint: None,
    }
}

/// What execs of a sandbox need from its root beyond the plan (the plan
/// holds only what these produced for the init).
#[derive(Clone, Debug, Default)]
pub struct HoldInputs {
    pub image: crate::plan::ImageDefaults,
    pub passwd: Option<String>,
    pub group: Option<String>,
}

impl HoldInputs {
    pub fn of(root: &RootInput<'_>) -> HoldInputs {
        HoldInputs { image: root.image.clone(), passwd: root.passwd.clone(), group: root.group.clone() }
    }
}

/// What the supervisor tells `husk create` (one JSON line).
#[derive(serde::Serialize, serde::Deserialize)]
struct Ready {
    ok: bool,
    record: Option<Box<Record>>,
    step: Option<Phase>,
    /// The raw errno, when the kernel gave one.
    #[serde(default)]
    errno: Option<i32>,
    error: Option<String>,
    hint: Option<String>,
}

/// husk create's end of the channel to a READY sandbox's supervisor.
/// Dropped unconfirmed (or with husk create killed), it tells the
/// supervisor that nobody received the sandbox, which then destroys it.
pub struct Handover(std::fs::File);

impl Handover {
    /// The id reached the caller (it was printed): the sandbox is theirs.
    pub fn confirm(self) {
        let _ = send(self.0.as_raw_fd(), &[HANDED_OVER], MsgFlags::MSG_NOSIGNAL);
    }

    /// `--ready-cmd` passed: the sandbox becomes READY. Returns once the
    /// supervisor has recorded it, so an exec sent as soon as the id is
    /// printed is never refused as CREATING.
    pub fn promote(&self) -> Result<(), SandboxError> {
        use std::io::Read;
        let sent = send(self.0.as_raw_fd(), &[PROMOTE], MsgFlags::MSG_NOSIGNAL);
        let mut ack = [0u8; 1];
        match sent.map(|_| (&self.0).read(&mut ack)) {
            Ok(Ok(1)) if ack[0] == PROMOTE => Ok(()),
            _ => Err(setup_err(Phase::Supervisor, "the supervisor ended before the sandbox was READY")),
        }
    }

    /// `--ready-cmd` failed: the supervisor destroys the sandbox (its
    /// tombstone says why).
    pub fn not_ready(self) {
        let _ = send(self.0.as_raw_fd(), &[NOT_READY], MsgFlags::MSG_NOSIGNAL);
    }
}

/// husk create -> supervisor over the handover: the id reached the caller.
const HANDED_OVER: u8 = b'k';
/// The readiness check passed: READY (the supervisor echoes it back).
const PROMOTE: u8 = b'p';
/// The readiness check failed: destroy.
const NOT_READY: u8 = b'f';

fn await_ready(r: OwnedFd, id: &str) -> Result<(Record, Handover), SandboxError> {
    use std::io::BufRead;
    let file = std::fs::File::from(r);
    let mut line = String::new();
    // The supervisor sends one line and then waits: nothing is read past it.
    let _ = std::io::BufReader::new(&file).read_line(&mut line);
    match serde_json::from_str::<Ready>(line.trim()) {
        Ok(Ready { ok: true, record: Some(rec), .. }) => Ok((*rec, Handover(file))),
        Ok(r) => Err(SandboxError::Setup(
            ErrorReport::new(r.step.unwrap_or(Phase::Setup), r.error.unwrap_or_else(|| "sandbox setup failed".into()))
                .with_errno(r.errno.map(Errno::from_raw))
                .with_hint(r.hint),
        )),
        Err(_) => Err(setup_err(
            Phase::Supervisor,
            format!("the supervisor of sandbox {id} ended before the sandbox was ready"),
        )),
    }
}

/// The supervisor's signals: these destroy the sandbox.
fn signals() -> SigSet {
    let mut s = SigSet::empty();
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        s.add(sig);
    }
    s
}

struct Supervisor {
    store_root: PathBuf,
    dir: PathBuf,
    plan: Plan,
    rec: Record,
    lock: nix::fcntl::Flock<std::fs::File>,
    _lease: Option<Lease>,
    /// The next exec's cgroup leaf, made while idle so the exec does not
    /// wait for the mkdirs.
    spare: Option<String>,
    /// Leaves of ended execs that still hold processes.
    kept: Vec<String>,
    journal: Journal,
    backend: Box<dyn Backend>,
    /// The warm interpreter or session (`--warm` / `--session`), while it runs.
    warm: Option<crate::backend::native::warm::WarmProc>,
    /// Its cgroup leaf (`warm`), kept across restarts.
    warm_leaf: Option<Leaf>,
    /// The leaf the zygote's spare child is moved into ahead of the next
    /// `exec --code`, and whether one is placed there (`place_spare`).
    warm_spare: Option<warm::SpareLeaf>,
    /// The move of a spare into that leaf, under way.
    placing: Option<warm::Placing>,
    /// Why the warm interpreter is not running, when it is not.
    warm_error: Option<String>,
    /// `--ready-cmd`'s check is pending: CREATING, only its exec admitted.
    checking: bool,
    /// `create --secret-env/--secret-file`: handed to each exec that asks.
    secrets: Vec<crate::redact::Secret>,
    /// Frozen for readers of its filesystem (`Request::Freeze`).
    frozen: Option<freeze::Held>,
    /// `husk pause` holds the freeze (`Request::Pause`).
    paused: bool,
    /// `CreateRequest::restore`, until the sandbox started from it.
    restore: Option<PathBuf>,
}

/// The sandbox, held.
type Init = Box<dyn Live>;

/// Why a sandbox ends.
enum End {
    /// husk create ended before the id reached its caller.
    Unclaimed,
    /// `--ready-cmd` failed.
    NotReady,
    Removed,
    Expired,
    /// `--max-lifetime` reached.
    MaxLifetime,
    Signal(i32),
    InitDied(String),
}

impl Supervisor {
    fn run(mut self, ready: OwnedFd) -> ! {
        // Its own session, off the caller's terminal and stdio: a caller that
        // reads husk create's output to EOF must not wait for the sandbox.
        let _ = nix::unistd::setsid();
        detach_stdio();
        let _ = nix::sys::prctl::set_name(COMM);
        let title = format!("husk: sandbox {}", self.rec.id);
        crate::sys::process::scrub_cmdline(&self.plan.arg_areas, title.as_bytes());
        self.rec.supervisor = ProcRef::of(std::process::id() as i32);
        match self.start() {
            Ok((signals, listener, mut spawned, cgroup)) => {
                self.report(
                    &ready,
                    Ready {
                        ok: true,
                        record: Some(Box::new(self.rec.clone())),
                        step: None,
                        errno: None,
                        error: None,
                        hint: None,
                    },
                );
                let end = self.hold(&signals, &listener, &mut spawned, Some(ready));
                drop(listener);
                self.destroy(end, Some(spawned), cgroup)
            }
            Err(e) => {
                self.rec.state = State::Failed;
                self.rec.error = Some(e.to_string());
                let _ = state::write_record(&self.dir, &self.rec);
                let r = Ready {
                    ok: false,
                    record: None,
                    step: Some(e.step()),
                    errno: e.report().errno.map(|e| e as i32),
                    error: Some(e.to_string()),
                    hint: e.hint().map(str::to_string),
                };
                self.report(&ready, r);
                drop(ready);
                self.destroy(End::InitDied(e.to_string()), None, None)
            }
        }
    }

    fn report(&self, ready: &OwnedFd, r: Ready) {
        let mut line = serde_json::to_vec(&r).unwrap_or_default();
        line.push(b'\n');
        let _ = send(ready.as_raw_fd(), &line, MsgFlags::MSG_NOSIGNAL);
    }

    /// Cgroup, init, namespaces, socket: everything up to READY.
    #[allow(clippy::type_complexity)]
    fn start(&mut self) -> Result<(SignalFd, OwnedFd, Init, Option<(SandboxCgroup, Leaf)>), SandboxError> {
        let set = signals();
        crate::sys::signal::block(&set).map_err(|e| errno_err(Phase::Signals, e))?;
        let signals = SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
            .map_err(|e| errno_err(Phase::Signals, e))?;
        let listener = proto::listen_at(&self.dir)?;
        let cgroup = match &self.plan.cgroup {
            CgroupPlan::Disabled => None,
            p => {
                let cg = p
                    .create(&format!("{SANDBOX_PREFIX}{}", self.rec.id))
                    .map_err(cgroup_err)?
                    .ok_or_else(|| setup_err(Phase::Cgroup, "no cgroup was created"))?;
                let tree = cg.tree();
                tree.prepare().map_err(cgroup_err)?;
                let leaf = tree.leaf("init").map_err(cgroup_err)?;
                self.rec.cgroup = Some(tree);
                self.rec.limits = Some(AppliedLimits::Cgroup(Box::new(cg.limits().clone())));
                Some((cg, leaf))
            }
        };
        if cgroup.is_none() {
            self.rec.limits = Some(AppliedLimits::NoCgroup);
        }
        let join = cgroup.as_ref().map(|(_, leaf)| leaf as &dyn CgroupJoin);
        let init = match self.restore.take() {
            Some(dir) => self.backend.create_restored(&mut self.plan, join, &dir)?,
            None => self.backend.create(&mut self.plan, join)?,
        };
        self.rec.init = ProcRef::of(init.pid());
        self.rec.published = init.published();
        // Ready means warm: an interpreter that cannot start (python3
        // missing, a module that does not import) fails the create.
        if let Err(e) = self.start_warm(init.as_ref()) {
            let tree = self.rec.cgroup.clone();
            init.stop(&|| {
                if let Some(t) = &tree {
                    let _ = t.kill_all();
                }
            });
            return Err(e);
        }
        for (kind, fd) in init.namespaces() {
            if let Ok(st) = nix::sys::stat::fstat(fd) {
                self.rec.namespaces.insert(kind.to_string(), st.st_ino);
            }
        }
        self.ready(signals, listener, init, cgroup)
    }

    #[allow(clippy::type_complexity)]
    fn ready(
        &mut self,
        signals: SignalFd,
        listener: OwnedFd,
        init: Init,
        cgroup: Option<(SandboxCgroup, Leaf)>,
    ) -> Result<(SignalFd, OwnedFd, Init, Option<(SandboxCgroup, Leaf)>), SandboxError> {
        self.rec.state = if self.checking { State::Creating } else { State::Ready };
        self.renew(None);
        self.journal = Journal::new(self.rec.cgroup.as_ref());
        self.spare = self.make_spare();
        if let Err(e) = state::write_record(&self.dir, &self.rec) {
            let tree = self.rec.cgroup.clone();
            init.stop(&|| {
                if let Some(t) = &tree {
                    let _ = t.kill_all();
                }
            });
            return Err(e);
        }
        Ok((signals, listener, init, cgroup))
    }

    /// How the sandbox ended, for its tombstone.
    fn ending(&self, end: &End) -> (tombstone::Ending, String) {
        use tombstone::Ending;
        let secs = |ms: u64| if ms.is_multiple_of(1000) { format!("{}s", ms / 1000) } else { format!("{ms}ms") };
        match end {
            _ if self.rec.state == State::Failed => {
                (Ending::Failed, self.rec.error.clone().unwrap_or_else(|| "its setup failed".into()))
            }
            End::Unclaimed => (Ending::Removed, "husk create ended before it handed the sandbox's id over".into()),
            End::NotReady => (Ending::Failed, "its readiness check (--ready-cmd) failed".into()),
            End::Removed => (Ending::Removed, "by husk rm".into()),
            End::Expired => {
                (Ending::Expired, format!("its lease (--ttl {}) ran out with no exec or renew", secs(self.rec.ttl_ms)))
            }
            End::MaxLifetime => (
                Ending::MaxLifetime,
                format!("it reached its --max-lifetime of {}", secs(self.rec.max_lifetime_ms.unwrap_or(0))),
            ),
            End::Signal(s) => (Ending::Removed, format!("its supervisor got {}", crate::outcome::signal_name(*s))),
            End::InitDied(w) => (Ending::Failed, w.clone()),
        }
    }

    /// Tears the sandbox down and exits: every process (cgroup kill, then
    /// the init, whose end ends its pid namespace), the namespaces' last
    /// references, the cgroups, the name, the directory.
    fn destroy(mut self, end: End, init: Option<Init>, cgroup: Option<(SandboxCgroup, Leaf)>) -> ! {
        let (st, error) = match &end {
            End::Unclaimed => {
                (State::Destroyed, Some("husk create ended before it handed the sandbox's id over".to_string()))
            }
            End::NotReady => (State::Failed, Some("its readiness check (--ready-cmd) failed".to_string())),
            End::Removed => (State::Destroyed, None),
            End::Expired => (State::Destroyed, Some("lease expired".to_string())),
            End::MaxLifetime => (State::Destroyed, Some("max lifetime reached".to_string())),
            End::Signal(s) => (State::Destroyed, Some(format!("supervisor got {}", crate::outcome::signal_name(*s)))),
            End::InitDied(w) => (State::Failed, Some(w.clone())),
        };
        let (ending, why) = self.ending(&end);
        if self.rec.state != State::Failed {
            self.rec.state = st;
            self.rec.error = error;
        }
        let _ = state::write_record(&self.dir, &self.rec);
        // A v1 freezer's frozen tasks do not die until thawed.
        self.thaw_now();
        self.stop_warm();
        let kill_group = || {
            if let Some(tree) = &self.rec.cgroup {
                let _ = tree.kill_all();
            }
        };
        match init {
            Some(init) => init.stop(&kill_group),
            None => kill_group(),
        }
        if let Some((cg, leaf)) = cgroup {
            drop(leaf);
            let report = cg.finish();
            if report.cleanup.is_some()
                && let Some(tree) = &self.rec.cgroup
            {
                let _ = Tree::remove(tree);
            }
        }
        let store = Store { root: self.store_root.clone() };
        tombstone::write(&store, &tombstone::now(&self.rec.id, self.rec.name.clone(), ending, Some(why)));
        if let Some(name) = &self.rec.name {
            store.release_name(name, &self.rec.id);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        drop(self.lock);
        exit_now(0)
    }
}

/// stdin, stdout and stderr onto /dev/null.
fn detach_stdio() {
    if let Ok(null) = nix::fcntl::open(
        c"/dev/null",
        nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    ) {
        for fd in 0..3 {
            let _ = crate::sys::fd::dup_onto(null.as_raw_fd(), fd);
        }
    }
}
