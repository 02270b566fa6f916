//! `husk pause | resume`: freeze a live sandbox (processes and memory
//! stay, no CPU) until resumed (src/sandbox/pause.rs, docs/sandboxes.md).

use crate::cli::{PauseArgs, ResumeArgs};
use crate::outcome::EXIT_HUSK_FAILED;
use crate::paths::{Paths, PathsError};
use crate::sandbox::SandboxError;
use crate::sandbox::lifecycle::store_of;
use crate::sandbox::proto::Reply;
use crate::sandbox::state::now_ms;
use serde_json::json;

pub fn pause(args: PauseArgs, paths: &Result<Paths, PathsError>) -> i32 {
    let out = store_of(paths).and_then(|s| crate::sandbox::pause::pause(&s, &args.sandbox, args.memory_reclaim));
    report(out, args.json, "paused")
}

pub fn resume(args: ResumeArgs, paths: &Result<Paths, PathsError>) -> i32 {
    let out = store_of(paths).and_then(|s| crate::sandbox::pause::resume(&s, &args.sandbox));
    report(out, args.json, "resumed")
}

fn report(out: Result<(String, Reply), SandboxError>, json: bool, done: &str) -> i32 {
    match out {
        Ok((id, r)) => {
            let left = r.expires_ms.saturating_sub(now_ms());
            if json {
                let mut v = json!({"id": id, "state": if r.paused { "paused" } else { "ready" },
                    "paused": r.paused, "expires_ms": r.expires_ms, "ttl_ms": r.ttl_ms});
                if let Some(b) = r.reclaimed_bytes {
                    v["reclaimed_bytes"] = json!(b);
                }
                if let Some(cp) = &r.checkpoint {
                    v["checkpoint"] = json!(cp);
                }
                crate::outln!("{v}");
            } else if r.paused {
                let reclaimed = r.reclaimed_bytes.map(|b| format!(" ({} KiB of memory pushed out)", b / 1024));
                let reclaimed = reclaimed.or_else(|| {
                    r.checkpoint
                        .as_ref()
                        .map(|c| format!(" (checkpointed: {} KiB image in {})", c.bytes / 1024, c.path.display()))
                });
                crate::outln!("{id} {done}{}", reclaimed.unwrap_or_default());
            } else {
                crate::outln!("{id} {done}; its lease (--ttl) restarted: expires in {}s", left.div_ceil(1000));
            }
            0
        }
        Err(e) => {
            if json {
                crate::cli::report::json_failure(e.report(), std::collections::BTreeMap::new(), false);
            }
            crate::errln!("husk: {e}");
            if let Some(h) = e.hint() {
                crate::errln!("husk: hint: {h}");
            }
            EXIT_HUSK_FAILED
        }
    }
}
