//! CPU time and memory of processes and threads, from `/proc`.

use std::path::Path;

/// Clock ticks per second of `utime`/`stime` in `/proc/*/stat` (USER_HZ, 100 on Linux).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// user + system CPU seconds of the process or thread whose `stat` file this is.
pub fn cpu_seconds(stat: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(stat).ok()?;
    user_system_seconds(&text).map(|(user, system)| user + system)
}

pub fn process_cpu(pid: u32) -> f64 {
    cpu_seconds(Path::new(&format!("/proc/{pid}/stat"))).unwrap_or(f64::NAN)
}

/// A `kB` line of `/proc/PID/status` (`VmHWM`, `VmRSS`), in MiB.
pub fn status_mib(pid: u32, key: &str) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| {
            let v = l.strip_prefix(key)?.strip_prefix(':')?;
            v.trim().trim_end_matches("kB").trim().parse::<f64>().ok()
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// The calling thread's `stat` file, to measure one thread of this process.
pub fn this_thread_stat() -> std::path::PathBuf {
    let link = std::fs::read_link("/proc/thread-self").unwrap_or_default();
    Path::new("/proc").join(link).join("stat")
}

/// What a process spent, from `/proc`: CPU split into user and kernel time, and the counts that
/// do not depend on how busy the machine is (system calls, bytes through them, context
/// switches). Comparing two builds or configurations by these tells *where* a CPU difference
/// comes from even when CPU seconds themselves are too noisy to compare.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    pub user_s: f64,
    pub system_s: f64,
    /// System calls the kernel counts as reads and writes (`syscr`, `syscw` of `/proc/PID/io`):
    /// `read`, `readv`, `write`, `writev`, but not `recv`/`send` on sockets. kube2nats reads
    /// sockets with `recv` (so reads count ~0) and writes to NATS with `writev`.
    pub read_calls: f64,
    pub write_calls: f64,
    /// Bytes through those calls (`rchar`, `wchar`: sockets included).
    pub read_bytes: f64,
    pub written_bytes: f64,
    /// Context switches of every live thread: waits (voluntary) and preemptions (involuntary).
    pub voluntary_switches: f64,
    pub involuntary_switches: f64,
    /// Minor page faults: memory touched for the first time (fresh buffers instead of reused ones).
    pub minor_faults: f64,
}

impl Counters {
    /// The counters of process `pid` now (`NaN` where unreadable).
    pub fn read(pid: u32) -> Counters {
        let dir = Path::new("/proc").join(pid.to_string());
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let (user_s, system_s) = user_system_seconds(&stat).unwrap_or((f64::NAN, f64::NAN));
        let io = std::fs::read_to_string(dir.join("io")).unwrap_or_default();
        let io_field = |key: &str| field(&io, key).unwrap_or(f64::NAN);
        let (mut voluntary, mut involuntary) = (0.0, 0.0);
        for task in std::fs::read_dir(dir.join("task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            voluntary += field(&status, "voluntary_ctxt_switches").unwrap_or(0.0);
            involuntary += field(&status, "nonvoluntary_ctxt_switches").unwrap_or(0.0);
        }
        Counters {
            user_s,
            system_s,
            read_calls: io_field("syscr"),
            write_calls: io_field("syscw"),
            read_bytes: io_field("rchar"),
            written_bytes: io_field("wchar"),
            voluntary_switches: voluntary,
            involuntary_switches: involuntary,
            minor_faults: stat_field(&stat, 10).unwrap_or(f64::NAN),
        }
    }

    /// What was spent between `earlier` and `self`, scaled by `factor` (e.g. to per 100k events).
    pub fn since(&self, earlier: &Counters, factor: f64) -> Counters {
        let d = |now: f64, then: f64| (now - then) * factor;
        Counters {
            user_s: d(self.user_s, earlier.user_s),
            system_s: d(self.system_s, earlier.system_s),
            read_calls: d(self.read_calls, earlier.read_calls),
            write_calls: d(self.write_calls, earlier.write_calls),
            read_bytes: d(self.read_bytes, earlier.read_bytes),
            written_bytes: d(self.written_bytes, earlier.written_bytes),
            voluntary_switches: d(self.voluntary_switches, earlier.voluntary_switches),
            involuntary_switches: d(self.involuntary_switches, earlier.involuntary_switches),
            minor_faults: d(self.minor_faults, earlier.minor_faults),
        }
    }
}

/// Field `number` (counted from 1, as in proc(5)) of the text of a `stat` file.
fn stat_field(text: &str, number: usize) -> Option<f64> {
    // The fields after the parenthesised command name (which may itself hold spaces) start at 3.
    let rest = text.get(text.rfind(')')? + 2..)?;
    rest.split_whitespace()
        .nth(number.checked_sub(3)?)?
        .parse()
        .ok()
}

/// utime and stime (fields 14 and 15, in seconds) of the text of a `stat` file.
fn user_system_seconds(stat: &str) -> Option<(f64, f64)> {
    let ticks = clock_ticks();
    Some((stat_field(stat, 14)? / ticks, stat_field(stat, 15)? / ticks))
}

/// The number after `key:` in a `key: value` file (`/proc/PID/io`, `/proc/PID/status`).
fn field(text: &str, key: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

/// Threads of the process.
pub fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, Iterator::count)
}

/// The `n` mappings of `/proc/PID/smaps` holding the most resident memory, largest first, as
/// `(rss KiB, anonymous KiB, what)`: the file's name, `[heap]`, `[stack]`, or the address range
/// of an anonymous mapping.
pub fn largest_mappings(pid: u32, n: usize) -> Vec<(u64, u64, String)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut out: Vec<(u64, u64, String)> = Vec::new();
    let kib = |l: &str| {
        l.split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or_default();
        if first.contains('-') && !first.ends_with(':') {
            let mut fields = line.split_whitespace();
            let range = fields.next().unwrap_or_default().to_owned();
            let perms = fields.next().unwrap_or_default();
            let name = fields.nth(3).map_or(range.clone(), str::to_owned);
            out.push((0, 0, format!("{name} {perms}")));
        } else if let Some(last) = out.last_mut() {
            if line.starts_with("Rss:") {
                last.0 = kib(line);
            } else if line.starts_with("Anonymous:") {
                last.1 = kib(line);
            }
        }
    }
    out.sort_by_key(|m| std::cmp::Reverse(m.0));
    out.truncate(n);
    out
}
