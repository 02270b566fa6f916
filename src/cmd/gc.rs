//! `husk gc`: removes what runs that died before their own cleanup left
//! behind. One small function per resource kind, each returning its part
//! of the report.

use crate::cgroup::{self, Caller};
use crate::cli::GcArgs;
use crate::host::HostFacts;
use serde::Serialize;
use std::path::Path;

/// One section per resource kind husk may leave behind when it is killed
/// before its own cleanup runs.
#[derive(Serialize, Debug, Default)]
pub struct Report {
    /// The state directory whose sandboxes and backends' state were swept
    /// (another one's are never touched).
    pub state_dir: Option<String>,
    pub cgroups: cgroup::gc::GcReport,
    /// Each backend's own leftovers, one key per backend.
    #[serde(flatten)]
    pub backends: crate::backend::gc::GcReport,
    pub sandboxes: crate::sandbox::gc::SandboxGcReport,
    pub images: ImageGcReport,
    /// husk as an OCI runtime: stopped containers no engine deleted.
    pub oci: crate::oci::gc::OciGcReport,
}

/// Partial layer builds killed imports left in the image store's tmp/,
/// layer tars of killed commits, and this state dir's snapshot images
/// (`husk fork`) nobody needs any more.
#[derive(Serialize, Debug, Default)]
pub struct ImageGcReport {
    pub partial_builds_removed: usize,
    /// `tmp/commit-<pid>-<id>.tar` whose writer is gone.
    pub commit_tars_removed: Vec<String>,
    pub snapshots: crate::sandbox::snapshot_images::SnapshotSweep,
    pub errors: Vec<String>,
}

/// Named commit tars (`tmp/commit-<pid>-<id>.tar`, written where the
/// store's filesystem has no O_TMPFILE, and by husk before it used one)
/// whose writer no longer runs.
fn sweep_commit_tars(tmp: &Path) -> Vec<String> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(tmp) else { return removed };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("commit-")
            .and_then(|r| r.strip_suffix(".tar"))
            .and_then(|r| r.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
        else {
            continue;
        };
        // A pid that runs (maybe reused) keeps its file: removing a live
        // commit's tar would fail that commit.
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH);
        if pid > 0 && gone && std::fs::remove_file(e.path()).is_ok() {
            removed.push(e.path().display().to_string());
        }
    }
    removed
}

/// Sweeps the image store's stale builds (an import in progress keeps
/// its own); a store that does not exist yet is left uncreated.
pub fn gc_images(paths: &Result<crate::paths::Paths, crate::paths::PathsError>) -> ImageGcReport {
    let Ok(paths) = paths else {
        return ImageGcReport::default();
    };
    if !paths.root.join("tmp").is_dir() {
        return ImageGcReport::default();
    }
    let store = match crate::image::Store::open(&paths.root) {
        Ok(s) => s,
        Err(e) => return ImageGcReport { errors: vec![e.to_string()], ..Default::default() },
    };
    let swept = store.lock_store(false).and_then(|_shared| store.sweep_tmp());
    let mut report = match swept {
        Ok(n) => ImageGcReport { partial_builds_removed: n, ..Default::default() },
        Err(e) => ImageGcReport { errors: vec![e.to_string()], ..Default::default() },
    };
    report.commit_tars_removed = sweep_commit_tars(&paths.root.join("tmp"));
    if let Ok(sandboxes) = crate::sandbox::state::Store::open(&paths.state) {
        report.snapshots = crate::sandbox::snapshot_images::sweep(&store, &sandboxes);
        report.errors.extend(report.snapshots.errors.iter().cloned());
    }
    report
}

/// Stale run cgroups under husk's parents (and `--cgroup-parent`). A run
/// (`husk run`) records its cgroup nowhere, so whose it was cannot be
/// told: only a gc of the default state dir removes them; one given its
/// own (`--state-dir`, HUSK_STATE_DIR) leaves them alone and says so.
pub fn gc_cgroups(host: &HostFacts, args: &GcArgs, own_state_dir: bool) -> cgroup::gc::GcReport {
    if own_state_dir {
        return cgroup::gc::GcReport { left_alone: true, ..Default::default() };
    }
    let who = Caller { uid: host.uid, privileged: host.privileged };
    let mut parents = cgroup::gc::parents(host.cgroup(), None, who);
    if let Some(p) = &args.cgroup_parent {
        // The same rule `run --cgroup-parent` applies.
        let rel = match cgroup::parse_parent(p) {
            Ok(rel) => rel,
            Err(e) => return cgroup::gc::GcReport { errors: vec![e.to_string()], ..Default::default() },
        };
        parents.extend(cgroup::gc::parents(host.cgroup(), Some(&rel), who));
    }
    cgroup::gc::collect(&parents, args.min_age)
}

/// Long-lived sandboxes (`husk create`) whose supervisor died or let the
/// lease run out, and sandbox cgroups without a sandbox.
pub fn gc_sandboxes(
    host: &HostFacts,
    args: &GcArgs,
    paths: &Result<crate::paths::Paths, crate::paths::PathsError>,
) -> crate::sandbox::gc::SandboxGcReport {
    let store = match paths
        .as_ref()
        .map_err(|e| e.to_string())
        .and_then(|p| crate::sandbox::state::Store::open(&p.state).map_err(|e| e.to_string()))
    {
        Ok(s) => s,
        Err(e) => return crate::sandbox::gc::SandboxGcReport { errors: vec![e], ..Default::default() },
    };
    let who = Caller { uid: host.uid, privileged: host.privileged };
    let parents = cgroup::gc::parents(host.cgroup(), None, who);
    crate::sandbox::gc::gc(&store, &parents, args.min_age)
}

/// A state dir was given (`--state-dir`, HUSK_STATE_DIR) other than the
/// one husk uses by default for this user.
fn own_state_dir(given: Option<&Path>, paths: &Result<crate::paths::Paths, crate::paths::PathsError>) -> bool {
    let default = crate::paths::Paths::from_cli(None, None).ok().map(|p| p.state);
    match (given, paths) {
        (None, _) => false,
        (Some(_), Ok(p)) => default.as_ref() != Some(&p.state),
        (Some(_), Err(_)) => true,
    }
}

pub fn gc(
    args: GcArgs,
    state_dir: Option<&Path>,
    paths: &Result<crate::paths::Paths, crate::paths::PathsError>,
) -> i32 {
    // A usage error: refused before anything is removed.
    if let Some(p) = &args.cgroup_parent
        && let Err(e) = cgroup::parse_parent(p)
    {
        if args.json {
            let r = crate::outcome::ErrorReport::new(crate::step::Phase::Arguments, format!("gc: {e}"));
            crate::cli::report::json_failure(r, Default::default(), false);
        }
        crate::errln!("husk: gc: {e}");
        return crate::outcome::EXIT_HUSK_FAILED;
    }
    let host = HostFacts::probe();
    // Sandboxes and backends first: killing what is left empties cgroups,
    // which the cgroup pass can then remove.
    let sandboxes = gc_sandboxes(&host, &args, paths);
    let backends = crate::backend::gc::gc_all(state_dir);
    let oci_roots: Vec<_> = std::iter::once(crate::oci::state::default_root()).chain(args.oci_root.clone()).collect();
    let oci = crate::oci::gc::gc(&oci_roots, args.min_age);
    let report = Report {
        state_dir: paths.as_ref().ok().map(|p| p.state.display().to_string()),
        cgroups: gc_cgroups(&host, &args, own_state_dir(state_dir, paths)),
        backends,
        sandboxes,
        images: gc_images(paths),
        oci,
    };
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        let b = &report.backends;
        for line in b.actions() {
            crate::outln!("{line}");
        }
        let s = &report.sandboxes;
        for id in &s.removed {
            crate::outln!("removed sandbox {id}");
        }
        for d in &s.cgroups {
            crate::outln!("removed sandbox cgroup {d}");
        }
        let c = &report.cgroups;
        for d in &c.removed {
            crate::outln!("removed cgroup {d}");
        }
        for d in &c.busy {
            crate::outln!("kept cgroup {d}: it still has processes");
        }
        let o = &report.oci;
        for id in &o.removed {
            crate::outln!("removed OCI container {id}");
        }
        for d in &o.cgroup_parents_removed {
            crate::outln!("removed OCI parent cgroup {d}");
        }
        for e in b.errors().chain(&c.errors).chain(&s.errors).chain(&report.images.errors).chain(&o.errors) {
            crate::errln!("husk: gc: {e}");
        }
        crate::outln!(
            "sandboxes of state dir {}: {} removed ({} expired), {} live",
            report.state_dir.as_deref().unwrap_or("(none)"),
            s.removed.len(),
            s.expired.len(),
            s.live.len()
        );
        for line in b.summary() {
            crate::outln!("{line}");
        }
        for d in &s.cgroups_left {
            crate::outln!("left sandbox cgroup {d}: no sandbox of this state dir");
        }
        if c.left_alone {
            crate::outln!(
                "cgroups: run cgroups left alone (a state dir was given: runs record no state dir, so only `husk gc` \
                 with the default one removes them)"
            );
        } else {
            crate::outln!("cgroups: {} removed, {} busy, {} too young", c.removed.len(), c.busy.len(), c.young.len());
        }
        let i = &report.images;
        for t in &i.commit_tars_removed {
            crate::outln!("removed commit tar {t}");
        }
        for n in &i.snapshots.removed {
            crate::outln!("removed snapshot image {n}");
        }
        for why in &i.snapshots.kept {
            crate::outln!("kept snapshot image {why}");
        }
        crate::outln!(
            "images: {} partial layer builds removed, {} commit tars removed, {} snapshot images removed ({} kept)",
            i.partial_builds_removed,
            i.commit_tars_removed.len(),
            i.snapshots.removed.len(),
            i.snapshots.kept.len()
        );
        crate::outln!(
            "OCI containers under {}: {} removed, {} live, {} too young",
            if o.roots.is_empty() { "(no root)".to_string() } else { o.roots.join(", ") },
            o.removed.len(),
            o.live,
            o.young
        );
    }
    let clean = report.backends.errors().next().is_none()
        && report.cgroups.errors.is_empty()
        && report.sandboxes.errors.is_empty()
        && report.images.errors.is_empty()
        && report.oci.errors.is_empty();
    if clean { 0 } else { crate::outcome::EXIT_HUSK_FAILED }
}
