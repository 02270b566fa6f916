//! The planning phase of a run, before any process is cloned: probing the
//! host (`HostFacts::probe`: /proc/self/mountinfo, cgroup layout, subuid)
//! and `Plan::build` of a default spec (argv/env CStrings, PATH candidates,
//! id maps, the seccomp program, the mount plan, the cgroup plan), in host
//! mode and on a rootfs directory. Everything here runs in the parent on
//! every `husk run`; the verdict's `phases_ms.plan` is this plus process
//! start, argument parsing and (with --image) the store lookup.

use criterion::{Criterion, criterion_group, criterion_main};
use husk::host::HostFacts;
use husk::plan::{ImageDefaults, Plan, PlanError, RootInput};
use husk::rootfs::RootSource;
use husk::spec::{RootSpec, Spec};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn host_root() -> RootInput<'static> {
    RootInput {
        source: RootSource::Host,
        image: ImageDefaults::default(),
        passwd: std::fs::read_to_string("/etc/passwd").ok(),
        group: std::fs::read_to_string("/etc/group").ok(),
    }
}

/// A small root directory with the usual top-level layout (what a busybox
/// image unpacks to), so the planner places mount points in a real tree.
fn rootfs_dir() -> PathBuf {
    let base = std::env::var_os("HUSK_BENCH_TMP").map(PathBuf::from).unwrap_or_else(|| "/tmp".into());
    let root = base.join(format!("husk-bench-plan-{}", std::process::id()));
    for d in ["bin", "etc", "usr/bin", "usr/lib", "var/tmp", "tmp", "root", "home"] {
        std::fs::create_dir_all(root.join(d)).expect("rootfs dir");
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").expect("passwd");
    std::fs::write(root.join("etc/group"), "root:x:0:\n").expect("group");
    root
}

fn dir_root(dir: &Path) -> RootInput<'static> {
    RootInput {
        source: RootSource::Dir(dir.to_path_buf()),
        image: ImageDefaults::default(),
        passwd: std::fs::read_to_string(dir.join("etc/passwd")).ok(),
        group: std::fs::read_to_string(dir.join("etc/group")).ok(),
    }
}

/// The default spec, with cgroup limits when this host and user can have
/// them (as `husk run` does), else without (an unprivileged user without a
/// delegated subtree): said on stderr so the numbers are not misread.
fn default_spec(host: &HostFacts, root: RootSpec) -> Spec {
    let mut spec = Spec::new(vec!["/bin/true".into()]);
    spec.root = root.clone();
    let input = match &root {
        RootSpec::Rootfs(d) => dir_root(d),
        _ => host_root(),
    };
    match Plan::build(spec.clone(), host, input) {
        Ok(_) => spec,
        Err(PlanError::Cgroup(e)) => {
            eprintln!("plan bench: without cgroup limits here ({e})");
            spec.limits.no_cgroup = true;
            spec
        }
        Err(e) => panic!("a default plan must build: {e}"),
    }
}

fn bench(c: &mut Criterion) {
    let host = HostFacts::probe();
    let dir = rootfs_dir();
    let host_spec = default_spec(&host, RootSpec::Host);
    let dir_spec = default_spec(&host, RootSpec::Rootfs(dir.clone()));
    let mut g = c.benchmark_group("plan");
    g.bench_function("HostFacts::probe", |b| b.iter(HostFacts::probe));
    g.bench_function("Plan::build default spec, host root", |b| {
        b.iter(|| Plan::build(host_spec.clone(), &host, host_root()).expect("plan"))
    });
    g.bench_function("Plan::build default spec, rootfs dir", |b| {
        b.iter(|| Plan::build(dir_spec.clone(), &host, dir_root(&dir)).expect("plan"))
    });
    let mut unconfined = host_spec.clone();
    unconfined.limits.no_cgroup = true;
    unconfined.seccomp = husk::spec::SeccompSpec::Unconfined;
    g.bench_function("Plan::build host root, --no-cgroup --seccomp unconfined", |b| {
        b.iter(|| Plan::build(unconfined.clone(), &host, host_root()).expect("plan"))
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
