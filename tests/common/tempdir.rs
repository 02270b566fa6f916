//! A temp directory removed on drop, shared by tests/common and
//! tests/imagekit (image tests do not include tests/common).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A directory removed (recursively) on drop. 0755, so a sandbox's mapped
/// ids can traverse it; made writable again before removal, since tests
/// leave read-only trees (hostile layers, unwritable dirs) in it.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let name = format!(
            "husk-test-{tag}-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            nanos % 1_000_000_000
        );
        let p = std::env::temp_dir().join(name);
        std::fs::create_dir(&p).expect("create temp dir");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chmod").args(["-R", "u+rwx"]).arg(&self.0).output();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
