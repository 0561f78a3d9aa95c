//! What the harness measures besides time: heap allocations (the counting
//! allocator of `alloc-count`), the process's peak resident memory, and
//! each thread's CPU time (`--stats`).

pub(crate) use alloc_count::{allocations, CountingAlloc};

/// Resets the kernel's peak-RSS mark (Linux `clear_refs` 5); false where
/// that is not possible, and then [`peak_rss_mb`] is the process's peak.
pub(crate) fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The peak resident set since the last reset, in MB (`VmHWM`).
pub(crate) fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// One thread's CPU time so far: its id, its name and its user + system
/// time in clock ticks.
pub(crate) struct ThreadCpu {
    tid: u32,
    name: String,
    ticks: u64,
}

/// The CPU time of each of this process's threads so far, from
/// `/proc/self/task/*/stat` (empty where that does not exist). Linux counts
/// it in `USER_HZ` ticks, 100 a second on every architecture it exports
/// to user space, so a share over less than a second is coarse.
pub(crate) fn thread_cpu() -> Vec<ThreadCpu> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let entry = entry.ok()?;
        let tid = entry.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        // The name sits in parentheses and may hold anything, so the
        // fields are counted from the last ')': `rest` starts at field 3
        // (state), and utime, stime are fields 14 and 15.
        let (head, rest) = stat.rsplit_once(')')?;
        let name = head.split_once('(')?.1.to_owned();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(ThreadCpu { tid, name, ticks })
    })
    .collect()
}

/// Each thread's share of one core between two [`thread_cpu`] snapshots
/// taken `wall` apart, for the threads alive at both (the same id and
/// name: an id freed by a thread that ended may be reused): `"pusher 94 %,
/// depengine-cpu-0 95 %, …"` (the process's main thread, which pushes,
/// named `pusher`).
pub(crate) fn cpu_shares(before: &[ThreadCpu], after: &[ThreadCpu], wall: std::time::Duration) -> String {
    const TICKS_PER_SECOND: f64 = 100.0;
    let main = std::process::id();
    let mut shares = Vec::new();
    for a in after {
        if let Some(b) = before.iter().find(|b| b.tid == a.tid && b.name == a.name) {
            // A reused id with the same name would read as less time; count
            // it as none rather than wrap.
            let share = a.ticks.saturating_sub(b.ticks) as f64 / TICKS_PER_SECOND / wall.as_secs_f64() * 100.0;
            let name = if a.tid == main { "pusher" } else { &a.name };
            shares.push(format!("{name} {share:.0} %"));
        }
    }
    shares.join(", ")
}

/// The median of `xs` (sorted in place).
pub(crate) fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// The CPUs this process may run on (its affinity mask: one under
/// `taskset -c 0`).
pub(crate) fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The machine, for the report header.
pub(crate) fn machine() -> String {
    let cpus = cpus();
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    format!("{cpus} cores, {model}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A named thread that burns CPU between two snapshots shows up under
    /// its name with a share above zero, and the process's main thread as
    /// `pusher` (Linux; elsewhere the snapshots are empty and there is
    /// nothing to check). It fails if the name or the tick fields are read
    /// wrong: the probe's ticks are then never seen to grow.
    #[test]
    fn a_busy_thread_shows_up_with_its_share() {
        if thread_cpu().is_empty() {
            return;
        }
        let ticks = |snapshot: &[ThreadCpu]| snapshot.iter().find(|t| t.name == "cpu-probe").map(|t| t.ticks);
        let (started_tx, started) = std::sync::mpsc::channel();
        let (stop, stop_rx) = std::sync::mpsc::channel::<()>();
        let probe = std::thread::Builder::new()
            .name("cpu-probe".into())
            .spawn(move || {
                started_tx.send(()).unwrap();
                while stop_rx.try_recv().is_err() {
                    std::hint::spin_loop();
                }
            })
            .unwrap();
        started.recv().unwrap();
        let before = thread_cpu();
        let first = ticks(&before).expect("the probe thread in /proc/self/task");
        let deadline = Instant::now() + Duration::from_secs(30);
        while ticks(&thread_cpu()).unwrap_or(0) < first + 3 {
            assert!(Instant::now() < deadline, "the probe's CPU ticks never grew");
            std::thread::sleep(Duration::from_millis(5));
        }
        let shares = cpu_shares(&before, &thread_cpu(), Duration::from_secs(1));
        stop.send(()).unwrap();
        probe.join().unwrap();
        assert!(shares.contains("pusher "), "the main thread is named pusher: {shares}");
        let probe_share: f64 = shares
            .split(", ")
            .find_map(|s| s.strip_prefix("cpu-probe "))
            .and_then(|s| s.trim_end_matches(" %").parse().ok())
            .unwrap_or_else(|| panic!("no share for the probe in {shares:?}"));
        assert!(probe_share >= 3.0, "three ticks over one second are at least 3 %: {shares}");
    }
}
