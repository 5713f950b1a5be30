//! What every suite measures with: latency histograms that grow as needed, and the CPU time of
//! this process's threads from `/proc` (the scheduler's run time, which a busy shared machine
//! disturbs less than rates).

use hdrhistogram::Histogram;

/// An empty latency histogram (microseconds). It resizes itself, so recording (with
/// [`record`]) and merging never fail for lack of range.
pub(crate) fn histogram() -> Histogram<u64> {
    // 3 significant figures is within hdrhistogram's supported 0..=5.
    Histogram::new(3).expect("3 significant figures are supported")
}

/// Records `value`, growing the histogram as needed. (`saturating_record` never grows it: it
/// would clamp every latency above the initial 2 ms range.) A value beyond what the histogram
/// can ever grow to, `i64::MAX / 2`, is clamped.
pub(crate) fn record(hist: &mut Histogram<u64>, value: u64) {
    if hist.record(value).is_err() {
        hist.saturating_record(value);
    }
}

/// This thread's kernel id, from the `/proc/thread-self` link (`<pid>/task/<tid>`).
pub(crate) fn current_tid() -> Option<u64> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// CPU time of thread `tid` of this process so far, in nanoseconds.
pub(crate) fn thread_cpu_ns(tid: u64) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// CPU time of every thread of this process so far, in nanoseconds (threads that already exited
/// are not counted: measure around work done by long-lived threads).
pub(crate) fn process_cpu_ns() -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let tid = task.ok()?.file_name().to_str()?.parse().ok()?;
        total += thread_cpu_ns(tid).unwrap_or(0);
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: latencies were recorded with `saturating_record`, which never grows the
    /// histogram, so every one above about 2 ms was clamped and p99s read 2047 us.
    #[test]
    fn long_latencies_are_recorded_exactly() {
        let mut hist = histogram();
        record(&mut hist, 10);
        record(&mut hist, 5_000_000);
        assert_eq!(hist.len(), 2);
        assert!(hist.max() >= 4_990_000, "max {}", hist.max());
        let mut merged = histogram();
        merged.add(&hist).expect("merge");
        assert!(merged.value_at_quantile(1.0) >= 4_990_000);
    }

    #[test]
    fn a_thread_reads_its_own_cpu_time() {
        let tid = current_tid().expect("this thread's id from /proc");
        let before = thread_cpu_ns(tid).expect("cpu time from schedstat");
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let after = thread_cpu_ns(tid).expect("cpu time from schedstat");
        assert!(
            after >= before,
            "cpu time never decreases ({before} -> {after})"
        );
        assert!(x != 1, "the loop ran");
    }
}
