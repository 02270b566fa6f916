//! The phases of a run up to (and around) the sandbox, one by one: probing
//! the host, building the plan and its parts (id maps, mount plan), the
//! kernel's price for the sandbox's namespaces (clone3 of a child that exits
//! at once, reaped), capturing output, and writing the verdict. The per-run
//! numbers of a real run are in the verdict's `phases_ms`; these isolate
//! each phase so a regression points at its cause.
//!
//!   cargo bench --bench spawn            # as root for the namespace group

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use husk::capture::Capture;
use husk::host::HostFacts;
use husk::image::root::root_input;
use husk::outcome::{Outcome, Termination, Verdict};
use husk::plan::Plan;
use husk::rootfs::{RootSource, plan::RootInputs};
use husk::spec::{NetworkMode, Spec};
use husk::sys::process::{Forked, SingleThreaded, clone3, exit_now};
use husk::userns::IdMap;
use std::time::{Duration, Instant};

fn spec() -> Spec {
    Spec::new(vec!["/bin/true".into()])
}

fn plan_phases(c: &mut Criterion) {
    let mut g = c.benchmark_group("plan");
    g.bench_function("host facts probe (cgroup layout, subids, cap_last_cap)", |b| b.iter(HostFacts::probe));
    let host = HostFacts::probe();
    let paths = husk::paths::Paths::from_cli(None, None);
    g.bench_function("id map plan", |b| b.iter(|| IdMap::plan(&host, None, 0, 0).expect("id map")));
    let inputs = RootInputs {
        hostname: "husk",
        network: NetworkMode::None,
        workdir: "/workspace",
        workdir_size: 256 << 20,
        tmp_size: 64 << 20,
        binds: &[],
        tmpfs: &[],
        owner: None,
        devpts_gid: Some(5),
        upper: husk::rootfs::plan::Upper::None,
        fold_to: None,
    };
    g.bench_function("mount plan, host mode", |b| {
        b.iter(|| husk::rootfs::plan::build(RootSource::Host, &inputs).expect("mount plan"))
    });
    let rootfs = rootfs_dir();
    g.bench_function("mount plan, rootfs dir", |b| {
        b.iter(|| husk::rootfs::plan::build(RootSource::Dir(rootfs.0.clone()), &inputs).expect("mount plan"))
    });
    g.bench_function("root input (host: reads /etc/passwd)", |b| {
        b.iter(|| root_input(&spec(), &host, &paths).expect("root").0)
    });
    g.bench_function("whole plan, host mode defaults (Plan::build)", |b| {
        b.iter_batched(
            || (spec(), root_input(&spec(), &host, &paths).expect("root").0),
            |(s, root)| Plan::build(s, &host, root).expect("plan"),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// A small rootfs-like tree (usr-merged, as Debian's).
struct TempRoot(std::path::PathBuf);

impl Drop for TempRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rootfs_dir() -> TempRoot {
    let dir = std::env::temp_dir().join(format!("husk-bench-rootfs-{}", std::process::id()));
    for d in ["usr/bin", "usr/lib", "etc", "tmp", "proc", "dev", "sys", "root"] {
        std::fs::create_dir_all(dir.join(d)).expect("rootfs dir");
    }
    for (link, target) in [("bin", "usr/bin"), ("lib", "usr/lib")] {
        let _ = std::os::unix::fs::symlink(target, dir.join(link));
    }
    std::fs::write(dir.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").expect("passwd");
    TempRoot(dir)
}

/// Forks `iters` children with `flags` (clone3, like the native backend),
/// each exiting at once; returns the total wall time to clone and reap them.
fn clone_and_reap(flags: libc::c_int, iters: u64) -> Duration {
    let one = SingleThreaded::check().expect("the benchmark is single-threaded");
    let start = Instant::now();
    for _ in 0..iters {
        match clone3(&one, flags, None).expect("clone3") {
            Forked::Child(_) => exit_now(0),
            Forked::Parent { pid, .. } => {
                let _ = nix::sys::wait::waitpid(pid, None);
            }
        }
    }
    start.elapsed()
}

fn namespaces(c: &mut Criterion) {
    let mut g = c.benchmark_group("namespaces");
    // Network namespaces are torn down asynchronously by the kernel: keep
    // the churn bounded.
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    g.bench_function("clone3 + reap, no namespaces (fork floor)", |b| b.iter_custom(|n| clone_and_reap(0, n)));
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("namespaces: not root; only the fork floor was measured");
        g.finish();
        return;
    }
    let all = libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    g.bench_function("clone3 + reap, user+pid+mount+ipc+uts", |b| b.iter_custom(|n| clone_and_reap(all, n)));
    g.bench_function("clone3 + reap, the sandbox's set (+net)", |b| {
        b.iter_custom(|n| clone_and_reap(all | libc::CLONE_NEWNET, n))
    });
    g.finish();
}

fn verdict(c: &mut Criterion) {
    let mut g = c.benchmark_group("verdict");
    let out = vec![b'x'; 4096];
    g.bench_function("capture 4 KiB of output (head+tail bounded)", |b| {
        b.iter(|| {
            let mut cap = Capture::new(1 << 20, &husk::redact::Redaction::none());
            cap.push(&out);
            cap.finish()
        })
    });
    let mut outcome = Outcome::setup_failed(husk::outcome::ErrorReport::new(husk::step::Phase::Setup, String::new()));
    outcome.termination = Termination::Exited;
    outcome.status = Some(0);
    outcome.error = None;
    outcome.stdout = Some({
        let mut cap = Capture::new(1 << 20, &husk::redact::Redaction::none());
        cap.push(b"hello\n");
        cap.finish()
    });
    for (k, v) in [("plan", 0.3), ("clone", 0.9), ("mounts", 1.0), ("pivot", 0.2), ("run", 1.0)] {
        outcome.phases_ms.insert(k, v);
    }
    let isolation = husk::isolation::Isolation {
        namespaces: ["user", "pid", "mount", "ipc", "uts", "cgroup", "net"].map(String::from).to_vec(),
        ..Default::default()
    };
    g.bench_function("verdict JSON (exited, captured output)", |b| {
        b.iter(|| {
            serde_json::to_vec(&Verdict::new(
                "0123456789ab",
                "native",
                &outcome,
                Some(&isolation),
                true,
                &husk::redact::Redaction::none(),
            ))
            .expect("json")
        })
    });
    g.finish();
}

criterion_group!(benches, plan_phases, namespaces, verdict);
criterion_main!(benches);
