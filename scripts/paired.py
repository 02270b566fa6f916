#!/usr/bin/env python3
"""Paired, interleaved timing of a few commands on a noisy machine.

    scripts/paired.py N 'CMD1' 'CMD2' ...

Runs every command 10 times to warm up, then N rounds of CMD1, CMD2, ...
(posix_spawn + waitpid, stdout/stderr to /dev/null, wall time) and prints
each command's median, quartiles and its median divided by CMD1's. Leading
VAR=VALUE words set the environment of that command only (an A/B switch in
one binary without a shell or env(1) in the timing). Load
that drifts over minutes on a shared VM hits every command alike, which
separate hyperfine blocks do not guarantee. Commands are split with shlex
(no shell) and the program must be a path (no PATH search); a command
that fails stops the run. scripts/bench.sh remains
the reference benchmark; this is for A/B checks of a change.

Each command's CPU time per run is printed too (on a loaded machine it is
steadier than wall time). As root on a host with a cgroup v1 cpuacct
hierarchy, every command runs in a cpuacct cgroup of its own, so the count
holds every process of its tree, also those that outlive it (bwrap exits
while its sandbox's pid 1 still tears down, reaped by nobody who waits for
it; husk run's detached teardown reaper too). Otherwise it is wait4's
rusage: only what was reaped inside the tree.
Kernel work done later by kworkers (a freed namespace's or cgroup's
deferred teardown) is in neither.
"""
import os, sys, time, statistics as st, shlex
if len(sys.argv) < 3 or not sys.argv[1].isdigit():
    sys.exit("usage: scripts/paired.py N 'CMD1' ['CMD2' ...]  (N rounds, commands interleaved)")
n = int(sys.argv[1]); cmds = [shlex.split(c) for c in sys.argv[2:]]
res = [[] for _ in cmds]
cpu = [0.0 for _ in cmds]
CPUACCT = "/sys/fs/cgroup/cpuacct"
acct = None
if os.geteuid() == 0 and os.path.exists(CPUACCT + "/cpuacct.usage"):
    home = next(l.split(":", 2)[2].strip() for l in open("/proc/self/cgroup") if l.split(":")[1] in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu"))
    base_dir = f"{CPUACCT}/paired-{os.getpid()}"
    acct = [f"{base_dir}/{j}" for j in range(len(cmds))]
    for d in acct: os.makedirs(d)
def enter(d):
    with open(d + "/cgroup.procs", "w") as f: f.write(str(os.getpid()))
def remove_groups():  # also when a command failed
    if not acct: return
    enter(CPUACCT + home)
    for d in acct + [base_dir]:
        try: os.rmdir(d)
        except OSError: pass
if acct:
    import atexit
    atexit.register(remove_groups)
devnull = os.open("/dev/null", os.O_WRONLY)
def split_env(c):
    env = dict(os.environ)
    while c and "=" in c[0] and not c[0].startswith("/"):
        k, v = c[0].split("=", 1); env[k] = v; c = c[1:]
    return c, env
cmds = [split_env(c) for c in cmds]
def run(ce, j=None):
    c, env = ce
    if acct and j is not None: enter(acct[j])
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(c[0], c, env, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)])
    _, status, ru = os.wait4(pid, 0)
    t1 = time.perf_counter_ns()
    if status != 0: print("FAIL", c, status, file=sys.stderr); sys.exit(1)
    if j is not None: cpu[j] += (ru.ru_utime + ru.ru_stime) * 1e3
    return (t1 - t0) / 1e6
for _ in range(10):
    for c in cmds: run(c)
for i in range(n):
    for j, c in enumerate(cmds): res[j].append(run(c, j))
if acct:
    enter(CPUACCT + home)
    time.sleep(1)  # what outlived its command ends
    for j, d in enumerate(acct): cpu[j] = int(open(d + "/cpuacct.usage").read()) / 1e6
cpu = [c / n for c in cpu]
base = st.median(res[0])
print("wall ms: median, quartiles, median / the first's; cpu ms per run: %s, / the first's"
      % ("cpuacct, the whole tree" if acct else "wait4 rusage, what was reaped"))
for c, r, u in zip(sys.argv[2:], res, cpu):
    r.sort(); q = lambda p: r[int(p * (len(r) - 1))]
    print(f"{st.median(r):7.3f} med  p25 {q(.25):6.3f} p75 {q(.75):6.3f}  x{st.median(r)/base:5.2f}"
          f"  cpu {u:6.3f} x{u/cpu[0]:5.2f}  {c[:100]}")
