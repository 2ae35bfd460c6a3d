//! Lock-wait accounting: how long threads waited at each lock or contention point
//! (ScaleLFS Table 3 reports how waiting moves from one lock to the next as each technique
//! is added). Process-wide counters, reset by the bench between runs.
//!
//! Every acquisition first tries the lock; only a failed try is timed, so the uncontended
//! path costs one extra atomic.
//!
//! File-cell waits are counted by the waiter's role (`Role`: application, collector,
//! checkpoint and its pre-pass, flusher) and split by the role of the thread that held the
//! cell (`cell_holders`): every cell acquisition stores the locker's role in the cell (one
//! relaxed store to a line the mutex just wrote), and a waiter reads it when its try fails.

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
    /// A file cell waited for by the checkpoint's writeback of every cached inode, or by
    /// its pre-pass (`writeback_before_checkpoint`).
    CellCheckpoint,
    /// A file cell waited for by the flusher (`flush.rs`: only in a round after one that
    /// wrote nothing; otherwise it skips busy files).
    CellFlusher,
    /// A thread about to checkpoint waiting for another thread's checkpoint pre-pass
    /// (`writeback_before_checkpoint`) instead of running its own.
    Prepass,
    /// An operation that found the dirty-node or inode-cache cap crossed twice over,
    /// waiting for the thread that relieves them (`Fs::relieve_caps`).
    CapRelief,
    /// fsync waiting for a flusher visit's copies of its file's pages to be mapped
    /// (`FsInner::wait_for_writeback`; no lock held).
    WritebackInFlight,
    /// fsync, or the next checkpoint, waiting for a checkpoint's I/O tail to make its
    /// pack durable (`FsInner::wait_durable`; no lock held but, for a checkpoint, the op
    /// lock).
    CheckpointTail,
    /// A node's own lock (`cell::NodeLock`): a `scale` collector checking or remapping a
    /// direct node's blocks without the file's cell, and the cell holder, meet on it.
    Node,
    /// `gc=device`: a writer past the dead limit waiting for the discard checkpoint
    /// (`FsInner::device_discard_due`), since the device may not hold more dead blocks.
    DeadLimit,
}

pub const POINTS: [(Point, &str); 19] = [
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
    (Point::CellFlusher, "file_cell_flusher"),
    (Point::Prepass, "checkpoint_prepass"),
    (Point::CapRelief, "cap_relief"),
    (Point::WritebackInFlight, "writeback_in_flight"),
    (Point::CheckpointTail, "checkpoint_tail"),
    (Point::Node, "node_lock"),
    (Point::DeadLimit, "device_dead_limit"),
];

struct Counter {
    ns: AtomicU64,
    count: AtomicU64,
}

impl Counter {
    const fn new() -> Counter {
        Counter {
            ns: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
    fn add(&self, ns: u64) {
        self.ns.fetch_add(ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }
    fn row(&self, name: &'static str) -> (&'static str, f64, u64) {
        (
            name,
            self.ns.load(Ordering::Relaxed) as f64 / 1e9,
            self.count.load(Ordering::Relaxed),
        )
    }
}

static COUNTERS: [Counter; POINTS.len()] = [const { Counter::new() }; POINTS.len()];

/// Who the calling thread works as. It picks the wait point of the thread's file-cell
/// waits (`cell_point`), and it is the holder tag the thread leaves in every cell it locks
/// (`InodeCell::holder`), so that a waiter can say whom it waited for (`record_cell`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// An operation of the application (the default).
    App = 0,
    /// A collector (cleaning).
    Gc = 1,
    /// The checkpoint (with every operation excluded).
    Checkpoint = 2,
    /// The flusher thread (`flush.rs`).
    Flusher = 3,
    /// The checkpoint's pre-pass under the shared op lock (`writeback_before_checkpoint`),
    /// in whichever thread asked for the checkpoint.
    Prepass = 4,
    /// A writer's own write-back, the last resort (`Fs::balance_inline`).
    Inline = 5,
    /// A policy's discard or upcall thread outside a checkpoint (`gc=none`, `gc=device`).
    Discard = 6,
}

/// Every role with its name in the report, indexed by `Role as usize`.
pub const ROLES: [(Role, &str); 7] = [
    (Role::App, "app"),
    (Role::Gc, "gc"),
    (Role::Checkpoint, "checkpoint"),
    (Role::Flusher, "flusher"),
    (Role::Prepass, "prepass"),
    (Role::Inline, "inline"),
    (Role::Discard, "discard"),
];

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

/// Count the calling thread's file-cell waits, and tag the cells it locks, as `role`'s
/// until the guard drops.
pub fn as_role(role: Role) -> RoleGuard {
    RoleGuard(ROLE.with(|r| r.replace(role)))
}

/// The calling thread's role (the holder tag it leaves in the cells it locks).
pub fn role() -> Role {
    ROLE.with(|r| r.get())
}

/// The wait point of a file-cell acquisition by the calling thread.
pub fn cell_point() -> Point {
    match role() {
        Role::App | Role::Inline | Role::Discard => Point::Cell,
        Role::Gc => Point::CellGc,
        Role::Checkpoint | Role::Prepass => Point::CellCheckpoint,
        Role::Flusher => Point::CellFlusher,
    }
}

/// The file-cell waits by waiter point (the four cell points, in `POINTS` order) and the
/// role that held the cell.
const CELL_POINTS: [Point; 4] = [
    Point::Cell,
    Point::CellGc,
    Point::CellCheckpoint,
    Point::CellFlusher,
];
static BY_HOLDER: [[Counter; ROLES.len()]; CELL_POINTS.len()] =
    [const { [const { Counter::new() }; ROLES.len()] }; CELL_POINTS.len()];

/// Record a file-cell wait at `p` that started at `t0`, behind a cell whose holder tag was
/// `held_by` (a `Role as u8`) when the wait began. The tag is stored just after the lock is
/// taken, so a wait that starts in that window is charged to the previous holder.
pub fn record_cell(p: Point, held_by: u8, t0: Instant) {
    let ns = t0.elapsed().as_nanos() as u64;
    COUNTERS[p as usize].add(ns);
    if let Some(row) = CELL_POINTS.iter().position(|&c| c == p) {
        BY_HOLDER[row][(held_by as usize).min(ROLES.len() - 1)].add(ns);
    }
}

/// Record one wait of `ns` nanoseconds in all (a wait made of several blocked stretches).
pub fn record_ns(p: Point, ns: u64) {
    COUNTERS[p as usize].add(ns);
}

/// Record a wait that started at `t0`.
pub fn record(p: Point, t0: Instant) {
    COUNTERS[p as usize].add(t0.elapsed().as_nanos() as u64);
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
        .map(|&(p, name)| COUNTERS[p as usize].row(name))
        .collect()
}

/// (waiter point, holder role, seconds waited, contended acquisitions) for every file-cell
/// point and holder that saw a wait: whom each kind of waiter waited for.
pub fn cell_holders() -> Vec<(&'static str, &'static str, f64, u64)> {
    let mut v = Vec::new();
    for (row, &p) in CELL_POINTS.iter().enumerate() {
        for &(h, holder) in &ROLES {
            let (point, s, n) = BY_HOLDER[row][h as usize].row(POINTS[p as usize].1);
            if n > 0 {
                v.push((point, holder, s, n));
            }
        }
    }
    v
}

pub fn reset() {
    for c in COUNTERS.iter().chain(BY_HOLDER.iter().flatten()) {
        c.ns.store(0, Ordering::Relaxed);
        c.count.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// `POINTS` and `ROLES` are indexed by their enums' values (`snapshot`, `cell_holders`).
    #[test]
    fn tables_follow_their_enums() {
        for (i, &(p, _)) in POINTS.iter().enumerate() {
            assert_eq!(p as usize, i);
        }
        for (i, &(r, _)) in ROLES.iter().enumerate() {
            assert_eq!(r as usize, i);
        }
    }

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
            for (r, p) in [
                (Role::Prepass, Point::CellCheckpoint),
                (Role::Flusher, Point::CellFlusher),
                (Role::Inline, Point::Cell),
                (Role::Discard, Point::Cell),
            ] {
                let _c = as_role(r);
                assert_eq!(cell_point(), p);
            }
            assert_eq!(cell_point(), Point::CellGc, "guards nest");
        }
        assert_eq!(cell_point(), Point::Cell);
        // A contended acquisition as a collector lands on the collector's point. The
        // acquisition is contended only if the thread reaches it before the lock is let go:
        // a loaded machine may not run a new thread within the wait, so the wait doubles
        // (20 ms to 640 ms) until it did. Counted elsewhere, it never lands here.
        let m = Arc::new(Mutex::new(()));
        let before = count(Point::CellGc);
        for attempt in 0..6 {
            let held = m.lock();
            let t = {
                let m = m.clone();
                std::thread::spawn(move || {
                    let _g = as_role(Role::Gc);
                    drop(lock(cell_point(), &m));
                })
            };
            std::thread::sleep(std::time::Duration::from_millis(20 << attempt));
            drop(held);
            t.join().unwrap();
            if count(Point::CellGc) > before {
                break;
            }
        }
        assert!(count(Point::CellGc) > before);
    }
}
