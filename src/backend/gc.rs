//! `husk gc`'s one entry into the backends: each backend that can leave
//! something of its own behind (beyond the cgroups and sandbox records,
//! which `cgroup::gc` and `sandbox::gc` sweep) has a section here, so the
//! command knows no backend by name.

use super::runsc;
use serde::Serialize;
use std::path::Path;

/// One section per backend with leftovers of its own; flattened into
/// `husk gc --json`'s report (`"runsc": {...}` beside `"cgroups"`). A
/// native run leaves nothing but its cgroup, which a killed reaper of its
/// teardown leaves recorded in the state dir.
#[derive(Serialize, Debug, Default)]
pub struct GcReport {
    pub runsc: runsc::gc::RunscGcReport,
    /// Native runs' teardowns whose detached reaper was killed
    /// (`native::teardown`).
    pub native: super::native::teardown::GcReport,
}

/// Sweeps every backend's leftovers. `state_dir` is husk's `--state-dir`.
pub fn gc_all(state_dir: Option<&Path>) -> GcReport {
    let runsc = match runsc::config::state_dir(state_dir) {
        Ok(state) => runsc::gc::gc_runsc(&state),
        Err(e) => runsc::gc::RunscGcReport { errors: vec![e.to_string()], ..Default::default() },
    };
    let native = match crate::paths::Paths::resolve(None, state_dir, &crate::paths::Env::current()) {
        Ok(p) => super::native::teardown::finish_interrupted(&p.state),
        Err(e) => super::native::teardown::GcReport { errors: vec![e.to_string()], ..Default::default() },
    };
    GcReport { runsc, native }
}

impl GcReport {
    /// What was done, one line each, for the text report.
    pub fn actions(&self) -> Vec<String> {
        let r = &self.runsc;
        let removed = r.removed.iter().map(|id| format!("removed runsc container {id}"));
        let killed = r.killed.iter().map(|pid| format!("killed runsc sandbox pid {pid}"));
        let running = r.running.iter().map(|id| format!("kept runsc run {id}: its husk is still running"));
        let finished =
            self.native.finished.iter().map(|d| format!("finished the teardown of a killed reaper: removed {d}"));
        removed.chain(killed).chain(running).chain(finished).collect()
    }

    /// One summary line per backend.
    pub fn summary(&self) -> Vec<String> {
        let r = &self.runsc;
        vec![
            format!("runsc: {} removed, {} still running", r.removed.len(), r.running.len()),
            format!("native: {} cgroups of interrupted teardowns removed", self.native.finished.len()),
        ]
    }

    pub fn errors(&self) -> impl Iterator<Item = &String> {
        self.runsc.errors.iter().chain(&self.native.errors)
    }
}
