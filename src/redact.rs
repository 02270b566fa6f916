//! What a model may see: secret values (`--secret-env`, `--secret-file`)
//! replaced by `[husk: secret NAME]` in captured output (the verdict's
//! stdout/stderr, `--json-stream` chunks) and in a verdict's error text;
//! with `--redact`, host paths, the host's name and user names kept out of
//! that error text too.
//!
//! A `Redaction` is a value: the CLI builds one per command from its
//! secret flags, `husk exec` adds the sandbox's secrets (asked of its
//! supervisor) to the request's own, and whoever captures output (a
//! `Capture`, a `Tap`, the watch that feeds them) or writes a verdict
//! (`Verdict::new`) is handed one and cannot be made without it. Two
//! requests served by one process hold two values, so neither redacts,
//! nor learns, the other's secrets.
//!
//! A `Redaction` is shared by its clones: secrets added after a sink was
//! made (an exec learns its sandbox's secrets after its `--json-stream`
//! tap exists) reach that sink's next read. Sharing stops at the value: a
//! fresh `Redaction` starts empty.
//!
//! This module sits at the bottom: it imports nothing from the crate.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One secret: its name (for the marker) and its value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    pub name: String,
    pub value: Vec<u8>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({}, {} bytes)", self.name, self.value.len())
    }
}

impl Secret {
    fn marker(&self) -> Vec<u8> {
        format!("[husk: secret {}]", self.name).into_bytes()
    }
}

/// Secrets as environment pairs (their values are UTF-8: the CLI checks).
pub fn env_pairs(secrets: &[Secret]) -> Vec<(String, String)> {
    secrets.iter().map(|s| (s.name.clone(), String::from_utf8_lossy(&s.value).into_owned())).collect()
}

/// What one command or request hides: its secrets' values and, with
/// `--redact`, the host's words. Cheap to clone; clones share the set.
#[derive(Clone, Default)]
pub struct Redaction {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// Bumped by every `add`: a `Redactor` made before takes the new
    /// secrets up at its next read without locking on every read.
    version: AtomicUsize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Longest first: a value that contains another is replaced whole.
    secrets: Vec<Secret>,
    host: bool,
}

impl std::fmt::Debug for Redaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state();
        f.debug_struct("Redaction").field("secrets", &s.secrets).field("host", &s.host).finish()
    }
}

impl Redaction {
    /// Hides nothing (a command without secret flags); `add` may still
    /// give it secrets later.
    pub fn none() -> Redaction {
        Redaction::default()
    }

    /// Hides `secrets`, and with `host` (`--redact`) the host's words in
    /// error text.
    pub fn new(secrets: impl IntoIterator<Item = Secret>, host: bool) -> Redaction {
        let r = Redaction::none();
        r.state().host = host;
        r.add(secrets);
        r
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds secrets whose values are hidden from here on, in this value
    /// and its clones (empty values are given to the command but cannot be
    /// searched for).
    pub fn add(&self, secrets: impl IntoIterator<Item = Secret>) {
        let mut st = self.state();
        let before = st.secrets.len();
        for s in secrets {
            if !s.value.is_empty() && !st.secrets.contains(&s) {
                st.secrets.push(s);
            }
        }
        if st.secrets.len() != before {
            st.secrets.sort_by_key(|s| std::cmp::Reverse(s.value.len()));
            self.shared.version.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Whether error text loses host paths, the host's name and user names.
    pub fn hides_host(&self) -> bool {
        self.state().host
    }

    /// The secrets hidden, longest value first.
    pub fn secrets(&self) -> Vec<Secret> {
        self.state().secrets.clone()
    }

    /// A streaming redactor for one output stream, following this set.
    pub fn stream(&self) -> Redactor {
        let version = self.shared.version.load(Ordering::SeqCst);
        Redactor { secrets: self.secrets(), held: Vec::new(), follows: Some((self.clone(), version)) }
    }

    /// Error text for a verdict: secret values replaced; with `--redact`,
    /// also host paths (`[path]`), the host's name (`[host]`) and user
    /// names (`[user]`).
    pub fn text(&self, s: &str) -> String {
        let (secrets, host) = {
            let st = self.state();
            (st.secrets.clone(), st.host)
        };
        let mut out = if secrets.is_empty() {
            s.to_string()
        } else {
            let mut r = Redactor::with(secrets);
            let mut b = r.push(s.as_bytes()).into_owned();
            b.extend(r.finish());
            String::from_utf8_lossy(&b).into_owned()
        };
        if host {
            out = host_text(&out, &host_words());
        }
        out
    }
}

/// Replaces secret values in a stream of bytes read in chunks of any size:
/// a value split between two chunks is still found, because the end of a
/// chunk that could be the start of a value is held back until the next
/// chunk (or `finish`) says whether it is.
#[derive(Debug)]
pub struct Redactor {
    secrets: Vec<Secret>,
    held: Vec<u8>,
    /// The set `secrets` came from and its version then; None: fixed
    /// (`with`).
    follows: Option<(Redaction, usize)>,
}

impl Redactor {
    /// A redactor for exactly these secrets.
    pub fn with(secrets: Vec<Secret>) -> Redactor {
        Redactor { secrets, held: Vec::new(), follows: None }
    }

    /// The redacted bytes that can be released after `data`: `data`
    /// itself, uncopied, while there is no secret to look for.
    pub fn push<'d>(&mut self, data: &'d [u8]) -> Cow<'d, [u8]> {
        if let Some((set, v)) = &mut self.follows {
            let now = set.shared.version.load(Ordering::SeqCst);
            if now != *v {
                self.secrets = set.secrets();
                *v = now;
            }
        }
        if self.secrets.is_empty() && self.held.is_empty() {
            return Cow::Borrowed(data);
        }
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(data);
        let mut out = Vec::with_capacity(buf.len());
        let mut i = 0;
        'scan: while i < buf.len() {
            let rest = &buf[i..];
            for s in &self.secrets {
                if rest.starts_with(&s.value) {
                    out.extend(s.marker());
                    i += s.value.len();
                    continue 'scan;
                }
            }
            // The rest could still become a value: wait for more.
            if self.secrets.iter().any(|s| s.value.len() > rest.len() && s.value.starts_with(rest)) {
                break;
            }
            out.push(buf[i]);
            i += 1;
        }
        self.held = buf.split_off(i);
        Cow::Owned(out)
    }

    /// The stream ended: what was held back is no value, release it.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }
}

/// The host's name and its users' names (from the host's /etc/passwd:
/// people, uid >= 1000, and husk's own user).
fn host_words() -> (Option<String>, Vec<String>) {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string());
    let me = host_uid();
    let users = std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            let uid: u32 = f.get(2)?.parse().ok()?;
            ((uid >= 1000 && uid != 65534) || Some(uid) == me).then(|| f[0].to_string())
        })
        .filter(|n| n.len() >= 2)
        .collect();
    (host.filter(|h| !h.is_empty() && h != "localhost"), users)
}

/// husk's real uid, read from /proc (this module uses no libc).
fn host_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
}

/// `text`'s `--redact` part, with the host's words given.
pub fn host_text(s: &str, (host, users): &(Option<String>, Vec<String>)) -> String {
    // Absolute paths: from a '/' at the start of a word to the next space
    // or quote; whatever they name, they are the host's or the image's
    // layout, neither of which the reader needs.
    let mut out = String::with_capacity(s.len());
    let mut chars = s.char_indices().peekable();
    let mut prev: Option<char> = None;
    while let Some((_, c)) = chars.next() {
        let word_start = prev.is_none_or(|p| p.is_whitespace() || "\"'`([{=:,".contains(p));
        if c == '/' && word_start {
            while let Some(&(_, n)) = chars.peek() {
                if n.is_whitespace() || "\"'`)]},;:".contains(n) {
                    break;
                }
                chars.next();
            }
            out.push_str("[path]");
            prev = Some(']');
            continue;
        }
        out.push(c);
        prev = Some(c);
    }
    let mut out = match host {
        Some(h) => replace_word(&out, h, "[host]"),
        None => out,
    };
    for u in users {
        out = replace_word(&out, u, "[user]");
    }
    out
}

/// `word` replaced where it stands as a word of its own (not inside a
/// longer name).
fn replace_word(s: &str, word: &str, with: &str) -> String {
    let is_name = |c: char| c.is_alphanumeric() || c == '_' || c == '-' || c == '.';
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find(word) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + word.len()..].chars().next();
        out.push_str(&rest[..at]);
        if before.is_some_and(is_name) || after.is_some_and(is_name) {
            out.push_str(word);
        } else {
            out.push_str(with);
        }
        rest = &rest[at + word.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str, value: &str) -> Secret {
        Secret { name: name.into(), value: value.as_bytes().to_vec() }
    }

    fn through(r: &mut Redactor, chunks: &[&str]) -> String {
        let mut out = Vec::new();
        for c in chunks {
            out.extend_from_slice(&r.push(c.as_bytes()));
        }
        out.extend(r.finish());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_value_split_across_chunks_is_still_replaced() {
        let s = vec![secret("TOKEN", "hunter2-xyz")];
        let want = "a [husk: secret TOKEN] b [husk: secret TOKEN]";
        assert_eq!(through(&mut Redactor::with(s.clone()), &["a hunter2-xyz b hunter2-xyz"]), want);
        let text = "a hunter2-xyz b hunter2-xyz";
        // Every split point, and one byte at a time.
        for cut in 0..text.len() {
            assert_eq!(through(&mut Redactor::with(s.clone()), &[&text[..cut], &text[cut..]]), want, "cut {cut}");
        }
        let bytes: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = bytes.iter().map(String::as_str).collect();
        assert_eq!(through(&mut Redactor::with(s), &refs), want);
    }

    #[test]
    fn a_prefix_that_does_not_complete_is_released_as_is() {
        let s = vec![secret("T", "secret")];
        assert_eq!(through(&mut Redactor::with(s.clone()), &["sec", "ret!", " secre"]), "[husk: secret T]! secre");
        assert_eq!(through(&mut Redactor::with(s), &["ssecret"]), "s[husk: secret T]");
    }

    #[test]
    fn two_requests_in_one_process_keep_their_secrets_apart() {
        let a = Redaction::new([secret("A_TOKEN", "alpha-123")], false);
        let b = Redaction::new([secret("B_TOKEN", "bravo-456")], false);
        let text = "alpha-123 bravo-456";
        assert_eq!(a.text(text), "[husk: secret A_TOKEN] bravo-456");
        assert_eq!(b.text(text), "alpha-123 [husk: secret B_TOKEN]");
        let mut sa = a.stream();
        let mut sb = b.stream();
        assert_eq!(&*sa.push(text.as_bytes()), b"[husk: secret A_TOKEN] bravo-456");
        assert_eq!(&*sb.push(text.as_bytes()), b"alpha-123 [husk: secret B_TOKEN]");
        // A fresh value knows nothing of either.
        assert_eq!(Redaction::none().text(text), text);
    }

    #[test]
    fn a_secret_added_later_reaches_sinks_made_before() {
        // An exec's tap exists before the exec learns its sandbox's secrets.
        let r = Redaction::none();
        let mut sink = r.stream();
        assert!(matches!(sink.push(b"early hunter2 "), Cow::Borrowed(_)), "no secret yet: no copy");
        r.clone().add([secret("PW", "hunter2")]);
        let mut out = sink.push(b"late hunter2").into_owned();
        out.extend(sink.finish());
        assert_eq!(out, b"late [husk: secret PW]");
        let other = Redaction::none();
        assert_eq!(other.text("hunter2"), "hunter2", "a clone shares; another value does not");
    }

    #[test]
    fn host_redaction_hides_paths_host_and_users() {
        let words = (Some("buildhost".to_string()), vec!["alice".to_string()]);
        let s = "opening /home/alice/x.json on buildhost: denied for alice (not alice2); see '/var/lib/husk'";
        assert_eq!(host_text(s, &words), "opening [path] on [host]: denied for [user] (not alice2); see '[path]'");
        assert_eq!(host_text("a/b and 1/2", &words), "a/b and 1/2");
    }
}
