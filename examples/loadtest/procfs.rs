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
    // Fields after the parenthesised command name, which may itself hold spaces.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5); `rest` starts at field 3.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
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
