//! Names husk makes up: run, sandbox and exec ids, temporary file names.

/// A random 12-hex-digit id (run / sandbox names).
pub fn new_id() -> String {
    random_hex(6)
}

/// `bytes` random bytes in hex; without /dev/urandom, time and pid (unique
/// enough for names, never secrets).
pub fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b)).is_err() {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let seed = (t.as_nanos() as u64 ^ std::process::id() as u64).to_le_bytes();
        for (i, x) in b.iter_mut().enumerate() {
            *x = seed[i % 8].wrapping_add((i / 8) as u8);
        }
    }
    hex::encode(b)
}
