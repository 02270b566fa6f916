//! Seccomp costs: compiling a profile (what the build-time/cached path
//! saves) against loading a compiled program into the kernel (what every run
//! pays). Loading is irreversible, so each sample forks a child that loads
//! once and reports the time of the seccomp(2) call alone.

use criterion::{Criterion, criterion_group, criterion_main};
use husk::seccomp::{compile, compile_text, shipped};
use husk::sys::process::{Forked, SingleThreaded, exit_now, fork};
use husk::sys::seccomp::{SockFilter, install_filter};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Forks `iters` children; each sets no_new_privs, loads `program` and writes
/// the nanoseconds the load took. Returns the sum.
fn load_in_children(program: &[SockFilter], iters: u64) -> Duration {
    let one = SingleThreaded::check().expect("the benchmark is single-threaded");
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let (r, w) = nix::unistd::pipe().expect("pipe");
        match fork(&one).expect("fork") {
            Forked::Child(_) => {
                nix::sys::prctl::set_no_new_privs().expect("no_new_privs");
                let t = Instant::now();
                let ok = install_filter(program, 0).is_ok();
                let ns = if ok { t.elapsed().as_nanos() as u64 } else { u64::MAX };
                let _ = nix::unistd::write(&w, &ns.to_ne_bytes());
                exit_now(0);
            }
            Forked::Parent { pid, .. } => {
                drop(w);
                let mut buf = [0u8; 8];
                std::fs::File::from(r).read_exact(&mut buf).expect("child result");
                let _ = nix::sys::wait::waitpid(pid, None);
                let ns = u64::from_ne_bytes(buf);
                assert_ne!(ns, u64::MAX, "seccomp load failed");
                total += Duration::from_nanos(ns);
            }
        }
    }
    total
}

fn bench(c: &mut Criterion) {
    let default = shipped("default").expect("default profile");
    let strict = shipped("strict").expect("strict profile");
    let mut g = c.benchmark_group("seccomp");
    g.bench_function("compile default (parse + lower + seccompiler)", |b| {
        b.iter(|| compile_text("default", default.json, 0, None).expect("compiles"))
    });
    g.bench_function("compile strict", |b| b.iter(|| compile_text("strict", strict.json, 0, None).expect("compiles")));
    g.bench_function("notify variant of default (explain mode plan step)", |b| {
        b.iter(|| compile::notify_variant(default.filter))
    });
    g.bench_function("load default (seccomp(2) of the built-in program)", |b| {
        b.iter_custom(|iters| load_in_children(default.filter, iters))
    });
    g.bench_function("load strict", |b| b.iter_custom(|iters| load_in_children(strict.filter, iters)));
    let allow_all = [compile::insn(compile::BPF_RET_K, 0, 0, compile::RET_ALLOW)];
    g.bench_function("load a 1-instruction program (kernel floor)", |b| {
        b.iter_custom(|iters| load_in_children(&allow_all, iters))
    });
    g.finish();
    let _ = std::io::stdout().as_raw_fd();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
