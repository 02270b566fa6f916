//! The accounting files of a run's cgroup, opened when it is created so
//! the end of the run costs one pread per counter instead of an
//! open+read+close on the path (the teardown is on every run's critical
//! path: the caller waits for the verdict).

use super::fs;
use super::report::Usage;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// One counter file and how it reads into `Usage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stat {
    /// v2 memory.peak, v1 memory.max_usage_in_bytes.
    MemoryPeak,
    /// v2 memory.events: `max` (limit hits) and `oom_kill`.
    MemoryEvents,
    /// v1 memory.failcnt (or memsw.failcnt when swap is capped: charges
    /// meet that counter first).
    MemoryFailcnt,
    /// v1 memory.oom_control: `oom_kill`.
    OomControl,
    PidsPeak,
    /// pids.events: `max` (forks refused).
    PidsEvents,
    /// v2 cpu.stat: user/system usec, and throttling where cpu is enabled.
    CpuUsage,
    /// v1 cpu.stat: nr_throttled, throttled_time (ns).
    CpuThrottleV1,
    /// v1 cpuacct.usage_user / usage_sys (ns).
    CpuacctUser,
    CpuacctSys,
}

impl Stat {
    fn apply(self, text: &str, u: &mut Usage) {
        let first = || text.split_whitespace().next().and_then(|n| n.parse::<u64>().ok());
        match self {
            Stat::MemoryPeak => u.memory_peak_bytes = first(),
            Stat::MemoryEvents => {
                u.memory_limit_hits = fs::keyed(text, "max");
                u.oom_kills = fs::keyed(text, "oom_kill");
            }
            Stat::MemoryFailcnt => u.memory_limit_hits = first(),
            Stat::OomControl => u.oom_kills = fs::keyed(text, "oom_kill"),
            Stat::PidsPeak => u.pids_peak = first(),
            Stat::PidsEvents => u.pids_limit_hits = fs::keyed(text, "max"),
            Stat::CpuUsage => {
                u.cpu_user_usec = fs::keyed(text, "user_usec");
                u.cpu_system_usec = fs::keyed(text, "system_usec");
                u.cpu_throttled_periods = fs::keyed(text, "nr_throttled").or(u.cpu_throttled_periods);
                u.cpu_throttled_usec = fs::keyed(text, "throttled_usec").or(u.cpu_throttled_usec);
            }
            Stat::CpuThrottleV1 => {
                u.cpu_throttled_periods = fs::keyed(text, "nr_throttled");
                u.cpu_throttled_usec = fs::keyed(text, "throttled_time").map(|ns| ns / 1000);
            }
            Stat::CpuacctUser => u.cpu_user_usec = first().map(|ns| ns / 1000),
            Stat::CpuacctSys => u.cpu_system_usec = first().map(|ns| ns / 1000),
        }
    }
}

#[derive(Default)]
pub struct Stats(Vec<(Stat, std::fs::File)>);

impl Stats {
    /// Opens `dir/file` for `stat`; a file the kernel does not have (older
    /// kernels: memory.peak, pids.peak) leaves that counter null.
    pub fn open(&mut self, stat: Stat, dir: &Path, file: &str) {
        if let Ok(f) = std::fs::File::open(dir.join(file)) {
            self.0.push((stat, f));
        }
    }

    /// Reads every counter (seq_files restart at offset 0).
    pub fn usage(&self) -> Usage {
        let mut u = Usage::default();
        let mut buf = [0u8; 4096];
        for (stat, f) in &self.0 {
            if let Ok(n) = f.read_at(&mut buf, 0) {
                stat.apply(&String::from_utf8_lossy(&buf[..n]), &mut u);
            }
        }
        u
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_read_into_usage() {
        let mut u = Usage::default();
        Stat::MemoryEvents.apply("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n", &mut u);
        Stat::CpuThrottleV1.apply("nr_periods 20\nnr_throttled 19\nthrottled_time 938480000\n", &mut u);
        Stat::CpuUsage.apply("usage_usec 1027\nuser_usec 1023\nsystem_usec 4\n", &mut u);
        Stat::CpuacctSys.apply("5000\n", &mut u);
        Stat::PidsEvents.apply("max 2394\n", &mut u);
        assert_eq!((u.memory_limit_hits, u.oom_kills), (Some(3), Some(1)));
        // v1 throttling survives the unified cpu.stat that lacks it.
        assert_eq!((u.cpu_throttled_periods, u.cpu_throttled_usec), (Some(19), Some(938480)));
        assert_eq!((u.cpu_user_usec, u.cpu_system_usec), (Some(1023), Some(5)));
        assert_eq!(u.pids_limit_hits, Some(2394));
    }
}
