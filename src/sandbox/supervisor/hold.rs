//! The lease a sandbox's supervisor holds: one poll over the init's
//! pidfd, its signals, its socket (exec, renew, status, rm), husk create's
//! handover and the lease deadline; each request answered in turn.

use super::refusal::Refusal;
use super::{End, Init, Supervisor};
use crate::backend::Live;
use crate::sandbox::events::EventKind;
use crate::sandbox::proto::{self, Reply, Request};
use crate::sandbox::state::{self, State, now_ms};
use crate::sys::process::wait_pidfd;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signalfd::SignalFd;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// One client connection.
struct Conn {
    fd: OwnedFd,
    /// The exec this connection runs, once started.
    exec: Option<u64>,
    /// Its cgroup leaf.
    leaf: Option<String>,
    /// Queued for its turn (`exec --wait`).
    waiting: bool,
    /// The id an exec without a cgroup leaf announced
    /// (`Request::Exec::exec_id`).
    exec_id: Option<String>,
    /// The journal's sequence number of this exec's start: `events`
    /// answers with what came after it.
    since: u64,
    /// `exec --code`: it asked for the warm interpreter's control socket.
    warm: bool,
    /// Its hold on the sandbox's freeze (`Request::Freeze`).
    freeze: Option<super::freeze::Hold>,
    /// Its hold ran out before it said `Thaw`.
    freeze_lapsed: bool,
    /// Queued behind a freeze: when its own `--timeout` runs out
    /// (`Request::Exec::timeout_ms`), it stops waiting and never starts.
    wait_until: Option<u64>,
    /// When it joined the queue behind a freeze (`Reply::frozen_wait_ms`).
    queued_at: Option<u64>,
}

impl Supervisor {
    /// The lease: serves the socket until the sandbox is to end.
    /// `handover`: husk create's end, until it confirms that the id reached
    /// its caller; its hang-up before that ends the sandbox.
    pub(super) fn hold(
        &mut self,
        signals: &SignalFd,
        listener: &OwnedFd,
        init: &mut Init,
        mut handover: Option<OwnedFd>,
    ) -> End {
        let mut conns: Vec<Conn> = Vec::new();
        loop {
            let active = conns.iter().filter(|c| c.exec.is_some()).count();
            let waiting = conns.iter().any(|c| c.waiting);
            let now = now_ms();
            self.lapse_freezes(&mut conns, now);
            self.lapse_waits(&mut conns, now);
            // The maximum lifetime is absolute: it ends running execs too.
            if self.rec.lifetime_ends_ms.is_some_and(|end| now >= end) {
                return End::MaxLifetime;
            }
            if active == 0 && !waiting && !self.is_frozen() && now >= self.rec.expires_ms {
                return End::Expired;
            }
            // Paused: the lease does not run (pause.rs), so no wake-up for it.
            let idle_end = (active == 0 && !self.is_paused()).then_some(self.rec.expires_ms);
            let thaw_at = conns.iter().filter_map(|c| c.freeze.map(|h| h.until_ms));
            let give_up_at = conns.iter().filter_map(|c| c.wait_until.filter(|_| c.waiting));
            let timeout =
                match idle_end.into_iter().chain(self.rec.lifetime_ends_ms).chain(thaw_at).chain(give_up_at).min() {
                    Some(end) => {
                        PollTimeout::try_from(end.saturating_sub(now).min(60_000) + 1).unwrap_or(PollTimeout::MAX)
                    }
                    None => PollTimeout::NONE,
                };
            // Checkpointed (pause.rs), the sandbox has no process to watch.
            let saved = self.saved();
            let init_fd = if saved { signals.as_fd() } else { init.pidfd().as_fd() };
            let mut fds = vec![
                PollFd::new(init_fd, PollFlags::POLLIN),
                PollFd::new(signals.as_fd(), PollFlags::POLLIN),
                PollFd::new(listener.as_fd(), PollFlags::POLLIN),
            ];
            let handover_at = handover.as_ref().map(|h| {
                fds.push(PollFd::new(h.as_fd(), PollFlags::POLLIN));
                fds.len() - 1
            });
            let warm_at = self.warm.as_ref().map(|w| {
                fds.push(PollFd::new(w.pidfd.as_fd(), PollFlags::POLLIN));
                fds.push(PollFd::new(w.ctl.as_fd(), PollFlags::POLLIN));
                fds.len() - 2
            });
            let placing_at = self.placing.as_ref().map(|p| {
                fds.push(PollFd::new(p.done.as_fd(), PollFlags::POLLIN));
                fds.len() - 1
            });
            let base = fds.len();
            fds.extend(conns.iter().map(|c| PollFd::new(c.fd.as_fd(), PollFlags::POLLIN)));
            if let Err(e) = poll(&mut fds, timeout)
                && e != nix::errno::Errno::EINTR
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            let ready: Vec<bool> = fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect();
            drop(fds);
            if ready[0] && !saved {
                // The init's end waits for every process of its pid
                // namespace to be reaped: the warm interpreter's waiter is
                // ours to reap.
                self.stop_warm();
                let status = wait_pidfd(init.pidfd().as_fd());
                return End::InitDied(format!("the sandbox's init ended on its own ({status:?})"));
            }
            if ready[1]
                && let Ok(Some(info)) = signals.read_signal()
            {
                return End::Signal(info.ssi_signo as i32);
            }
            if handover_at.is_some_and(|i| ready[i]) {
                let mut byte = [0u8; 1];
                match handover.as_ref().map(|h| nix::unistd::read(h, &mut byte)) {
                    Some(Ok(1)) if byte[0] == super::PROMOTE && self.checking => {
                        self.checking = false;
                        self.sync_state(active_of(&conns));
                        if let Some(h) = &handover {
                            let _ = nix::sys::socket::send(
                                h.as_raw_fd(),
                                &[super::PROMOTE],
                                nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
                            );
                        }
                    }
                    Some(Ok(1)) if byte[0] == super::NOT_READY => return End::NotReady,
                    Some(Ok(1)) if !self.checking => handover = None,
                    Some(Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN)) => {}
                    _ => return End::Unclaimed,
                }
            }
            if placing_at.is_some_and(|i| ready[i]) {
                self.finish_placing();
            }
            if warm_at.is_some_and(|i| ready[i]) {
                self.restart_warm(init.as_ref());
            } else if warm_at.is_some_and(|i| ready[i + 1]) {
                self.place_spare();
            }
            if ready[2] {
                while let Ok(Some(fd)) = proto::accept(listener.as_fd()) {
                    conns.push(Conn {
                        fd,
                        exec: None,
                        leaf: None,
                        waiting: false,
                        exec_id: None,
                        since: 0,
                        warm: false,
                        freeze: None,
                        freeze_lapsed: false,
                        wait_until: None,
                        queued_at: None,
                    });
                }
            }
            let mut changed = false;
            let mut keep = vec![true; conns.len()];
            // Connections accepted just now were not polled yet.
            let polled = conns.len().min(ready.len() - base);
            for i in 0..polled {
                if !ready[base + i] {
                    continue;
                }
                changed = true;
                let active = active_of(&conns);
                match self.serve(&mut conns[i], active, init) {
                    Served::Keep => {}
                    Served::Close => {
                        keep[i] = false;
                        // However it closes (a reply that could not be sent:
                        // the reader died while the freeze settled), its
                        // hold goes with it.
                        if conns[i].freeze.take().is_some() {
                            self.release_freeze();
                        }
                    }
                    Served::End => return End::Removed,
                }
            }
            let mut k = keep.into_iter();
            conns.retain(|_| k.next().unwrap_or(true));
            // A finished exec makes room for the next queued one.
            while !conns.is_empty() && !self.is_frozen() && (self.rec.concurrent || active_of(&conns) == 0) {
                let Some(c) = conns.iter_mut().find(|c| c.waiting) else { break };
                c.waiting = false;
                c.wait_until = None;
                if !self.start_exec(c, init.as_ref()) {
                    c.exec = None;
                }
                changed = true;
            }
            changed |= self.journal.sample(self.rec.cgroup.as_ref());
            if changed {
                self.sync_state(active_of(&conns));
            }
        }
    }

    /// Answers one request.
    fn serve(&mut self, c: &mut Conn, active: usize, init: &mut Init) -> Served {
        let req = match proto::recv::<Request>(c.fd.as_fd()) {
            Ok(Some((r, _))) => r,
            // Hang-up (or garbage): the exec is over, however it ended.
            _ => {
                self.end_exec(c, init.as_ref());
                if c.freeze.take().is_some() {
                    self.release_freeze();
                }
                return Served::Close;
            }
        };
        match req {
            Request::Exec { wait, exec_id, warm, ready_check, timeout_ms } => {
                c.warm = warm;
                // While CREATING, the readiness check is the one exec; after,
                // nothing is admitted as a check.
                if ready_check != self.checking {
                    let why = if self.checking {
                        "the sandbox is still being created: its --ready-cmd check runs"
                    } else {
                        "the sandbox has no readiness check pending"
                    };
                    return self.answer(c, Reply { error: Some(why.into()), ..self.lease() });
                }
                if c.exec.is_some() || c.waiting {
                    return self.answer(
                        c,
                        Reply { error: Some("an exec already runs on this connection".into()), ..self.lease() },
                    );
                }
                if self.is_paused() {
                    let id = &self.rec.id;
                    let why = format!("sandbox {id} is paused; `husk resume {id}` lets it run commands again");
                    return self.answer(c, Reply { paused: true, error: Some(why), ..self.lease() });
                }
                c.exec_id = exec_id.filter(|x| state::is_id(x));
                // Frozen for a reader: a command started now would freeze
                // with it, so it waits for the thaw, which the reader's
                // deadline bounds (with or without --wait), and so does the
                // exec's own timeout (`lapse_waits`).
                if self.is_frozen() {
                    c.waiting = true;
                    c.queued_at = Some(now_ms());
                    c.wait_until = timeout_ms.map(|t| now_ms().saturating_add(t));
                    return Served::Keep;
                }
                if active > 0 && !self.rec.concurrent {
                    if wait {
                        c.waiting = true;
                        return Served::Keep;
                    }
                    return self.answer(c, Reply { busy: true, error: Some("busy".into()), ..self.lease() });
                }
                if self.start_exec(c, init.as_ref()) { Served::Keep } else { Served::Close }
            }
            Request::Renew { ttl_ms } => {
                self.renew(ttl_ms);
                let (ttl_ms, expires_ms) = (self.rec.ttl_ms, self.rec.expires_ms);
                self.journal.record(EventKind::Renew { ttl_ms, expires_ms });
                self.answer(c, Reply { ok: true, ..self.lease() })
            }
            Request::Status => {
                let state = match active {
                    _ if self.checking => State::Creating,
                    _ if self.is_paused() => State::Paused,
                    0 => State::Ready,
                    _ => State::Executing,
                };
                self.journal.sample(self.rec.cgroup.as_ref());
                let reply = Reply {
                    ok: true,
                    exec: self.rec.execs,
                    state: Some(state),
                    active_execs: active as u32,
                    events: self.journal.recent(),
                    network: init.network().map(Box::new),
                    paused: self.is_paused(),
                    ..self.lease()
                };
                self.answer(c, reply)
            }
            Request::Freeze { for_ms } => {
                if c.freeze.is_some() || c.exec.is_some() || c.waiting {
                    let why = "this connection already holds a freeze or runs an exec";
                    return self.answer(c, Reply { error: Some(why.into()), ..self.lease() });
                }
                match self.hold_freeze(for_ms) {
                    Ok(hold) => {
                        c.freeze = Some(hold);
                        self.answer(c, Reply { ok: true, ..self.lease() })
                    }
                    Err(why) => self.answer(c, Reply { error: Some(why.to_string()), ..self.lease() }),
                }
            }
            Request::Thaw => {
                let held = c.freeze.take().is_some();
                if held {
                    self.release_freeze();
                }
                let reply = match (held, c.freeze_lapsed) {
                    (true, _) => Reply { ok: true, ..self.lease() },
                    (false, true) => Reply {
                        error: Some(
                            "the freeze's deadline passed before the reader was done; it was thawed then".into(),
                        ),
                        ..self.lease()
                    },
                    (false, false) => Reply { error: Some("this connection holds no freeze".into()), ..self.lease() },
                };
                self.answer(c, reply)
            }
            Request::Pause { reclaim } => match self.pause(reclaim, init, active) {
                Ok(reclaimed_bytes) => {
                    self.sync_state(active);
                    {
                        let checkpoint = self.rec.checkpoint.clone();
                        self.answer(c, Reply { ok: true, paused: true, reclaimed_bytes, checkpoint, ..self.lease() })
                    }
                }
                Err(why) => self.answer(c, Reply { error: Some(why.to_string()), ..self.lease() }),
            },
            Request::Resume => match self.resume(init) {
                Ok(()) => {
                    self.sync_state(active);
                    self.answer(c, Reply { ok: true, paused: false, ..self.lease() })
                }
                Err(why) => {
                    self.sync_state(active);
                    self.answer(c, Reply { error: Some(why.to_string()), paused: true, ..self.lease() })
                }
            },
            Request::SaveMemory { tag } => match self.save_memory(init, active, &tag) {
                Ok(checkpoint) => {
                    self.sync_state(active);
                    self.answer(c, Reply { ok: true, checkpoint: Some(checkpoint), ..self.lease() })
                }
                Err(why) => {
                    self.sync_state(active);
                    self.answer(c, Reply { error: Some(why.to_string()), paused: self.is_paused(), ..self.lease() })
                }
            },
            Request::Secrets => {
                let secrets = crate::redact::env_pairs(&self.secrets);
                self.answer(c, Reply { ok: true, secrets, ..self.lease() })
            }
            Request::Events => {
                self.journal.sample(self.rec.cgroup.as_ref());
                let events = self.journal.since(c.since);
                let network = init.network().map(Box::new);
                self.answer(c, Reply { ok: true, events, network, ..self.lease() })
            }
            Request::Claim { pool, labels, ttl_ms, name } => match self.claim(&pool, labels, ttl_ms, name, active) {
                Ok(()) => self.answer(c, Reply { ok: true, ..self.lease() }),
                Err(why) => self.answer(c, Reply { error: Some(why.to_string()), ..self.lease() }),
            },
            Request::Destroy => {
                let _ = proto::send(c.fd.as_fd(), &Reply { ok: true, ..self.lease() }, &[]);
                Served::End
            }
            Request::Retire { pool } => {
                use crate::sandbox::pool::POOL_LABEL;
                if self.rec.labels.get(POOL_LABEL) != Some(&pool) {
                    let why = format!("sandbox {} is not an unclaimed member of pool {pool:?}", self.rec.id);
                    return self.answer(c, Reply { error: Some(why), ..self.lease() });
                }
                let _ = proto::send(c.fd.as_fd(), &Reply { ok: true, ..self.lease() }, &[]);
                Served::End
            }
        }
    }

    /// Holds whose deadline passed: let go of, so a reader that stopped
    /// (SIGSTOP, a hung disk) cannot keep the sandbox frozen.
    fn lapse_freezes(&mut self, conns: &mut [Conn], now: u64) {
        for c in conns.iter_mut() {
            if c.freeze.is_some_and(|h| now >= h.until_ms) {
                c.freeze = None;
                c.freeze_lapsed = true;
                self.release_freeze();
            }
        }
    }

    /// Execs queued behind a freeze whose own timeout passed: told so and
    /// dropped from the queue, so an exec's `--timeout` bounds its wait
    /// (a freeze may last minutes). The client ends with `wall_timeout`.
    fn lapse_waits(&mut self, conns: &mut [Conn], now: u64) {
        if !self.is_frozen() {
            return;
        }
        for c in conns.iter_mut().filter(|c| c.waiting) {
            if c.wait_until.is_none_or(|u| now < u) {
                continue;
            }
            c.waiting = false;
            c.wait_until = None;
            c.queued_at = None;
            let why = format!(
                "the exec never started: sandbox {} stayed frozen (a `husk commit` or `husk fork` reading its filesystem) past the exec's --timeout",
                self.rec.id
            );
            let reply = Reply { error: Some(why), frozen_timeout: true, ..self.lease() };
            // The client hangs up on this answer; its hang-up closes the
            // connection (`serve`).
            let _ = proto::send(c.fd.as_fd(), &reply, &[]);
        }
    }

    /// `Request::Claim`: only an unclaimed member of `pool` that never ran
    /// anything is handed over (single use: the pool label goes for good,
    /// so no second claim can match it).
    fn claim(
        &mut self,
        pool: &str,
        labels: std::collections::BTreeMap<String, String>,
        ttl_ms: u64,
        name: Option<String>,
        active: usize,
    ) -> Result<(), Refusal> {
        use crate::sandbox::pool::POOL_LABEL;
        if self.rec.labels.get(POOL_LABEL).map(String::as_str) != Some(pool) {
            return Err(Refusal::NotPoolMember { id: self.rec.id.clone(), pool: pool.to_string() });
        }
        if active > 0 || self.rec.execs > 0 {
            return Err(Refusal::NotFresh(self.rec.id.clone()));
        }
        // A claimer gets a sandbox that runs commands, not a frozen one.
        if self.is_paused() {
            return Err(Refusal::PausedNotHandedOut(self.rec.id.clone()));
        }
        if ttl_ms == 0 {
            return Err(Refusal::ZeroTtl);
        }
        // The claimer reserved the name for this id (sandbox::pool::claim);
        // the record names it so the sandbox's end releases it.
        if let Some(n) = name {
            self.rec.name = Some(n);
        }
        crate::sandbox::pool::relabel(&mut self.rec.labels, pool, labels);
        self.renew(Some(ttl_ms));
        let (ttl_ms, expires_ms) = (self.rec.ttl_ms, self.rec.expires_ms);
        self.journal.record(EventKind::Renew { ttl_ms, expires_ms });
        Ok(())
    }

    fn answer(&self, c: &Conn, r: Reply) -> Served {
        match proto::send(c.fd.as_fd(), &r, &[]) {
            Ok(()) => Served::Keep,
            Err(_) => Served::Close,
        }
    }

    /// Starts an exec on `c`: renews the lease, hands over the namespaces
    /// and the exec's cgroup leaf, then makes the next one. False if the
    /// exec cannot start (the client is gone, no leaf).
    fn start_exec(&mut self, c: &mut Conn, init: &dyn Live) -> bool {
        let warm_fd = match c.warm.then(|| self.warm_socket(init)) {
            None => None,
            Some(Ok(fd)) => Some(fd),
            Some(Err(why)) => {
                let _ = proto::send(c.fd.as_fd(), &Reply { error: Some(why.to_string()), ..self.lease() }, &[]);
                return false;
            }
        };
        let leaf = match &self.rec.cgroup {
            None => None,
            Some(_) if !self.backend.exec_leaves() => None,
            Some(_) => match self.placed_leaf(c.warm).or_else(|| self.spare.take()).or_else(|| self.make_spare()) {
                Some(l) => Some(l),
                None => {
                    let err = "could not create the exec's cgroup leaf (see `husk inspect`)".to_string();
                    let _ = proto::send(c.fd.as_fd(), &Reply { error: Some(err), ..self.lease() }, &[]);
                    return false;
                }
            },
        };
        self.rec.execs += 1;
        self.renew(None);
        c.since = self.journal.record(EventKind::Exec { exec: self.rec.execs });
        let mut fds: Vec<RawFd> = init.namespaces().iter().map(|(_, fd)| fd.as_raw_fd()).collect();
        fds.extend(warm_fd);
        let reply = Reply {
            ok: true,
            exec: self.rec.execs,
            namespaces: init.namespaces().iter().map(|(k, _)| k.to_string()).collect(),
            leaf: leaf.clone(),
            warm: warm_fd.is_some(),
            frozen_wait_ms: c.queued_at.take().map_or(0, |t| now_ms().saturating_sub(t)),
            ..self.lease()
        };
        let sent = proto::send(c.fd.as_fd(), &reply, &fds).is_ok();
        c.leaf = leaf;
        if sent {
            c.exec = Some(self.rec.execs);
        } else {
            self.end_exec(c, init);
        }
        if self.spare.is_none() {
            self.spare = self.make_spare();
        }
        sent
    }

    /// A fresh, empty leaf for the next exec.
    pub(super) fn make_spare(&mut self) -> Option<String> {
        if !self.backend.exec_leaves() {
            return None;
        }
        let tree = self.rec.cgroup.as_ref()?;
        let name = format!("exec-{}", crate::ids::new_id());
        match tree.make_leaf(&name) {
            Ok(()) => Some(name),
            Err(e) => {
                self.rec.error = Some(format!("creating an exec's cgroup leaf: {e}"));
                None
            }
        }
    }

    /// The exec on `c` is over (however it ended): the lease restarts from
    /// now, and its leaf goes, unless processes it left behind still run
    /// there (retried after each later exec; the sandbox's end takes them).
    fn end_exec(&mut self, c: &mut Conn, init: &dyn Live) {
        if c.exec.take().is_some() {
            self.renew(None);
        }
        if let Some(x) = c.exec_id.take() {
            init.exec_abandoned(&x);
        }
        let Some(tree) = &self.rec.cgroup else { return };
        // A removed leaf's counts go with it (v1): take them first.
        self.journal.sample(Some(tree));
        self.kept.extend(c.leaf.take());
        self.kept.retain(|name| !tree.remove_leaf(name));
        self.journal.rebase(Some(tree));
    }

    pub(super) fn renew(&mut self, ttl_ms: Option<u64>) {
        if let Some(t) = ttl_ms {
            self.rec.ttl_ms = t;
        }
        // Paused, the lease does not run (pause.rs): the record says it ends
        // with the maximum lifetime, so neither `ls` nor `husk gc` (which
        // kills supervisors long past their recorded lease) takes it for
        // expired; an exec ending or a renew meanwhile keeps that.
        let lease = now_ms() + if self.is_paused() { super::pause::PAUSED_LEASE_MS } else { self.rec.ttl_ms };
        self.rec.expires_ms = self.rec.lifetime_ends_ms.map_or(lease, |end| end.min(lease));
    }

    fn lease(&self) -> Reply {
        Reply { ok: false, expires_ms: self.rec.expires_ms, ttl_ms: self.rec.ttl_ms, ..Default::default() }
    }

    /// Records READY / EXECUTING and the lease (after replying: the
    /// clients do not wait for the disk).
    fn sync_state(&mut self, active: usize) {
        self.rec.active_execs = active as u32;
        self.rec.events = self.journal.recent();
        self.rec.state = match active {
            _ if self.checking => State::Creating,
            _ if self.is_paused() => State::Paused,
            0 => State::Ready,
            _ => State::Executing,
        };
        let _ = state::write_record(&self.dir, &self.rec);
    }
}

enum Served {
    Keep,
    Close,
    End,
}

fn active_of(conns: &[Conn]) -> usize {
    conns.iter().filter(|c| c.exec.is_some()).count()
}
