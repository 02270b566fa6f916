//! Bounded capture of a stream: the first and last halves of `limit` bytes
//! are kept, the middle is counted and dropped. Memory stays at `limit`
//! whatever the command writes, and `limit` itself is bounded by
//! `MAX_LIMIT`: capture lives in husk's own memory, outside the sandbox's
//! cgroup, so `--memory` does not bound it.

use crate::redact::{Redaction, Redactor};
use base64::Engine;
use serde::Serialize;
use std::collections::VecDeque;

/// The most one captured stream may hold (`--output-limit`'s ceiling).
/// Kept bytes end up in one JSON verdict that husk builds and prints (up to
/// 6 bytes per kept byte once escaped), so output beyond this is not
/// spilled to a file either: a caller who wants more runs without `--json`,
/// redirects the streams to files and takes the verdict from
/// `--verdict-file`.
pub const MAX_LIMIT: u64 = 16 << 20;

/// `--output-limit`'s check: over `MAX_LIMIT` is refused, not clamped, so a
/// caller never gets less than it asked for without being told.
pub fn check_limit(limit: u64) -> Result<u64, LimitTooLarge> {
    if limit > MAX_LIMIT {
        return Err(LimitTooLarge(limit));
    }
    Ok(limit)
}

/// An `--output-limit` above `MAX_LIMIT`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{0} bytes is above husk's bound of {max} MiB per captured stream (captured output is held in husk's \
     own memory, outside the sandbox's cgroup, and printed in one JSON verdict); for more output, run \
     without --json, redirect stdout/stderr to files and take the verdict from --verdict-file",
    max = MAX_LIMIT >> 20
)]
pub struct LimitTooLarge(pub u64);

#[derive(Debug)]
pub struct Capture {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    /// Secret values out of what is kept (`redact`): the request's.
    redactor: Redactor,
}

/// A finished capture, as it appears in the verdict.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Captured {
    /// The kept bytes as UTF-8 text; invalid sequences become U+FFFD.
    pub text: String,
    /// The exact kept bytes, base64, present only when `text` is lossy.
    pub base64: Option<String>,
    /// Everything the command wrote to this stream.
    pub bytes: u64,
    pub truncated: bool,
}

impl Capture {
    /// A capture of at most `limit` bytes, and never more than `MAX_LIMIT`
    /// whoever the caller is (the CLI refuses more; this is the backstop),
    /// with the values `redact` hides (now or later) replaced.
    pub fn new(limit: u64, redact: &Redaction) -> Self {
        let limit = usize::try_from(limit.min(MAX_LIMIT)).unwrap_or(0);
        let head_cap = limit.div_ceil(2);
        Capture {
            head_cap,
            tail_cap: limit - head_cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            redactor: redact.stream(),
        }
    }

    /// Takes bytes the command wrote (secret values replaced on the way).
    pub fn push(&mut self, data: &[u8]) {
        let clean = self.redactor.push(data);
        self.keep(&clean);
    }

    fn keep(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let room = self.head_cap - self.head.len();
        if room > 0 {
            let n = room.min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if self.tail_cap == 0 || data.is_empty() {
            return;
        }
        if data.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_cap..]);
            return;
        }
        let excess = (self.tail.len() + data.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..excess);
        self.tail.extend(data);
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn finish(mut self) -> Captured {
        let rest = self.redactor.finish();
        self.keep(&rest);
        let kept = (self.head.len() + self.tail.len()) as u64;
        let truncated = self.total > kept;
        let mut head = self.head;
        let mut tail: Vec<u8> = self.tail.into_iter().collect();
        let bytes = if truncated {
            // Cut on character boundaries so truncation alone never makes
            // valid UTF-8 output lossy.
            if let Err(e) = std::str::from_utf8(&head)
                && e.error_len().is_none()
            {
                head.truncate(e.valid_up_to());
            }
            let skip = tail.iter().take(3).take_while(|b| (**b & 0xC0) == 0x80).count();
            tail.drain(..skip);
            let dropped = self.total - (head.len() + tail.len()) as u64;
            let mut out = head;
            out.extend_from_slice(format!("\n[husk: {dropped} bytes truncated]\n").as_bytes());
            out.extend_from_slice(&tail);
            out
        } else {
            head.extend_from_slice(&tail);
            head
        };
        let (text, base64) = match String::from_utf8(bytes) {
            Ok(s) => (s, None),
            Err(e) => {
                let raw = e.into_bytes();
                (
                    String::from_utf8_lossy(&raw).into_owned(),
                    Some(base64::engine::general_purpose::STANDARD.encode(&raw)),
                )
            }
        };
        Captured { text, base64, bytes: self.total, truncated }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let mut c = Capture::new(100, &Redaction::none());
        c.push(b"hello ");
        c.push(b"world");
        let r = c.finish();
        assert_eq!(r.text, "hello world");
        assert!(!r.truncated);
        assert_eq!(r.bytes, 11);
    }

    #[test]
    fn huge_output_keeps_head_and_tail_with_marker() {
        let mut c = Capture::new(10, &Redaction::none());
        for _ in 0..1000 {
            c.push(b"abcdefghij");
        }
        c.push(b"END");
        let r = c.finish();
        assert!(r.truncated);
        assert_eq!(r.bytes, 10003);
        assert!(r.text.starts_with("abcde\n[husk: 9993 bytes truncated]\n"));
        assert!(r.text.ends_with("\nijEND"));
    }

    #[test]
    fn invalid_utf8_stays_valid_json_with_exact_base64() {
        let mut c = Capture::new(100, &Redaction::none());
        c.push(&[b'a', 0xff, b'b']);
        let r = c.finish();
        assert_eq!(r.text, "a\u{fffd}b");
        assert_eq!(r.base64.as_deref(), Some("Yf9i"));
        assert!(serde_json::to_string(&r).is_ok());
    }

    #[test]
    fn memory_stays_under_the_ceiling_whatever_the_limit_asked() {
        let mut c = Capture::new(u64::MAX, &Redaction::none());
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..40 {
            c.push(&chunk);
        }
        assert!(c.head.capacity() + c.tail.capacity() <= 2 * MAX_LIMIT as usize, "{}", c.head.capacity());
        let r = c.finish();
        assert!(r.truncated);
        assert_eq!(r.bytes, 40 << 20);
        assert!(r.text.len() < MAX_LIMIT as usize + 64);
    }

    #[test]
    fn a_limit_above_the_ceiling_is_refused_with_the_way_out() {
        assert_eq!(check_limit(MAX_LIMIT), Ok(MAX_LIMIT));
        let e = check_limit(1 << 40).unwrap_err().to_string();
        assert!(e.contains("16 MiB") && e.contains("--verdict-file"), "{e}");
    }

    #[test]
    fn captured_output_hides_the_requests_secrets_only() {
        let mine = Redaction::new([crate::redact::Secret { name: "PW".into(), value: b"hunter2".to_vec() }], false);
        let mut c = Capture::new(100, &mine);
        c.push(b"pw=hun");
        c.push(b"ter2 other=s3cr3t");
        assert_eq!(c.finish().text, "pw=[husk: secret PW] other=s3cr3t");
        let mut c = Capture::new(100, &Redaction::none());
        c.push(b"pw=hunter2");
        assert_eq!(c.finish().text, "pw=hunter2");
    }

    #[test]
    fn truncation_does_not_split_characters() {
        let mut c = Capture::new(6, &Redaction::none());
        c.push("ééééééééé".as_bytes());
        let r = c.finish();
        assert!(r.base64.is_none(), "{r:?}");
        assert!(r.truncated);
    }
}
