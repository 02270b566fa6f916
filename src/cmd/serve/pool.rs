//! husk serve's pools: the one piece of state serve keeps, held by its
//! accept loop's process (`serve::server::Chores`).
//!
//! A member is an ordinary sandbox made by a child `husk create` (the same
//! code path as any create: namespaces, mounts, cgroup, seccomp done, no
//! workload) with the labels `husk.pool=NAME`, `husk.pool.spec=DIGEST` and
//! serve's address. Connection processes are forked from the loop, so each
//! sees the pools as they were when it was accepted: it claims a member
//! straight from its supervisor (`sandbox::pool::claim`, atomic there) and
//! tells the loop what happened over a pipe (`Note`); the loop reads the
//! pipe before it accepts the next connection, so a client's next request
//! sees the count its last claim changed. The loop refills in the
//! background (never while a claim waits: a claim with nothing READY is a
//! miss and a cold create), checks members' supervisors every second,
//! renews members' leases (so members of a serve killed outright expire on
//! their own), and stops growing at the memory budget.

use super::spec::PoolSpec;
use crate::sandbox::CreateOptions;
use crate::sandbox::pool::{POOL_LABEL, Retired, SPEC_LABEL, retire};
use crate::sandbox::proto::{Client, Request};
use crate::sandbox::state::{self, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// An unclaimed member's lease; serve renews it well before it runs out,
/// so only a serve that is gone lets it expire.
pub const MEMBER_TTL: Duration = Duration::from_secs(600);
/// How often members' supervisors are checked.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// `husk create`s running at once for one pool.
const MAX_CREATING: usize = 2;
/// A failed refill waits this long before the next (doubling to the max).
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A member is replaced once it has used this share of its maximum
/// lifetime (1 h of the default 24 h): a claim hands out a sandbox with at
/// least the rest ahead of it, not one about to reach its end.
const MEMBER_MAX_AGE_SHARE: u64 = 24;
/// A pool's refill failures are said on serve's stderr at most this often
/// (the first at once, then a count of those in between).
const SAY_FAILURES_EVERY: Duration = Duration::from_secs(60);

/// What a connection's process tells the loop (one JSON line, shorter
/// than PIPE_BUF, so lines from several processes never interleave).
#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
pub enum Note {
    Claimed {
        pool: String,
        id: String,
    },
    Miss {
        pool: String,
    },
    /// A member refused a claim or did not answer: check it.
    Suspect {
        pool: String,
        id: String,
    },
    Add {
        spec: Box<PoolSpec>,
    },
    Delete {
        pool: String,
    },
}

/// What a shutdown did with the members the loop knew of.
#[derive(Debug, Default)]
pub struct Shutdown {
    /// Unclaimed members removed.
    pub removed: usize,
    /// Claimed while serve stopped (before the loop heard of it): left to
    /// their callers.
    pub claimed: usize,
    /// Did not answer: left to their lease.
    pub silent: usize,
}

/// The most a `Note` line may be (PIPE_BUF).
pub const MAX_NOTE: usize = 4096;

#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetSource {
    /// `--pool-memory-budget`.
    Flag,
    /// Half of MemAvailable when serve started.
    HalfAvailable,
}

pub struct Pool {
    pub spec: PoolSpec,
    options: CreateOptions,
    digest: String,
    cost: u64,
    /// READY members, oldest first (claimed first).
    pub members: VecDeque<String>,
    creating: Vec<i32>,
    claims: u64,
    misses: u64,
    replaced: u64,
    adopted: u64,
    cleaned: u64,
    failures: u64,
    last_error: Option<String>,
    budget_limited: bool,
    retry_at: Option<Instant>,
    backoff: Duration,
    /// When a refill failure was last said on stderr, and how many were
    /// not said since.
    said_at: Option<Instant>,
    unsaid: u64,
    /// Members' `(lifetime_ends_ms, max_lifetime_ms)`, by id.
    lifetimes: std::collections::HashMap<String, (u64, u64)>,
}

impl Pool {
    fn new(spec: PoolSpec, options: CreateOptions, mem_total: u64) -> Pool {
        Pool {
            digest: spec.digest(),
            cost: spec.cost(mem_total),
            spec,
            options,
            members: VecDeque::new(),
            creating: Vec::new(),
            claims: 0,
            misses: 0,
            replaced: 0,
            adopted: 0,
            cleaned: 0,
            failures: 0,
            last_error: None,
            budget_limited: false,
            retry_at: None,
            backoff: FIRST_BACKOFF,
            said_at: None,
            unsaid: 0,
            lifetimes: Default::default(),
        }
    }

    /// A member joins, with its lifetime as its record says it (created
    /// at, ends at).
    fn join(&mut self, id: String, created_ms: Option<u64>, ends_ms: Option<u64>) {
        if let (Some(c), Some(e)) = (created_ms, ends_ms) {
            self.lifetimes.insert(id.clone(), (e, e.saturating_sub(c)));
        }
        self.members.push_back(id);
    }

    /// Whether a member has used its share of its maximum lifetime.
    fn aged(&self, id: &str, now_ms: u64) -> bool {
        self.lifetimes.get(id).is_some_and(|(ends, max)| now_ms + max - max / MEMBER_MAX_AGE_SHARE > *ends)
    }

    /// A refill failed: kept for GET /v1/pools and claims, retried later,
    /// and said on serve's stderr (rate-limited: a pool whose image is
    /// missing fails every 30 s for as long as serve runs).
    fn failed(&mut self, why: String, now: Instant) {
        self.failures += 1;
        self.retry_at = Some(now + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        if self.said_at.is_none_or(|t| now.duration_since(t) >= SAY_FAILURES_EVERY) {
            let more = match self.unsaid {
                0 => String::new(),
                n => format!(" ({n} more failed since the last said here)"),
            };
            crate::errln!("husk serve: pool {}: a refill failed{more}: {why}", self.spec.name);
            self.said_at = Some(now);
            self.unsaid = 0;
        } else {
            self.unsaid += 1;
        }
        self.last_error = Some(why);
    }

    /// Why a claim found nothing READY, when refills have been failing.
    pub fn refill_trouble(&self) -> Option<String> {
        let last = self.last_error.as_deref().filter(|_| self.members.is_empty())?;
        Some(format!(
            "pool {:?} has no ready member: {} refill(s) failed, the last with: {last}",
            self.spec.name, self.failures
        ))
    }

    /// The create request of its members (and of a miss's cold create).
    pub fn options(&self) -> &CreateOptions {
        &self.options
    }

    pub fn json(&self) -> Value {
        json!({
            "name": self.spec.name,
            "spec": self.spec,
            "size": self.spec.size,
            "ready": self.members.len(),
            "creating": self.creating.len(),
            "claims": self.claims,
            "misses": self.misses,
            "replaced": self.replaced,
            "adopted": self.adopted,
            "cleaned": self.cleaned,
            "failures": self.failures,
            "last_error": self.last_error,
            "member_memory": self.cost,
            "budget_limited": self.budget_limited,
        })
    }
}

/// A running refill: the `husk create` child and where its output goes.
struct Refill {
    pid: i32,
    pool: String,
    out: PathBuf,
    err: PathBuf,
}

pub struct Pools {
    pools: Vec<Pool>,
    store: Option<Store>,
    /// `--root` and `--state-dir`, as serve was given them.
    dirs: Dirs,
    address: String,
    work: PathBuf,
    budget: u64,
    budget_source: BudgetSource,
    mem_total: u64,
    rx: Option<OwnedFd>,
    tx: Option<OwnedFd>,
    inbox: Vec<u8>,
    refills: Vec<Refill>,
    serial: u64,
    next_check: Instant,
    next_renew: Instant,
}

/// Where a pool cannot start.
#[derive(Debug, thiserror::Error)]
pub enum PoolsError {
    #[error(transparent)]
    Spec(#[from] super::spec::SpecError),
    #[error("pool {0:?} is given twice")]
    Duplicate(String),
    #[error("pools need husk's state dir: {0}")]
    State(String),
    #[error("pools: making the notification pipe: {0}")]
    Pipe(nix::errno::Errno),
}

/// MemAvailable from /proc/meminfo, in bytes.
fn mem_available() -> u64 {
    let text = crate::files::read_text("/proc/meminfo").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

impl Pools {
    pub fn new(
        specs: Vec<PoolSpec>,
        store: Option<Store>,
        dirs: Dirs,
        address: String,
        budget: Option<u64>,
    ) -> Result<Pools, PoolsError> {
        let mem_total = nix::sys::sysinfo::sysinfo().map(|s| s.ram_total()).unwrap_or(0);
        let (budget, budget_source) = match budget {
            Some(b) => (b, BudgetSource::Flag),
            None => (mem_available() / 2, BudgetSource::HalfAvailable),
        };
        let mut pools: Vec<Pool> = Vec::new();
        for spec in specs {
            let options = spec.validate()?;
            if pools.iter().any(|p| p.spec.name == spec.name) {
                return Err(PoolsError::Duplicate(spec.name));
            }
            pools.push(Pool::new(spec, options, mem_total));
        }
        let work = match &store {
            Some(s) => s.state_dir().join("pools"),
            None if pools.is_empty() => PathBuf::new(),
            None => return Err(PoolsError::State("no usable state dir".into())),
        };
        if store.is_some() {
            crate::paths::ensure_private_dir("pools dir", &work).map_err(|e| PoolsError::State(e.to_string()))?;
            sweep_refill_files(&work);
        }
        let (rx, tx) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
            .map_err(PoolsError::Pipe)?;
        // Writers (connection processes) block: a note is never dropped.
        nix::fcntl::fcntl(&tx, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty())).map_err(PoolsError::Pipe)?;
        let now = Instant::now();
        Ok(Pools {
            pools,
            store,
            dirs,
            address,
            work,
            budget,
            budget_source,
            mem_total,
            rx: Some(rx),
            tx: Some(tx),
            inbox: Vec::new(),
            refills: Vec::new(),
            serial: 0,
            next_check: now,
            next_renew: now + MEMBER_TTL / 4,
        })
    }

    /// `--root` and `--state-dir` for the refills' creates.
    pub fn set_dirs(&mut self, dirs: Dirs) {
        self.dirs = dirs;
    }

    pub fn find(&self, name: &str) -> Option<&Pool> {
        self.pools.iter().find(|p| p.spec.name == name)
    }

    fn reserved(&self) -> u64 {
        self.pools.iter().map(|p| (p.members.len() + p.creating.len()) as u64 * p.cost).sum()
    }

    /// GET /v1/pools.
    pub fn json(&self) -> Value {
        json!({
            "pools": self.pools.iter().map(Pool::json).collect::<Vec<_>>(),
            "memory_budget": {"bytes": self.budget, "reserved": self.reserved(), "source": self.budget_source},
        })
    }

    /// In a connection's process: tells the loop.
    pub fn notify(&self, note: &Note) {
        let Some(tx) = &self.tx else { return };
        let mut line = serde_json::to_vec(note).unwrap_or_default();
        line.push(b'\n');
        if line.len() <= MAX_NOTE {
            let _ = nix::unistd::write(tx, &line);
        }
    }

    /// At start: members a previous serve on this address left. Those of a
    /// pool with the same spec are adopted (up to its size); the rest are
    /// removed.
    pub fn adopt(&mut self) {
        let Some(store) = &self.store else { return };
        for rec in crate::sandbox::registry::records(store) {
            let Some(pool) = rec.labels.get(POOL_LABEL) else { continue };
            if rec.labels.get(super::SERVE_LABEL) != Some(&self.address) {
                continue;
            }
            let fresh = rec.execs == 0 && rec.state == state::State::Ready;
            match self.pools.iter_mut().find(|p| &p.spec.name == pool) {
                Some(p)
                    if fresh
                        && rec.labels.get(SPEC_LABEL) == Some(&p.digest)
                        && p.members.len() < p.spec.size as usize =>
                {
                    p.join(rec.id.clone(), Some(rec.created_ms), rec.lifetime_ends_ms);
                    p.adopted += 1;
                }
                found => {
                    // Retired, not destroyed: a claim of the previous serve
                    // may be answering right now, and that sandbox is its
                    // caller's.
                    if retire(store, &rec.id, pool) == Retired::Ending {
                        let _ = crate::sandbox::lifecycle::wait_removed(store, &rec.id, rec.supervisor);
                    }
                    if let Some(p) = found {
                        p.cleaned += 1;
                    }
                    crate::errln!("husk serve: removed pool member {} (of pool {pool}, not adopted)", rec.id);
                }
            }
        }
        self.renew_members();
    }

    fn handle(&mut self, note: Note) {
        match note {
            Note::Claimed { pool, id } => {
                if let Some(p) = self.pools.iter_mut().find(|p| p.spec.name == pool) {
                    p.members.retain(|m| *m != id);
                    p.claims += 1;
                }
            }
            Note::Miss { pool } => {
                if let Some(p) = self.pools.iter_mut().find(|p| p.spec.name == pool) {
                    p.misses += 1;
                }
            }
            Note::Suspect { pool, id } => self.check_suspect(&pool, &id),
            Note::Add { spec } => {
                if self.find(&spec.name).is_none()
                    && let Ok(options) = spec.validate()
                {
                    self.pools.push(Pool::new(*spec, options, self.mem_total));
                }
            }
            Note::Delete { pool } => {
                if let Some(i) = self.pools.iter().position(|p| p.spec.name == pool) {
                    let p = self.pools.remove(i);
                    if let Some(store) = &self.store {
                        for id in &p.members {
                            retire(store, id, &pool);
                        }
                    }
                }
            }
        }
    }

    /// A member that refused a claim or did not answer: gone, claimed by
    /// someone else, or used (not fresh: removed and replaced).
    fn check_suspect(&mut self, pool: &str, id: &str) {
        let Some(store) = &self.store else { return };
        let Some(p) = self.pools.iter_mut().find(|p| p.spec.name == pool) else { return };
        if !p.members.iter().any(|m| m == id) {
            return;
        }
        let verdict = match crate::sandbox::registry::current(store, id) {
            Err(_) => Some(false),
            Ok(r) if r.labels.get(POOL_LABEL).map(String::as_str) != Some(pool) => Some(true),
            Ok(r) if r.execs > 0 || r.active_execs > 0 || !state::supervised(&store.dir(id)) => {
                retire(store, id, pool);
                Some(false)
            }
            Ok(_) => None,
        };
        match verdict {
            // Claimed by another serve or by hand: not ours any more.
            Some(true) => p.members.retain(|m| m != id),
            Some(false) => {
                p.members.retain(|m| m != id);
                p.replaced += 1;
            }
            None => {}
        }
    }

    /// Every second: members whose supervisor is gone, or that have used
    /// their share of their maximum lifetime, are replaced.
    fn check_members(&mut self) {
        let Some(store) = &self.store else { return };
        let now_ms = crate::sandbox::state::now_ms();
        for p in &mut self.pools {
            let before = p.members.len();
            let aged: Vec<String> = p.members.iter().filter(|id| p.aged(id, now_ms)).cloned().collect();
            p.members.retain(|id| {
                if aged.contains(id) {
                    // Retired, not destroyed: a claim may be answering now,
                    // and a claimed member is its caller's.
                    retire(store, id, &p.spec.name);
                    return false;
                }
                let dir = store.dir(id);
                match state::try_lock(&dir) {
                    Ok(None) => true,
                    _ => {
                        let _ = crate::sandbox::gc::sweep_one(store, id);
                        false
                    }
                }
            });
            let members = &p.members;
            p.lifetimes.retain(|id, _| members.contains(id));
            p.replaced += (before - p.members.len()) as u64;
        }
    }

    fn renew_members(&mut self) {
        let Some(store) = &self.store else { return };
        for id in self.pools.iter().flat_map(|p| p.members.iter()) {
            let dir = store.dir(id);
            if let Ok(rec) = store.read(id)
                && let Ok(c) = Client::connect(&dir, rec.supervisor)
            {
                let _ = c.timeout(Duration::from_secs(1)).call(&Request::Renew { ttl_ms: None });
            }
        }
        self.next_renew = Instant::now() + MEMBER_TTL / 4;
    }

    /// Starts `husk create`s for pools below their size, within the budget.
    fn refill(&mut self) {
        let now = Instant::now();
        let mut reserved = self.reserved();
        for i in 0..self.pools.len() {
            self.pools[i].budget_limited = false;
            if self.pools[i].retry_at.is_some_and(|t| now < t) {
                continue;
            }
            loop {
                let p = &self.pools[i];
                if p.members.len() + p.creating.len() >= p.spec.size as usize || p.creating.len() >= MAX_CREATING {
                    break;
                }
                if reserved + p.cost > self.budget {
                    self.pools[i].budget_limited = true;
                    break;
                }
                self.serial += 1;
                let spawned = spawn_create(&self.dirs, &self.address, &self.work, p, self.serial);
                let p = &mut self.pools[i];
                match spawned {
                    Ok(r) => {
                        p.creating.push(r.pid);
                        reserved += p.cost;
                        self.refills.push(r);
                    }
                    Err(e) => {
                        p.failed(e.to_string(), now);
                        break;
                    }
                }
            }
        }
    }

    /// A refill ended: its member joins the pool, or its error is kept.
    fn finished(&mut self, r: Refill, ok: bool) {
        let out = std::fs::read(&r.out).unwrap_or_default();
        let err = std::fs::read_to_string(&r.err).unwrap_or_default();
        let _ = std::fs::remove_file(&r.out);
        let _ = std::fs::remove_file(&r.err);
        let answer = super::isolated::read_answer(&out);
        let v = match &answer {
            Ok(super::isolated::Answer::Created(v)) => v.clone(),
            _ => Value::Null,
        };
        let id = v["id"].as_str().filter(|id| ok && state::is_id(id)).map(str::to_string);
        let Some(p) = self.pools.iter_mut().find(|p| p.spec.name == r.pool) else {
            // Its pool was deleted meanwhile.
            if let (Some(id), Some(store)) = (id, &self.store) {
                retire(store, &id, &r.pool);
            }
            return;
        };
        p.creating.retain(|pid| *pid != r.pid);
        match id {
            Some(id) => {
                p.join(id, v["created_ms"].as_u64(), v["lifetime_ends_ms"].as_u64());
                p.backoff = FIRST_BACKOFF;
                p.retry_at = None;
            }
            None => {
                let why = match answer {
                    Ok(super::isolated::Answer::Failed { error, .. }) => error["message"].as_str().map(str::to_string),
                    _ => None,
                };
                p.failed(why.unwrap_or_else(|| err.trim().to_string()), Instant::now());
            }
        }
    }

    fn drain(&mut self) {
        let Some(rx) = &self.rx else { return };
        let mut buf = [0u8; 8192];
        loop {
            match nix::unistd::read(rx, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.inbox.extend_from_slice(&buf[..n]),
            }
        }
        while let Some(end) = self.inbox.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.inbox.drain(..=end).collect();
            if let Ok(note) = serde_json::from_slice::<Note>(&line) {
                self.handle(note);
            }
        }
    }

    /// SIGTERM: the refills in flight are waited for, then every unclaimed
    /// member is removed (they are the pool's, not any caller's).
    ///
    /// The loop's member list may lag behind claims: a connection's process
    /// claims straight from the supervisor and tells the loop afterwards,
    /// and a claim can be answering while the stop signal arrives. So a
    /// member is not destroyed but retired (`sandbox::pool::retire`), which
    /// its supervisor refuses once it has been claimed: a caller's sandbox
    /// is never taken from it by the pool's shutdown.
    pub fn shutdown(&mut self) -> Shutdown {
        self.drain();
        for r in std::mem::take(&mut self.refills) {
            let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(r.pid), None);
            let ok = matches!(status, Ok(nix::sys::wait::WaitStatus::Exited(_, 0)));
            self.finished(r, ok);
        }
        let mut done = Shutdown::default();
        let Some(store) = &self.store else { return done };
        let mut ending = Vec::new();
        // All asked first, then each waited for: they end in parallel.
        for p in &mut self.pools {
            for id in std::mem::take(&mut p.members) {
                let sup = store.read(&id).ok().and_then(|r| r.supervisor);
                match retire(store, &id, &p.spec.name) {
                    Retired::Ending => ending.push((id, sup)),
                    Retired::Claimed => done.claimed += 1,
                    Retired::Silent if store.dir(&id).exists() => {
                        crate::errln!("husk serve: pool member {id} did not answer; its lease will end it");
                        done.silent += 1;
                    }
                    Retired::Silent => done.removed += 1,
                }
            }
        }
        for (id, sup) in &ending {
            if crate::sandbox::lifecycle::wait_removed(store, id, *sup) {
                done.removed += 1;
            } else {
                crate::errln!("husk serve: pool member {id} was not removed; `husk gc` retries");
            }
        }
        done
    }

    /// The connection's process drops the loop's end of the pipe.
    pub fn forked(&mut self) {
        self.rx = None;
        self.refills.clear();
    }
}

impl crate::serve::server::Chores for Pools {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.rx.as_ref().map(|f| f.as_fd())
    }

    fn timeout(&self) -> Option<Duration> {
        if self.pools.is_empty() {
            return None;
        }
        let now = Instant::now();
        let retry = self.pools.iter().filter_map(|p| p.retry_at).min();
        let next = retry.map_or(self.next_check, |r| r.min(self.next_check));
        Some(next.saturating_duration_since(now))
    }

    fn tend(&mut self) {
        self.drain();
        let now = Instant::now();
        if now >= self.next_check {
            self.check_members();
            self.next_check = now + CHECK_EVERY;
        }
        if now >= self.next_renew {
            self.renew_members();
        }
        self.refill();
    }

    fn reaped(&mut self, pid: i32, status: libc::c_int) -> bool {
        let Some(i) = self.refills.iter().position(|r| r.pid == pid) else { return false };
        let r = self.refills.remove(i);
        let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        self.finished(r, ok);
        true
    }
}

/// Removes the output files of refills whose serve is gone (SIGKILLed
/// before it read them): `.refill-<serve pid>-<n>.{out,err}` of a pid
/// that no longer exists. Another serve's on the same state dir (another
/// address) is alive and keeps its own.
fn sweep_refill_files(work: &std::path::Path) {
    let Ok(dir) = std::fs::read_dir(work) else { return };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(".refill-"))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
        else {
            continue;
        };
        let gone =
            pid > 0 && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH);
        if gone {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// `--root` and `--state-dir` as serve was given them (the creates resolve
/// the same store and state dir).
pub type Dirs = (Option<PathBuf>, Option<PathBuf>);

/// Why a member's create could not be started.
#[derive(Debug, thiserror::Error)]
enum RefillError {
    #[error("creating {}: {err}", .path.display())]
    File { path: PathBuf, err: std::io::Error },
    #[error(transparent)]
    Spawn(#[from] super::isolated::SpawnError),
}

/// One member's create, in a child of the loop's (isolated.rs: the
/// supervisor must not keep the listening socket or pending connections),
/// its answer and complaints in files the loop reads when it has been
/// reaped.
fn spawn_create(dirs: &Dirs, address: &str, work: &std::path::Path, p: &Pool, n: u64) -> Result<Refill, RefillError> {
    use std::os::fd::AsFd;
    let out = work.join(format!(".refill-{}-{n}.out", std::process::id()));
    let err = work.join(format!(".refill-{}-{n}.err", std::process::id()));
    let file =
        |path: &PathBuf| std::fs::File::create(path).map_err(|e| RefillError::File { path: path.clone(), err: e });
    let mut o = p.options.clone();
    o.ttl = MEMBER_TTL;
    o.labels.insert(POOL_LABEL.into(), p.spec.name.clone());
    o.labels.insert(SPEC_LABEL.into(), p.digest.clone());
    o.labels.insert(super::SERVE_LABEL.into(), address.into());
    let paths = crate::paths::Paths::from_cli(dirs.0.as_deref(), dirs.1.as_deref());
    let (out_f, err_f) = (file(&out)?, file(&err)?);
    let pid = super::isolated::spawn(&o, &paths, out_f.as_fd(), err_f.as_fd())?;
    // Reaped by the loop (waitpid(-1)), not here.
    Ok(Refill { pid: pid.as_raw(), pool: p.spec.name.clone(), out, err })
}
