//! Fuzz harnesses: each takes arbitrary bytes and panics when one of its
//! invariants breaks. Two drivers share them:
//!
//! - `fuzz/` (cargo-fuzz, libFuzzer + ASan): the long runs, one target per
//!   harness (`cargo fuzz run <name>`; see fuzz/README.md);
//! - `tests/fuzz_smoke.rs` (stable Rust, plain `cargo test`): every seed in
//!   `fuzz/corpus/<name>/` plus a bounded number of deterministic mutations
//!   of them, so CI exercises every harness without cargo-fuzz.
//!
//! The invariants go beyond "no panic" where there is an oracle: the compiled
//! seccomp program must agree with the profile's meaning on every syscall
//! and argument a profile mentions, and the in-root path resolver must agree
//! with the kernel's `openat2(RESOLVE_IN_ROOT)` on a real directory tree.

pub mod http;
pub mod image;
pub mod net;
pub mod resolve;
pub mod seccomp;
pub mod units;

/// A harness: panics when an invariant breaks.
pub type Harness = fn(&[u8]);

/// Every harness by the name of its corpus directory and cargo-fuzz target.
pub const TARGETS: &[(&str, Harness)] = &[
    ("seccomp_profile", seccomp::profile_json),
    ("seccomp_policy", seccomp::generated_policy),
    ("units", units::units),
    ("resolve", resolve::in_memory),
    ("resolve_kernel", resolve::against_kernel),
    ("image_unpack", image::unpack),
    ("image_json", image::json),
    ("net_http", net::http_head),
    ("net_socks", net::socks5),
    ("net_tls", net::client_hello),
    ("net_rule", net::rule),
    ("http_request", http::request),
];

/// Reads fuzz input as a stream of choices; past the end every choice is 0,
/// so any input (the empty one too) is a valid program of choices.
pub struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data, pos: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// A number in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n <= 256 { usize::from(self.u8()) % n } else { self.u32() as usize % n }
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }
}

/// A deterministic mutator for the stable smoke run (xorshift64*): bit
/// flips, byte sets, inserts, deletes and splices of interesting bytes.
pub struct Mutator(u64);

impl Mutator {
    pub fn new(seed: u64) -> Self {
        Mutator(seed | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// A mutated copy of `input` (1 to 8 edits).
    pub fn mutate(&mut self, input: &[u8]) -> Vec<u8> {
        const INTERESTING: &[&[u8]] = &[
            b"\0",
            b"/",
            b"..",
            b".",
            b"\xff",
            b"-",
            b"9999999999999999999999",
            b"\"",
            b"{",
            b"}",
            b"[",
            b"]",
            b",",
            b"e",
            b"G",
            b"ms",
            b"0.",
            b"\xe2\x80\x8b",
        ];
        let mut v = input.to_vec();
        for _ in 0..1 + self.below(8) {
            let at = self.below(v.len() + 1);
            match self.below(6) {
                0 if !v.is_empty() => {
                    let i = at.min(v.len() - 1);
                    v[i] ^= 1 << self.below(8);
                }
                1 if !v.is_empty() => {
                    let i = at.min(v.len() - 1);
                    v[i] = self.next() as u8;
                }
                2 => {
                    let b = self.next() as u8;
                    v.insert(at, b);
                }
                3 if !v.is_empty() => {
                    let end = (at + 1 + self.below(8)).min(v.len());
                    v.drain(at.min(v.len() - 1)..end);
                }
                4 => {
                    let s = INTERESTING[self.below(INTERESTING.len())];
                    v.splice(at..at, s.iter().copied());
                }
                _ if v.len() > 1 => {
                    // Duplicate a slice of itself somewhere else.
                    let start = self.below(v.len());
                    let end = (start + 1 + self.below(16)).min(v.len());
                    let chunk = v[start..end].to_vec();
                    let at = self.below(v.len() + 1);
                    v.splice(at..at, chunk);
                }
                _ => v.push(self.next() as u8),
            }
        }
        v.truncate(1 << 16);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_past_the_end_are_zero() {
        let mut b = Bytes::new(&[7]);
        assert_eq!(b.u8(), 7);
        assert!(b.is_empty());
        assert_eq!((b.u8(), b.u64(), b.below(3)), (0, 0, 0));
    }

    #[test]
    fn the_mutator_is_deterministic_and_changes_its_input() {
        let (mut a, mut b) = (Mutator::new(42), Mutator::new(42));
        for _ in 0..100 {
            assert_eq!(a.mutate(b"{\"x\": 1}"), b.mutate(b"{\"x\": 1}"));
        }
        assert!((0..100).any(|_| a.mutate(b"abc") != b"abc"));
    }
}
