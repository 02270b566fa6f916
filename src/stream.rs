//! `--json-stream`: a command's output as NDJSON events while it runs,
//! one line per chunk read from its stdout or stderr pipe:
//!
//! ```text
//! {"stream":"stdout","seq":0,"data":"hello\n"}
//! {"stream":"stderr","seq":1,"data_b64":"/w=="}
//! ```
//!
//! then (written by the caller, `cli::report`) exactly one
//! `{"verdict": {...}}`. Schema: docs/stream.schema.json.
//!
//! `data` is used when the chunk is valid UTF-8, `data_b64` (the exact
//! bytes) otherwise: a character split by the pipe's chunking is held back
//! (at most 3 bytes per stream) and sent with the next chunk, so text output
//! never turns into base64 just because a read ended mid-character.
//! Concatenating every chunk of a stream, decoded, gives its bytes exactly.
//!
//! Memory is bounded whatever the command's output rate: `Tap` holds at
//! most `PENDING_MAX` encoded bytes not yet written; above that the watch
//! stops reading the command's pipes (the command then blocks on its
//! writes, as it would on a slow terminal) while it keeps watching the
//! deadline, so a slow reader never lets a command outlive `--timeout`.
//! `Tap` writes to any fd (a pipe, a socket, a file): `husk serve` hands it
//! its connection and gets the same events.

use crate::capture::{Capture, Captured};
use crate::redact::Redaction;
use base64::Engine;
use serde::Serialize;
use std::cell::RefCell;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Which of the command's output streams a chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Which {
    Stdout,
    Stderr,
}

impl Which {
    fn index(self) -> usize {
        match self {
            Which::Stdout => 0,
            Which::Stderr => 1,
        }
    }
}

/// One output event (one NDJSON line).
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct Chunk {
    pub stream: Which,
    /// 0, 1, 2, ... across both streams, in the order husk read them.
    pub seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_b64: Option<String>,
}

/// Turns reads into events: numbers them and keeps characters whole.
#[derive(Debug, Default)]
pub struct Chunker {
    seq: u64,
    /// The start of a character the last read of each stream cut off.
    held: [Vec<u8>; 2],
}

impl Chunker {
    /// The event for `data` read from `which`, if there is anything to say
    /// yet (a read of only part of one character is held).
    pub fn chunk(&mut self, which: Which, data: &[u8]) -> Option<Chunk> {
        let held = &mut self.held[which.index()];
        let mut bytes = std::mem::take(held);
        bytes.extend_from_slice(data);
        match std::str::from_utf8(&bytes) {
            Ok(_) => {}
            // Only the end is wrong, and it can still become a character.
            Err(e) if e.error_len().is_none() => {
                *held = bytes.split_off(e.valid_up_to());
            }
            Err(_) => return Some(self.event(which, bytes)),
        }
        if bytes.is_empty() {
            return None;
        }
        Some(self.event(which, bytes))
    }

    /// The stream ended: what was held is sent as it is (base64, as it is
    /// not a whole character).
    pub fn end(&mut self, which: Which) -> Option<Chunk> {
        let bytes = std::mem::take(&mut self.held[which.index()]);
        (!bytes.is_empty()).then(|| self.event(which, bytes))
    }

    fn event(&mut self, stream: Which, bytes: Vec<u8>) -> Chunk {
        let seq = self.seq;
        self.seq += 1;
        match String::from_utf8(bytes) {
            Ok(s) => Chunk { stream, seq, data: Some(s), data_b64: None },
            Err(e) => Chunk {
                stream,
                seq,
                data: None,
                data_b64: Some(base64::engine::general_purpose::STANDARD.encode(e.as_bytes())),
            },
        }
    }
}

/// Encoded events not yet written, above which the watch stops reading the
/// command's output (one 64 KiB read encodes to at most ~400 KiB, so the
/// queue stays under ~1 MiB).
pub const PENDING_MAX: usize = 256 << 10;

/// Largest write while the reader may be slow: a pipe that polls writable
/// takes this much without blocking (one buffer page, `PIPE_BUF`).
const SMALL_WRITE: usize = 4096;

/// Where the events go, with a bounded queue of what is not written yet.
/// Shared by reference (`&Tap`) between the watch's streams.
pub struct Tap {
    fd: OwnedFd,
    format: TapFormat,
    /// The request's: what `pump` captures beside the events hides it too.
    redact: Redaction,
    inner: RefCell<Inner>,
}

/// What a tap writes for each read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TapFormat {
    /// One NDJSON event per read (`--json-stream`, `husk serve`).
    Json,
    /// The bytes themselves, both streams into one fd, in the order they
    /// were read (`husk build`'s RUN output on a terminal or a log).
    Raw,
}

struct Inner {
    chunker: Chunker,
    /// Secret values out of the events, per stream (`redact`).
    redactors: [crate::redact::Redactor; 2],
    pending: Vec<u8>,
    sent: usize,
    /// Whether a blocking write of any size may stall husk (pipes and
    /// sockets); to a file or terminal husk writes all at once.
    may_block: bool,
    /// The first failed write; no more events are written after it.
    error: Option<std::io::Error>,
}

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tap").field("fd", &self.fd).finish_non_exhaustive()
    }
}

impl Tap {
    /// Events to `fd`, with the values `redact` hides (now or later)
    /// replaced.
    pub fn new(fd: OwnedFd, redact: &Redaction) -> Tap {
        let may_block = nix::sys::stat::fstat(&fd).map_or(true, |st| {
            let kind = st.st_mode & libc::S_IFMT;
            kind == libc::S_IFIFO || kind == libc::S_IFSOCK
        });
        let inner = Inner {
            chunker: Chunker::default(),
            redactors: [redact.stream(), redact.stream()],
            pending: Vec::new(),
            sent: 0,
            may_block,
            error: None,
        };
        Tap { fd, format: TapFormat::Json, redact: redact.clone(), inner: RefCell::new(inner) }
    }

    /// The bytes themselves to `fd` (redacted like the events).
    pub fn raw(fd: OwnedFd, redact: &Redaction) -> Tap {
        Tap { format: TapFormat::Raw, ..Tap::new(fd, redact) }
    }

    /// Events to husk's own stdout.
    pub fn stdout(redact: &Redaction) -> std::io::Result<Tap> {
        Ok(Tap::new(std::io::stdout().as_fd().try_clone_to_owned()?, redact))
    }

    /// What this tap hides.
    pub fn redaction(&self) -> &Redaction {
        &self.redact
    }

    /// Queues the event for bytes read from `which`.
    pub fn push(&self, which: Which, data: &[u8]) {
        let mut i = self.inner.borrow_mut();
        let clean = i.redactors[which.index()].push(data);
        let data = &clean[..];
        if self.format == TapFormat::Raw {
            i.queue_bytes(data);
        } else if let Some(c) = i.chunker.chunk(which, data) {
            i.queue(&c);
        }
    }

    /// `which` reached its end.
    pub fn end(&self, which: Which) {
        let mut i = self.inner.borrow_mut();
        let rest = i.redactors[which.index()].finish();
        if self.format == TapFormat::Raw {
            i.queue_bytes(&rest);
            return;
        }
        if let Some(c) = i.chunker.chunk(which, &rest) {
            i.queue(&c);
        }
        if let Some(c) = i.chunker.end(which) {
            i.queue(&c);
        }
    }

    /// Something waits to be written (poll the fd for POLLOUT).
    pub fn wants_write(&self) -> bool {
        let i = self.inner.borrow();
        i.error.is_none() && i.sent < i.pending.len()
    }

    /// The queue is at its bound: read no more output until it drains.
    pub fn full(&self) -> bool {
        let i = self.inner.borrow();
        i.error.is_none() && i.pending.len() - i.sent >= PENDING_MAX
    }

    /// The fd to poll for POLLOUT.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// One write, after poll said the fd is writable.
    pub fn write_some(&self) {
        let mut i = self.inner.borrow_mut();
        let n = if i.may_block { SMALL_WRITE } else { usize::MAX };
        i.write(self.fd.as_fd(), n);
    }

    /// Writes everything queued, blocking (the command has ended).
    pub fn flush(&self) {
        let mut i = self.inner.borrow_mut();
        while i.error.is_none() && i.sent < i.pending.len() {
            i.write(self.fd.as_fd(), usize::MAX);
        }
    }

    /// The first write that failed (EPIPE: the reader went away).
    pub fn take_error(&self) -> Option<std::io::Error> {
        self.inner.borrow_mut().error.take()
    }
}

impl Inner {
    fn queue(&mut self, c: &Chunk) {
        if self.error.is_some() {
            return;
        }
        if self.sent == self.pending.len() {
            self.pending.clear();
            self.sent = 0;
        }
        // A Chunk always serializes.
        let _ = serde_json::to_writer(&mut self.pending, c);
        self.pending.push(b'\n');
    }

    fn queue_bytes(&mut self, data: &[u8]) {
        if self.error.is_some() {
            return;
        }
        if self.sent == self.pending.len() {
            self.pending.clear();
            self.sent = 0;
        }
        self.pending.extend_from_slice(data);
    }

    fn write(&mut self, fd: BorrowedFd<'_>, most: usize) {
        let end = self.pending.len().min(self.sent.saturating_add(most));
        match nix::unistd::write(fd, &self.pending[self.sent..end]) {
            Ok(n) => self.sent += n,
            Err(nix::errno::Errno::EINTR) | Err(nix::errno::Errno::EAGAIN) => {}
            Err(e) => {
                self.error = Some(std::io::Error::from(e));
                self.pending = Vec::new();
                self.sent = 0;
            }
        }
        if self.sent == self.pending.len() {
            self.pending.clear();
            self.sent = 0;
        } else if self.sent > PENDING_MAX {
            self.pending.drain(..self.sent);
            self.sent = 0;
        }
    }
}

/// The one place a watch hands a read to: the bounded capture for the
/// verdict, and the tap when the output is streamed.
pub fn deliver(which: Which, data: &[u8], cap: &mut Capture, tap: Option<&Tap>) {
    cap.push(data);
    if let Some(t) = tap {
        t.push(which, data);
    }
}

/// Streams two capture pipes to `tap` until both end, capturing each
/// (bounded to `limit`) for a verdict. For a caller that holds a command's
/// pipes itself and has no deadline to keep (the watch of a husk run does
/// this inside its own poll loop).
pub fn pump(stdout: OwnedFd, stderr: OwnedFd, limit: u64, tap: &Tap) -> (Captured, Captured) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [Some(stdout), Some(stderr)];
    let mut caps = [Capture::new(limit, tap.redaction()), Capture::new(limit, tap.redaction())];
    let mut buf = vec![0u8; 65536];
    let which = [Which::Stdout, Which::Stderr];
    while fds.iter().any(Option::is_some) {
        let mut tags = Vec::new();
        let mut pfds = Vec::new();
        if !tap.full() {
            for (n, fd) in fds.iter().enumerate() {
                if let Some(fd) = fd {
                    tags.push(n);
                    pfds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
                }
            }
        }
        if tap.wants_write() {
            tags.push(2);
            pfds.push(PollFd::new(tap.fd(), PollFlags::POLLOUT));
        }
        match poll(&mut pfds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => break,
        }
        let ready: Vec<usize> = tags
            .iter()
            .zip(&pfds)
            .filter(|(_, p)| p.revents().is_some_and(|r| !r.is_empty()))
            .map(|(t, _)| *t)
            .collect();
        drop(pfds);
        for t in ready {
            if t == 2 {
                tap.write_some();
                continue;
            }
            let Some(fd) = &fds[t] else { continue };
            match nix::unistd::read(fd, &mut buf) {
                Ok(0) | Err(nix::errno::Errno::EBADF) => {
                    fds[t] = None;
                    tap.end(which[t]);
                }
                Ok(n) => deliver(which[t], &buf[..n], &mut caps[t], Some(tap)),
                Err(nix::errno::Errno::EINTR) | Err(nix::errno::Errno::EAGAIN) => {}
                Err(_) => {
                    fds[t] = None;
                    tap.end(which[t]);
                }
            }
        }
    }
    tap.flush();
    let [o, e] = caps;
    (o.finish(), e.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(c: &Chunk) -> Vec<u8> {
        match (&c.data, &c.data_b64) {
            (Some(s), None) => s.as_bytes().to_vec(),
            (None, Some(b)) => base64::engine::general_purpose::STANDARD.decode(b).unwrap(),
            _ => panic!("exactly one of data and data_b64: {c:?}"),
        }
    }

    #[test]
    fn a_character_split_between_reads_stays_text() {
        let mut c = Chunker::default();
        let e = "é".as_bytes();
        let first = c.chunk(Which::Stdout, &[b'a', e[0]]).unwrap();
        assert_eq!(first.data.as_deref(), Some("a"));
        let second = c.chunk(Which::Stdout, &[e[1], b'b']).unwrap();
        assert_eq!(second.data.as_deref(), Some("éb"));
        assert_eq!((first.seq, second.seq), (0, 1));
    }

    #[test]
    fn a_read_of_half_a_character_waits_for_the_rest() {
        let mut c = Chunker::default();
        let e = "€".as_bytes();
        assert!(c.chunk(Which::Stderr, &e[..1]).is_none());
        assert!(c.chunk(Which::Stderr, &e[1..2]).is_none());
        assert_eq!(c.chunk(Which::Stderr, &e[2..]).unwrap().data.as_deref(), Some("€"));
    }

    #[test]
    fn binary_output_is_base64_and_byte_exact() {
        let mut c = Chunker::default();
        let mut all = Vec::new();
        let input: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        for part in input.chunks(7) {
            if let Some(ch) = c.chunk(Which::Stdout, part) {
                all.extend(data(&ch));
            }
        }
        if let Some(ch) = c.end(Which::Stdout) {
            all.extend(data(&ch));
        }
        assert_eq!(all, input);
    }

    #[test]
    fn streams_hold_their_partial_characters_apart() {
        let mut c = Chunker::default();
        let e = "é".as_bytes();
        assert!(c.chunk(Which::Stdout, &e[..1]).is_none());
        assert_eq!(c.chunk(Which::Stderr, b"x").unwrap().data.as_deref(), Some("x"));
        assert_eq!(c.chunk(Which::Stdout, &e[1..]).unwrap().data.as_deref(), Some("é"));
    }

    #[test]
    fn a_cut_character_at_the_end_is_sent_as_base64() {
        let mut c = Chunker::default();
        assert!(c.chunk(Which::Stdout, &[0xe2, 0x82]).is_none());
        let last = c.end(Which::Stdout).unwrap();
        assert_eq!(last.data_b64.as_deref(), Some("4oI="));
        assert!(c.end(Which::Stdout).is_none());
    }

    #[test]
    fn pump_streams_pipes_as_events_and_captures_them() {
        let (or, ow) = nix::unistd::pipe().unwrap();
        let (er, ew) = nix::unistd::pipe().unwrap();
        let (sr, sw) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&ow, b"out\n").unwrap();
        nix::unistd::write(&ew, &[0xff]).unwrap();
        drop((ow, ew));
        let tap = Tap::new(sw, &Redaction::none());
        let (o, e) = pump(or, er, 100, &tap);
        drop(tap);
        assert_eq!((o.text.as_str(), e.base64.as_deref()), ("out\n", Some("/w==")));
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(sr), &mut text).unwrap();
        let events: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(events.len(), 2, "{text}");
        assert!(events.iter().any(|e| e["stream"] == "stdout" && e["data"] == "out\n"), "{text}");
        assert!(events.iter().any(|e| e["stream"] == "stderr" && e["data_b64"] == "/w=="), "{text}");
    }
}
