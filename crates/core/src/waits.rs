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
    /// A file cell (the per-inode lock, also the node lock of the node-lock rule), waited
    /// for by an application operation (write, fsync's writeback, truncate, ...).
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
    /// A file cell waited for by a collector (its move commits, node moves, owner checks).
    CellGc,
    /// A file cell waited for by the checkpoint's writeback of every cached inode.
    CellCheckpoint,
}

pub const POINTS: [(Point, &str); 12] = [
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
    (Point::CellGc, "file_cell_gc"),
    (Point::CellCheckpoint, "file_cell_checkpoint"),
];

struct Counter {
    ns: AtomicU64,
    count: AtomicU64,
}

static COUNTERS: [Counter; 12] = [const {
    Counter {
        ns: AtomicU64::new(0),
        count: AtomicU64::new(0),
    }
}; 12];

/// Who the calling thread waits as, for the file-cell wait points: an operation of the
/// application (default), a collector, or the checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    App = 0,
    Gc = 1,
    Checkpoint = 2,
}

thread_local! {
    static ROLE: std::cell::Cell<Role> = const { std::cell::Cell::new(Role::App) };
}

/// Restores the thread's previous role on drop (`as_role`).
pub struct RoleGuard(Role);

impl Drop for RoleGuard {
    fn drop(&mut self) {
        ROLE.with(|r| r.set(self.0));
    }
}

/// Count the calling thread's file-cell waits as `role`'s until the guard drops.
pub fn as_role(role: Role) -> RoleGuard {
    RoleGuard(ROLE.with(|r| r.replace(role)))
}

/// The wait point of a file-cell acquisition by the calling thread.
pub fn cell_point() -> Point {
    match ROLE.with(|r| r.get()) {
        Role::App => Point::Cell,
        Role::Gc => Point::CellGc,
        Role::Checkpoint => Point::CellCheckpoint,
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn count(p: Point) -> u64 {
        COUNTERS[p as usize].count.load(Ordering::Relaxed)
    }

    #[test]
    fn cell_waits_are_counted_by_the_waiters_role() {
        assert_eq!(
            cell_point(),
            Point::Cell,
            "an application thread by default"
        );
        {
            let _g = as_role(Role::Gc);
            assert_eq!(cell_point(), Point::CellGc);
            {
                let _c = as_role(Role::Checkpoint);
                assert_eq!(cell_point(), Point::CellCheckpoint);
            }
            assert_eq!(cell_point(), Point::CellGc, "guards nest");
        }
        assert_eq!(cell_point(), Point::Cell);
        // A contended acquisition as a collector lands on the collector's point.
        let m = Arc::new(Mutex::new(()));
        let held = m.lock();
        let before = count(Point::CellGc);
        let t = {
            let m = m.clone();
            std::thread::spawn(move || {
                let _g = as_role(Role::Gc);
                drop(lock(cell_point(), &m));
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(held);
        t.join().unwrap();
        assert!(count(Point::CellGc) > before);
    }
}
