//! What a model may see: secret values (`--secret-env`, `--secret-file`)
//! replaced by `[husk: secret NAME]` in captured output (the verdict's
//! stdout/stderr, `--json-stream` chunks) and in a verdict's error text;
//! with `--redact`, host paths, the host's name and user names kept out of
//! that error text too.
//!
//! The values live in one registry per husk process, filled by the command
//! layer before the command starts and read by every sink of its output
//! when the sink is made (`Capture::new`, `Tap::new`). Every sink asking
//! here, rather than each caller handing secrets down, means no path that
//! captures output (run, exec, a warm call, a pty, serve's in-process exec)
//! can forget them. husk runs one command per process (serve forks one per
//! request), so the registry never mixes two commands' secrets.
//!
//! This module sits at the bottom: it imports nothing from the crate.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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

static SECRETS: Mutex<Vec<Secret>> = Mutex::new(Vec::new());
/// Bumped by every `add`: a redactor made before (a stream's sink is made
/// before an exec learns its sandbox's secrets) takes the new ones up.
static VERSION: AtomicUsize = AtomicUsize::new(0);
static HOST: AtomicBool = AtomicBool::new(false);

/// Adds secrets whose values are to be hidden from here on (empty values
/// are given to the command but cannot be searched for).
pub fn add(secrets: impl IntoIterator<Item = Secret>) {
    let mut all = SECRETS.lock().unwrap_or_else(|e| e.into_inner());
    for s in secrets {
        if !s.value.is_empty() && !all.contains(&s) {
            all.push(s);
        }
    }
    // Longest first: a value that contains another is replaced whole.
    all.sort_by_key(|s| std::cmp::Reverse(s.value.len()));
    VERSION.fetch_add(1, Ordering::SeqCst);
}

/// Whether any secret is registered (a sink without one passes bytes
/// through untouched, at no cost).
pub fn active() -> bool {
    VERSION.load(Ordering::SeqCst) > 0
}

/// Secrets as environment pairs (their values are UTF-8: the CLI checks).
pub fn env_pairs(secrets: &[Secret]) -> Vec<(String, String)> {
    secrets.iter().map(|s| (s.name.clone(), String::from_utf8_lossy(&s.value).into_owned())).collect()
}

/// `--redact`: host paths, host name and user names out of error text.
pub fn set_host(on: bool) {
    HOST.store(on, Ordering::Relaxed);
}

fn snapshot() -> Vec<Secret> {
    SECRETS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Replaces secret values in a stream of bytes read in chunks of any size:
/// a value split between two chunks is still found, because the end of a
/// chunk that could be the start of a value is held back until the next
/// chunk (or `finish`) says whether it is.
#[derive(Debug)]
pub struct Redactor {
    secrets: Vec<Secret>,
    held: Vec<u8>,
    /// The registry's version `secrets` came from; None: fixed (`with`).
    version: Option<usize>,
}

impl Redactor {
    /// A redactor for the registered secrets, following the registry;
    /// None while there are none. Sinks call it for each read until it
    /// gives one.
    pub fn current() -> Option<Redactor> {
        if !active() {
            return None;
        }
        let version = VERSION.load(Ordering::SeqCst);
        Some(Redactor { secrets: snapshot(), held: Vec::new(), version: Some(version) })
    }

    pub fn with(secrets: Vec<Secret>) -> Redactor {
        Redactor { secrets, held: Vec::new(), version: None }
    }

    /// The redacted bytes that can be released after `data`.
    pub fn push(&mut self, data: &[u8]) -> Vec<u8> {
        if let Some(v) = self.version {
            let now = VERSION.load(Ordering::SeqCst);
            if now != v {
                self.secrets = snapshot();
                self.version = Some(now);
            }
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
        out
    }

    /// The stream ended: what was held back is no value, release it.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }
}

/// Error text for a verdict: secret values replaced; with `--redact`, also
/// host paths (`[path]`), the host's name (`[host]`) and user names
/// (`[user]`).
pub fn text(s: &str) -> String {
    let secrets = snapshot();
    let mut out = if secrets.is_empty() {
        s.to_string()
    } else {
        let mut r = Redactor::with(secrets);
        let mut b = r.push(s.as_bytes());
        b.extend(r.finish());
        String::from_utf8_lossy(&b).into_owned()
    };
    if HOST.load(Ordering::Relaxed) {
        out = host_text(&out, &host_words());
    }
    out
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
            out.extend(r.push(c.as_bytes()));
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
    fn host_redaction_hides_paths_host_and_users() {
        let words = (Some("buildhost".to_string()), vec!["alice".to_string()]);
        let s = "opening /home/alice/x.json on buildhost: denied for alice (not alice2); see '/var/lib/husk'";
        assert_eq!(host_text(s, &words), "opening [path] on [host]: denied for [user] (not alice2); see '[path]'");
        assert_eq!(host_text("a/b and 1/2", &words), "a/b and 1/2");
    }
}
