//! What the harness measures besides time: heap allocations (the counting
//! allocator of `alloc-count`) and the process's peak resident memory.

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

/// The median of `xs` (sorted in place).
pub(crate) fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// The machine, for the report header.
pub(crate) fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    format!("{cpus} cores, {model}")
}
