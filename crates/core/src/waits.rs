//! Lock-wait accounting: how long threads waited at each lock or contention point
//! (ScaleLFS Table 3 reports how waiting moves from one lock to the next as each technique
//! is added). Process-wide counters, reset by the bench between runs.
//!
//! Every acquisition first tries the lock; only a failed try is timed, so the uncontended
//! path costs one extra atomic.

use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Contention points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// Operations waiting for the op lock (a checkpoint holds it).
    OpShared = 0,
    /// The checkpoint waiting for running operations.
    OpExclusive,
    /// A file cell (the per-inode lock, also the node lock of the node-lock rule).
    Cell,
    /// A log head.
    LogHead,
    /// The victim protector: I/O waiting for a page being migrated.
    Svp,
    /// Victim selection under one lock (ScaleLFS without CVS).
    VictimSelect,
    /// SIT updates under one lock (ScaleLFS without LSU).
    Sit,
    /// Writers waiting for foreground cleaning (F2FS gc_mutex).
    GcLock,
    /// Writers waiting for room in the log-write queue (device back-pressure; no lock
    /// held).
    IoQueue,
    /// The log-write queue's own locks (`io.rs` `state` and `spare`), shared by every mlog:
    /// taken once per 256 KiB log write.
    IoPool,
}

pub const POINTS: [(Point, &str); 10] = [
    (Point::OpShared, "op_lock_shared"),
    (Point::OpExclusive, "op_lock_checkpoint"),
    (Point::Cell, "file_cell"),
    (Point::LogHead, "log_head"),
    (Point::Svp, "victim_protector"),
    (Point::VictimSelect, "victim_selection"),
    (Point::Sit, "sit"),
    (Point::GcLock, "gc_lock"),
    (Point::IoQueue, "io_queue"),
    (Point::IoPool, "io_pool"),
];

struct Counter {
    ns: AtomicU64,
    count: AtomicU64,
}

static COUNTERS: [Counter; 10] = [const {
    Counter {
        ns: AtomicU64::new(0),
        count: AtomicU64::new(0),
    }
}; 10];

/// Record a wait that started at `t0`.
pub fn record(p: Point, t0: Instant) {
    let c = &COUNTERS[p as usize];
    c.ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    c.count.fetch_add(1, Ordering::Relaxed);
}

/// Lock `m`, timing the wait if it is contended.
pub fn lock<'a, T>(p: Point, m: &'a Mutex<T>) -> MutexGuard<'a, T> {
    if let Some(g) = m.try_lock() {
        return g;
    }
    let t0 = Instant::now();
    let g = m.lock();
    record(p, t0);
    g
}

/// (name, seconds waited, contended acquisitions) per point.
pub fn snapshot() -> Vec<(&'static str, f64, u64)> {
    POINTS
        .iter()
        .map(|&(p, name)| {
            let c = &COUNTERS[p as usize];
            (
                name,
                c.ns.load(Ordering::Relaxed) as f64 / 1e9,
                c.count.load(Ordering::Relaxed),
            )
        })
        .collect()
}

pub fn reset() {
    for c in &COUNTERS {
        c.ns.store(0, Ordering::Relaxed);
        c.count.store(0, Ordering::Relaxed);
    }
}
